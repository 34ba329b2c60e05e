"""The ``/mcp`` endpoint on the gateway port: both MCP protocol generations over raw ASGI.

asgi.py takes the request (key, Origin, body) and picks the generation;
legacy.py (sessions) and modern.py (2026-07-28) shape what goes in and out;
dispatch.py lists and calls tools for either; streams.py relays list changes;
wire.py and errors.py are the bytes.
"""
