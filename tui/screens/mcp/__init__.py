"""The MCP screen: the gateway's company MCP servers, their grants, how agents reach them."""
