"""How the MCP screen draws what ``llmgw ctl mcp list`` and ``mcp grants`` reply.

A server's row: its name, state, breaker, rate, timeout, header names (the
sealed ones marked; values never reach the console), address and its tools; a
grant's row: its scope and target. Both, and the panel saying how an agent is
pointed at ``/mcp`` with its own key, are drawn by the command's own helpers
(``llmgw.present.mcpfmt``, which ``llmgw ctl mcp`` draws with too): the screen shows what the command prints.
"""

from __future__ import annotations

import json

from rich.text import Text

from llmgw.present.mcpfmt import (
    GRANT_COLUMNS,
    KEY_PLACEHOLDER,
    SERVER_COLUMNS,
    client_config,
    server_cells,
)
from proto.llmgw.v1 import McpGrantView, McpServerView

__all__ = ["GRANT_COLUMNS", "SERVER_COLUMNS", "server_cells"]

NO_SERVERS = "No company MCP servers yet: press a to add one (llmgw ctl mcp add NAME --url URL)."
NO_GRANTS = (
    "No grants: no key sees any tool. Press g to grant a server (or SERVER.TOOL) to an org,"
    " team, project or key."
)


def keys_of(columns: tuple[str, ...]) -> tuple[str, ...]:
    """DataTable column keys: the headings, lower case."""
    return tuple(c.lower().replace(" ", "_") for c in columns)


def who_of(scope: str) -> str:
    """A grant's scope as ``ctl mcp grant WHO`` takes it: ``org:Acme`` → ``Acme``,
    ``key:key_1a`` → ``key_1a``."""
    return scope.partition(":")[2] or scope


def grant_key(g: McpGrantView) -> str:
    return f"{g.scope} {g.target}"


def grant_cells(g: McpGrantView) -> tuple[str, ...]:
    """As ``ctl mcp grants`` draws a grant: its scope, its target, since when."""
    return (g.scope, g.target, g.created_at)


def details_text(v: McpServerView) -> str:
    """The selected server's line under the tables: what the row has no room for."""
    if v.builtin:
        return (
            f"{v.name}: llmgw's own read-only tools, answered from the admin methods ctl uses;"
            " granted like any other server. Listed as llmgw_admin.TOOL."
        )
    parts = [v.name]
    if v.description:
        parts.append(v.description)
    parts.append(v.transport.replace("_", " "))
    parts.append(f"{len(v.grants)} grant(s)")
    if v.tools:
        parts.append(f"tools: {', '.join(v.tools)}")
    return " · ".join(parts)


def agent_help(endpoint: str) -> Text:
    """How an agent or IDE is pointed at the gateway with its own llmgw key: what
    ``ctl mcp list`` ends with, in three lines (its config on one)."""
    url = endpoint or "http://GATEWAY:PORT/mcp"
    config = json.dumps(json.loads(client_config(url)))
    return Text.assemble(
        "Agents: an MCP client at ",
        (url, "bold"),
        " with the header ",
        (f"Authorization: Bearer {KEY_PLACEHOLDER}", "bold"),
        " (a key from the Keys screen) sees the tools granted to its key, project, team or"
        " org, as SERVER.TOOL. Its config:\n",
        (config, "cyan"),
    )
