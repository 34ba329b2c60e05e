-- A sealed MCP credential is bound to the origin (scheme://host:port) of its server's
-- address (gatewayd/mcp/seal.py). Those sealed before were bound to their ref alone:
-- origin_bound 0 marks them, and gatewayd seals each again for its server's origin when
-- it starts (gatewayd/mcp/rebind.py). Every credential sealed from now on is bound (1).
ALTER TABLE mcp_secrets ADD COLUMN origin_bound INTEGER NOT NULL DEFAULT 1;
UPDATE mcp_secrets SET origin_bound = 0;
