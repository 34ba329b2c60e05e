"""Names on the MCP gateway: servers, the tools it lists, and who a grant is for.

A company server is named like ``hr`` or ``jira-cloud``; its tools are listed to
callers as ``SERVER.TOOL`` (``hr.lookup``), a valid MCP tool name (SEP-986:
1-128 of ``A-Z a-z 0-9 _ - .``). The built-in read-only server is called
``llmgw:admin`` in grants and lists; its tools are listed as ``llmgw_admin.TOOL``
because ``:`` is not allowed in a tool name. Names beginning with ``llmgw`` are
kept for llmgw's own servers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

ADMIN_SERVER = "llmgw:admin"
ADMIN_PREFIX = "llmgw_admin"

_SERVER = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_TOOL = re.compile(r"[A-Za-z0-9._-]{1,128}")
_KEY_ID = re.compile(r"key_[0-9a-f]+")
_LEVEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}(/[A-Za-z0-9][A-Za-z0-9._-]{0,62}){0,2}")


class McpNameRefused(ValueError):
    """A name, address or grant the MCP gateway will not take; the message says why."""


def check_server_name(name: str, *, builtin_ok: bool = False) -> str:
    if builtin_ok and name in (ADMIN_SERVER, ADMIN_PREFIX):
        return ADMIN_SERVER
    if not _SERVER.fullmatch(name):
        raise McpNameRefused(
            f"{name!r} is not a valid MCP server name: 1-63 lower-case letters, digits,"
            " '_' or '-', starting with a letter or digit"
        )
    if name.startswith("llmgw"):
        raise McpNameRefused(f"{name!r}: names beginning with 'llmgw' are kept for llmgw's own")
    return name


def prefix_of(server: str) -> str:
    """The prefix a server's tools are listed under: ``hr`` → ``hr``, ``llmgw:admin`` →
    ``llmgw_admin``."""
    return ADMIN_PREFIX if server == ADMIN_SERVER else server


def listed_name(server: str, tool: str) -> str | None:
    """``SERVER.TOOL`` as callers see it; None when that is not a valid MCP tool name
    (such a tool is not listed)."""
    name = f"{prefix_of(server)}.{tool}"
    return name if _TOOL.fullmatch(name) else None


def split_listed(name: str) -> tuple[str, str] | None:
    """``hr.lookup`` → (``hr``, ``lookup``); ``llmgw_admin.list_nodes`` →
    (``llmgw:admin``, ``list_nodes``); None when it names no server's tool."""
    server, dot, tool = name.partition(".")
    if not dot or not tool:
        return None
    return (ADMIN_SERVER if server == ADMIN_PREFIX else server), tool


def check_address(url: str) -> str:
    """A company server's address: http(s), a host, no ``user:password@``."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise McpNameRefused(f"{url!r} is not an http:// or https:// address")
    if parts.username is not None or parts.password is not None:
        raise McpNameRefused(
            f"{parts.scheme}://…@{parts.hostname}: an address may not carry a user or password;"
            " give the credential with --bearer-file or --header-file instead"
        )
    origin_of(url)  # a port that is no number is refused here, not at the first call
    return url


# The port an address without one is reached on.
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str:
    """Where an address's credentials belong: ``scheme://host:port``, the port always written.

    ``https://HR.internal/mcp`` and ``https://hr.internal:443/other`` are one origin;
    ``http://hr.internal/mcp`` and ``https://hr.internal:8443/mcp`` are two others. A
    company server's sealed credentials are bound to it (gatewayd.mcp.seal).
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        raise McpNameRefused(f"{url!r}: its port is not a number from 0 to 65535") from None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address, as an address writes it
    if port is None:
        port = _DEFAULT_PORTS.get(scheme, 0)
    return f"{scheme}://{host}:{port}"


def transport_of(url: str) -> str:
    """``sse`` for an address whose path ends in ``/sse``, else ``streamable_http``."""
    return "sse" if urlsplit(url).path.rstrip("/").endswith("/sse") else "streamable_http"


@dataclass(frozen=True)
class Grantee:
    """Who a grant is for, as the store names it: ``key:key_…`` or ``org:A`` /
    ``team:A/t`` / ``project:A/t/p``."""

    kind: str  # "key", "org", "team" or "project"
    path: str  # the key id or the level's path

    @property
    def scope(self) -> str:
        return f"{self.kind}:{self.path}"


def parse_who(who: str) -> Grantee:
    """``key_…`` → a key; ``ORG``, ``ORG/TEAM``, ``ORG/TEAM/PROJECT`` → that level.
    ``key:…``/``org:…``/``team:…``/``project:…`` are taken too."""
    kind, colon, rest = who.partition(":")
    if colon and kind in ("key", "org", "team", "project"):
        who = rest
    if _KEY_ID.fullmatch(who):
        return Grantee("key", who)
    if not _LEVEL.fullmatch(who):
        raise McpNameRefused(
            f"{who!r} is neither a key id (key_…) nor ORG, ORG/TEAM or ORG/TEAM/PROJECT"
        )
    return Grantee(("org", "team", "project")[who.count("/")], who)


def parse_what(what: str) -> tuple[str, str]:
    """``SERVER`` → (server, ``*``); ``SERVER.TOOL`` → (server, tool). The server may be
    ``llmgw:admin``; a tool may be given bare or as listed."""
    server, dot, tool = what.partition(".")
    server = check_server_name(server, builtin_ok=True)
    if not dot:
        return server, "*"
    if not _TOOL.fullmatch(tool):
        raise McpNameRefused(f"{tool!r} is not a valid MCP tool name")
    return server, tool


def grant_target(server: str, tool: str) -> str:
    """How a grant's target is written: ``hr`` (every tool) or ``hr.lookup``."""
    return server if tool == "*" else f"{server}.{tool}"
