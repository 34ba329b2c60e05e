-- A sealed MCP credential is bound to the origin (scheme://host:port) of its server's
-- address (gatewayd/mcp/seal.py). Those sealed before were bound to their ref alone:
-- origin_bound false marks them, and gatewayd seals each again for its server's origin
-- when it starts (gatewayd/mcp/rebind.py). Every credential sealed from now on is bound.
ALTER TABLE mcp_secrets ADD COLUMN origin_bound boolean NOT NULL DEFAULT true;
UPDATE mcp_secrets SET origin_bound = false;
