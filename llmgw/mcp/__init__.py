"""The MCP gateway's shared pieces: its server.yaml section and the rules for its names."""
