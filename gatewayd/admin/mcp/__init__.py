"""The admin API of the MCP gateway: company servers, grants, their checks and usage."""
