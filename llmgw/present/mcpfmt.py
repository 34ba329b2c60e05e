"""How the MCP gateway reads to people, in ``llmgw ctl mcp …`` and the console's MCP screen.

Both draw a server's row from ``server_cells`` under ``SERVER_COLUMNS`` (name,
state, breaker, rate, timeout, header names — the sealed ones marked; values
never reach either — address, tools), a grant as ``grant_line``, and how an
agent is pointed at ``/mcp`` with its own key as ``client_config`` /
``how_to_connect``.
"""

from __future__ import annotations

import json as _json

from rich.text import Text

from proto.llmgw.v1 import McpServerView

SERVER_COLUMNS = ("NAME", "STATE", "BREAKER", "RATE", "TIMEOUT", "HEADERS", "ADDRESS", "TOOLS")
GRANT_COLUMNS = ("WHO", "WHAT", "SINCE")
USAGE_SUMS = ("CALLS", "ERRORS", "AVG MS", "P99 MS", "IN", "OUT")
NO_SERVERS = (
    "No company MCP servers yet. Add one: llmgw ctl mcp add NAME --url URL --bearer-file FILE"
)
NO_GRANTS = "No grants: no key sees any MCP tool. Give one: llmgw ctl mcp grant WHO SERVER[.TOOL]"
KEY_PLACEHOLDER = "<your llmgw key>"
_STATE_STYLE = {"ok": "green", "failing": "red", "off": "dim", "unknown": "yellow"}


def client_config(endpoint: str) -> str:
    """The entry an MCP client (IDE, agent) is given to reach the gateway, as JSON."""
    entry = {
        "type": "http",
        "url": endpoint,
        "headers": {"Authorization": f"Bearer {KEY_PLACEHOLDER}"},
    }
    return _json.dumps({"mcpServers": {"llmgw": entry}}, indent=2)


def how_to_connect(endpoint: str) -> Text:
    where = endpoint or "the gateway's /mcp"
    return Text.assemble(
        "Agents and IDEs reach the tools granted to them at ",
        (where, "bold"),
        " with their own llmgw key (llmgw ctl keys create), e.g. in an MCP client's config:\n",
        (client_config(endpoint or "http://GATEWAY:PORT/mcp"), "cyan"),
        (
            "\nA key sees only the tools granted to it or to its project, team or organization.",
            "dim",
        ),
    )


def headers_text(v: McpServerView) -> str:
    names = [*v.header_names, *(f"{n} (sealed)" for n in v.sealed_header_names)]
    return ", ".join(names) or "-"


def dropped_text(v: McpServerView) -> str:
    """What a change of address did to the sealed headers: "" when it dropped none."""
    if not v.sealed_headers_dropped:
        return ""
    names = ", ".join(v.sealed_headers_dropped)
    return (
        f"Dropped the sealed {names}: they were sealed for the old address, and {v.url} is"
        " another origin (scheme, host or port). Give them again if it should have them:"
        f" llmgw ctl mcp change {v.name} --bearer-file FILE (or --header-file NAME=FILE)"
    )


def rate_text(v: McpServerView) -> str:
    return f"{v.rate_per_minute}/min" if v.rate_per_minute else "-"


def timeout_text(v: McpServerView) -> str:
    return f"{v.timeout_s:g} s" if v.timeout_s else "default"


def breaker_text(v: McpServerView) -> str:
    if v.builtin:
        return "-"
    state = (v.breaker or "closed").replace("_", "-")
    return f"{state}: {v.breaker_reason}" if v.breaker_reason and state != "closed" else state


def state_text(v: McpServerView) -> Text:
    state = v.state or "unknown"
    return Text(state, style=_STATE_STYLE.get(state, ""))


def address_text(v: McpServerView) -> str:
    if v.builtin:
        return "built in (read-only)"
    return f"{v.url} (SSE)" if v.transport == "sse" else v.url


def server_cells(v: McpServerView) -> list:
    tools = str(len(v.tools)) if v.tools else "-"
    return [
        v.name,
        state_text(v),
        breaker_text(v),
        rate_text(v),
        timeout_text(v) if not v.builtin else "-",
        headers_text(v),
        address_text(v),
        tools,
    ]


def grant_line(scope: str, target: str) -> str:
    return f"{scope} → {target}"
