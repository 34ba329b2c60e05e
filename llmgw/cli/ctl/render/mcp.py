"""How ``llmgw ctl mcp`` replies look to people (``--json`` prints the replies as they are).

Header values never appear anywhere here: the admin API sends names only, and
these renderers show what it sends. ``list`` ends with how an agent points at
``/mcp`` with its own key, as an MCP client's configuration.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from llmgw.errors import LlmgwError
from llmgw.present.mcpfmt import (
    GRANT_COLUMNS,
    NO_GRANTS,
    NO_SERVERS,
    SERVER_COLUMNS,
    USAGE_SUMS,
    address_text,
    breaker_text,
    dropped_text,
    grant_line,
    how_to_connect,
    rate_text,
    server_cells,
    state_text,
    timeout_text,
)
from llmgw.present.mirrorfmt import size_text
from llmgw.present.output import renders
from proto.llmgw.v1 import (
    ListMcpGrantsReply,
    ListMcpServersReply,
    McpGrantReply,
    McpServerView,
    McpTestReply,
    McpUsageReply,
    RemoveMcpServerReply,
)


@renders(ListMcpServersReply)
def _servers(reply: ListMcpServersReply):
    company = [s for s in reply.servers if not s.builtin]
    t = Table(title=f"MCP servers ({len(company)} and llmgw:admin)", title_justify="left")
    for col in SERVER_COLUMNS:
        t.add_column(col, overflow="fold")
    for v in reply.servers:
        t.add_row(*server_cells(v))
    parts: list = [t]
    if not company:
        parts.append(Text(NO_SERVERS))
    parts.append(how_to_connect(reply.endpoint))
    return Group(*parts)


@renders(McpServerView)
def _server(v: McpServerView):
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    rows: list[tuple[str, str | Text]] = [
        ("name", v.name),
        ("address", address_text(v)),
        ("description", v.description or "-"),
        ("state", state_text(v) if v.enabled or v.builtin else Text("off", style="dim")),
    ]
    if not v.builtin:
        rows += [
            ("breaker", breaker_text(v)),
            ("rate", rate_text(v) + (" per key" if v.rate_per_minute else "")),
            ("timeout", timeout_text(v)),
            ("headers", ", ".join(v.header_names) or "-"),
            ("sealed headers", ", ".join(v.sealed_header_names) or "-"),
        ]
        if v.sealed_headers_dropped:
            rows.append(("credentials", Text(dropped_text(v), style="yellow")))
    unseen = f"not listed yet (llmgw ctl mcp test {v.name})"
    rows.append(("tools", ", ".join(v.tools) or unseen))
    rows.append(("grants", "\n".join(grant_line(g.scope, g.target) for g in v.grants) or "none"))
    if v.created_at:
        rows.append(("added", v.created_at))
    if v.updated_at and v.updated_at != v.created_at:
        rows.append(("changed", v.updated_at))
    for k, value in rows:
        facts.add_row(k, value)
    return facts


@renders(McpTestReply)
def _tested(r: McpTestReply):
    if not r.ok:
        return Text(f"{r.name}: {r.error}", style="red")
    tools = ", ".join(r.tools) if r.tools else "none"
    version = f", protocol {r.protocol_version}" if r.protocol_version else ""
    return Text.assemble(
        ("OK: ", "green"),
        f"{r.name} answered in {r.latency_ms:.1f} ms{version}; {len(r.tools)} tool(s): {tools}",
    )


def failed_test_error(r: McpTestReply) -> LlmgwError:
    return LlmgwError(
        f"{r.name} could not be used: {r.error or 'no reason given'}",
        hint=f"check its address and credential (llmgw ctl mcp show {r.name});"
        f" change them with llmgw ctl mcp change {r.name} --url URL --bearer-file FILE",
    )


@renders(RemoveMcpServerReply)
def _removed(r: RemoveMcpServerReply):
    grants = f" and {r.grants_removed} grant(s) naming it" if r.grants_removed else ""
    return Text(f"Removed {r.name}{grants}; its sealed credentials are gone.")


def grant_text(r: McpGrantReply, *, revoked: bool) -> Text:
    g = r.grant
    what = grant_line(g.scope, g.target) if g else "the grant"
    if revoked:
        return Text(f"Revoked {what}." if r.changed else f"There was no grant {what}.")
    return Text(f"Granted {what}." if r.changed else f"Already granted: {what}.")


def grant_hint(name: str) -> str:
    return (
        f"Let keys use it: llmgw ctl mcp grant WHO {name} (or {name}.TOOL); WHO is a key id,"
        " or ORG, ORG/TEAM or ORG/TEAM/PROJECT for every key beneath it"
    )


def granted_step(who: str) -> str:
    return (
        f"Its keys see the tools within seconds (tools/list at /mcp).\n"
        f"Check it: llmgw ctl mcp grants {who}"
    )


def revoked_step(who: str, r: McpGrantReply) -> str:
    if r.still_granted_by:
        still = "; ".join(r.still_granted_by)
        return f"Still given by: {still}\nTake those back too with llmgw ctl mcp revoke WHO WHAT"
    return f"Its keys stop seeing it within seconds. Check it: llmgw ctl mcp grants {who}"


@renders(ListMcpGrantsReply)
def _grants(reply: ListMcpGrantsReply):
    if not reply.grants:
        return Text(NO_GRANTS)
    t = Table(title=f"MCP grants ({len(reply.grants)})", title_justify="left")
    for col in GRANT_COLUMNS:
        t.add_column(col, overflow="fold")
    for g in reply.grants:
        t.add_row(g.scope, g.target, g.created_at)
    return t


def usage_table(reply: McpUsageReply, dims: list[str], span: str) -> Table | Text:
    if not reply.groups:
        return Text(f"No MCP calls {span}.")
    t = Table(title=f"MCP calls {span} ({reply.calls})", title_justify="left")
    for d in dims:
        t.add_column(d.upper())
    for col in USAGE_SUMS:
        t.add_column(col, justify="right")
    for g in reply.groups:
        t.add_row(
            *(g.group.get(d, "") for d in dims),
            str(g.calls),
            str(g.errors),
            f"{g.latency_ms_avg:.1f}",
            f"{g.latency_ms_p99:.1f}",
            size_text(g.bytes_in),
            size_text(g.bytes_out),
        )
    return t
