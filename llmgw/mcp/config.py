"""server.yaml ``mcp:``: the gateway's ``/mcp`` endpoint and how it treats company MCP servers."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MIB = 1024 * 1024


class McpConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Serve /mcp on the gateway port.
    enabled: bool = True
    # A request body past this is refused with 413, saying so (base64 images fit).
    max_body_bytes: Annotated[int, Field(ge=1024)] = 64 * MIB
    # Origins a browser-borne request may come from ("http://host:port", "*" any);
    # a request with no Origin header (agents, IDEs, SDKs) is always let through.
    allowed_origins: list[str] = []
    # A session-based (2025-xx) client's session ends after this long unused.
    session_idle_s: Annotated[float, Field(gt=0)] = 1800.0
    # An upstream connection a caller has not used for this long is closed.
    upstream_idle_s: Annotated[float, Field(gt=0)] = 600.0
    # A server's calls take at most this long unless it says otherwise (--timeout).
    default_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    # Failures in a row that open a server's breaker, and how long it stays open
    # before one trial call is let through.
    breaker_failures: Annotated[int, Field(ge=1)] = 5
    breaker_open_s: Annotated[float, Field(gt=0)] = 30.0
    # How often servers and grants are read again from the store (changes made on
    # another control plane reach this one within it).
    refresh_interval_s: Annotated[float, Field(gt=0)] = 2.0
