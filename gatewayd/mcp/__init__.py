"""The MCP gateway: /mcp on the gateway port, the company MCP servers behind it."""
