"""``llmgw ctl mcp``: the company MCP servers agents reach through the gateway's ``/mcp``.

A server is added with its address and the credential the gateway sends it
(``--bearer-file``, ``--header-file``): ctl reads those files here and sends
the value to gatewayd on its 127.0.0.1 admin port, where it is sealed in the
store; nothing prints a value again, only header names. Nobody sees a server's
tools until a grant names it (``grant WHO SERVER[.TOOL]``), and what a key
may call is all it is shown. ``llmgw:admin`` is the built-in read-only server.
How the replies look: llmgw/cli/ctl/render/mcp.py.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

import llmgw.cli.ctl.render.mcp  # noqa: F401  (registers the renderers)
from llmgw.admin_client import AdminClient
from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.cli.ctl.render.mcp import (
    failed_test_error,
    grant_hint,
    grant_text,
    granted_step,
    revoked_step,
    usage_table,
)
from llmgw.cli.ctl.usage import period
from llmgw.errors import ExitCode, LlmgwError, UsageError
from llmgw.mcp.names import (
    ADMIN_SERVER,
    McpNameRefused,
    check_address,
    check_server_name,
    parse_what,
    parse_who,
)
from llmgw.paths import resolve
from llmgw.present import output
from llmgw.present.usagefmt import short_time
from proto.llmgw.v1 import McpUsageRequest, PutMcpServerRequest

mcp_app = typer.Typer(
    help="MCP servers agents reach at /mcp with their own key: add, test, grant, usage.",
    no_args_is_help=True,
)

# A header name as HTTP writes it (RFC 9110 token).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers the gateway writes itself on every upstream request.
_RESERVED = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "last-event-id",
    }
)
# A --header whose name says it is a credential: on a command line it lands in the
# shell's history and in `ps`, and a plain header is stored unsealed.
_SECRET_NAME = re.compile(
    r"^(authorization|proxy-authorization|cookie)$|token|secret|password|api-?key", re.IGNORECASE
)
USAGE_DIMENSIONS = ("server", "tool", "key", "project", "status")

UrlOpt = typer.Option(..., "--url", help="Its address: http(s)://…/mcp, or …/sse for SSE.")
DescriptionOpt = typer.Option("", "--description", help="What it is for, shown in lists.")
HeaderOpt = typer.Option(
    [],
    "--header",
    help="A header sent as given, NAME=VALUE (repeatable); not for credentials.",
    show_default=False,
)
HeaderFileOpt = typer.Option(
    [],
    "--header-file",
    help="A header kept sealed, NAME=FILE: the value is the file's content (repeatable).",
    show_default=False,
)
BearerFileOpt = typer.Option(
    None,
    "--bearer-file",
    help="A file holding a token, sent sealed as Authorization: Bearer TOKEN.",
    show_default=False,
)
TimeoutOpt = typer.Option(
    None,
    "--timeout",
    min=0,
    help="Seconds a call may take (0: server.yaml's mcp.default_timeout_s, the default).",
)
RateOpt = typer.Option(None, "--rate", min=0, help="Calls a minute per key (0: no limit).")


def _refused(e: Exception) -> typer.Exit:
    if not isinstance(e, LlmgwError):
        e = UsageError(str(e))
    return typer.Exit(code=output.fail(e))


def _ask(method: Callable[[AdminClient], Awaitable[Any]]) -> Any:
    """One admin call; its reply, or the error printed and the command ended."""

    async def go():
        async with AdminClient.from_paths(resolve()) as client:
            return await method(client)

    try:
        return asyncio.run(go())
    except LlmgwError as e:
        raise _refused(e) from None


# -- reading what the operator typed -------------------------------------------------


def read_secret(path: Path, flag: str) -> str:
    """The one-line value a credential file holds, stripped; refused in words (never
    quoting the content) when the file is missing, unreadable, empty or several lines."""
    shown = f"{flag} {path}"
    try:
        text = path.expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{shown}: no such file", hint="give the file holding the value") from None
    except IsADirectoryError:
        raise UsageError(f"{shown} is a folder, not a file") from None
    except PermissionError:
        raise UsageError(
            f"{shown}: cannot be read by this user", hint="check its owner and mode"
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"{shown} is not UTF-8 text") from None
    except OSError as e:
        raise UsageError(f"{shown}: cannot be read ({e.strerror})") from None
    value = text.strip()
    if not value:
        raise UsageError(f"{shown} is empty", hint="write the value into it, on one line")
    if "\n" in value or "\r" in value:
        raise UsageError(
            f"{shown} holds more than one line", hint="a header value is one line: only the value"
        )
    return value


def _split_pair(text: str, flag: str, shape: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise UsageError(f"{flag} {_first(text)!r} is not {shape}", hint=f"e.g. {flag} {shape}")
    if not _HEADER_NAME.fullmatch(name):
        raise UsageError(f"{flag}: {name!r} is not a header name (letters, digits, '-')")
    if name.lower() in _RESERVED or name.lower().startswith("x-llmgw-"):
        raise UsageError(f"{flag}: {name} is set by the gateway itself on every request")
    return name, value


def _first(text: str) -> str:
    # What a --header was, without its value (it may be a credential typed by mistake).
    return text.partition("=")[0] + ("=…" if "=" in text else "")


def parse_headers(
    plain: list[str], files: list[str], bearer_file: Path | None
) -> tuple[dict[str, str], dict[str, str]]:
    """(headers sent as given, headers to seal) from --header, --header-file, --bearer-file.

    Every file is read here, before any call; a name given twice (in any case, by any
    of the three) is refused.
    """
    headers: dict[str, str] = {}
    secrets: dict[str, str] = {}
    seen: set[str] = set()

    def take(name: str, flag: str) -> None:
        if name.lower() in seen:
            raise UsageError(f"{flag}: the header {name} is given twice")
        seen.add(name.lower())

    for text in plain:
        name, value = _split_pair(text, "--header", "NAME=VALUE")
        if _SECRET_NAME.search(name):
            raise UsageError(
                f"--header {name}=… looks like a credential: typed here it stays in the shell's"
                " history and is stored unsealed",
                hint=f"put it in a file and give --header-file {name}=FILE"
                + (" or --bearer-file FILE" if name.lower() == "authorization" else ""),
            )
        if "\n" in value or "\r" in value:
            raise UsageError(f"--header {name}: a header value is one line")
        take(name, "--header")
        headers[name] = value
    for text in files:
        name, file = _split_pair(text, "--header-file", "NAME=FILE")
        if not file:
            raise UsageError(f"--header-file {name}= names no file", hint="--header-file NAME=FILE")
        take(name, "--header-file")
        secrets[name] = read_secret(Path(file), f"--header-file {name}=")
    if bearer_file is not None:
        take("Authorization", "--bearer-file")
        secrets["Authorization"] = "Bearer " + read_secret(bearer_file, "--bearer-file")
    return headers, secrets


def _check_name(name: str) -> str:
    try:
        return check_server_name(name)
    except McpNameRefused as e:
        raise UsageError(str(e)) from None


def _check_url(url: str) -> str:
    try:
        return check_address(url)
    except McpNameRefused as e:
        raise UsageError(str(e)) from None


# -- servers --------------------------------------------------------------------------


@mcp_app.command("add")
def add(
    name: str = typer.Argument(..., help="Its name, e.g. hr; its tools are listed as hr.TOOL."),
    url: str = UrlOpt,
    description: str = DescriptionOpt,
    header: list[str] = HeaderOpt,
    header_file: list[str] = HeaderFileOpt,
    bearer_file: Path | None = BearerFileOpt,
    timeout: float | None = TimeoutOpt,
    rate: int | None = RateOpt,
    disabled: bool = typer.Option(False, "--disabled", help="Add it turned off."),
    json: bool = JsonOpt,
) -> None:
    """Add a company MCP server (streamable HTTP, or SSE for an address ending in /sse).

    Credentials are read from files (--bearer-file, --header-file) and sealed by
    gatewayd; only their header names are ever shown. Nobody sees its tools
    until a grant names it.
    """
    try:
        request = PutMcpServerRequest(
            name=_check_name(name),
            create=True,
            set=[
                "url",
                "description",
                "headers",
                "secret_headers",
                "timeout_s",
                "rate_per_minute",
                "enabled",
            ],
            url=_check_url(url),
            description=description,
            timeout_s=timeout or 0.0,
            rate_per_minute=rate or 0,
            enabled=not disabled,
        )
        request.headers, request.secret_headers = parse_headers(header, header_file, bearer_file)
    except LlmgwError as e:
        raise _refused(e) from None
    call(
        lambda c: c.put_mcp_server(request),
        json=json,
        next_step=escape(
            f"Check it: llmgw ctl mcp test {name}\n{grant_hint(name)}\n"
            "How an agent points at /mcp with its own key: llmgw ctl mcp list"
        ),
    )


@mcp_app.command("list")
def list_(json: bool = JsonOpt) -> None:
    """Every server with its state, breaker, rate, header names and address; and how an
    agent points at /mcp."""
    call(lambda c: c.list_mcp_servers(), json=json)


@mcp_app.command("show")
def show(name: str = typer.Argument(..., help="The server, or llmgw:admin."), json: bool = JsonOpt):
    """One server: address, header names (never values), breaker, tools, grants."""
    call(lambda c: c.get_mcp_server(name), json=json)


@mcp_app.command("test")
def test(name: str = typer.Argument(..., help="The server."), json: bool = JsonOpt) -> None:
    """Connect as the gateway does, list its tools, and say in plain words what failed.

    Exits non-zero when the server could not be reached or refused the credential.
    """
    reply = _ask(lambda c: c.test_mcp_server(name))
    if json or reply.ok:
        output.emit(
            reply,
            json=json,
            next_step=escape(grant_hint(name)),
        )
    if not reply.ok:
        code = int(ExitCode.ERROR)
        if not json:
            code = output.fail(failed_test_error(reply))
        raise typer.Exit(code=code)


@mcp_app.command("change")
def change(
    name: str = typer.Argument(..., help="The server."),
    url: str = typer.Option("", "--url", help="A new address."),
    description: str = typer.Option("", "--description", help="A new description."),
    clear_description: bool = typer.Option(False, "--clear-description", help="No description."),
    header: list[str] = typer.Option(
        [],
        "--header",
        help="NAME=VALUE (repeatable): replaces every header sent as given.",
        show_default=False,
    ),
    header_file: list[str] = typer.Option(
        [],
        "--header-file",
        help="NAME=FILE (repeatable): replaces every sealed header (with --bearer-file).",
        show_default=False,
    ),
    bearer_file: Path | None = typer.Option(
        None,
        "--bearer-file",
        help="A new token, sealed as Authorization: Bearer TOKEN; replaces every sealed header"
        " (with --header-file).",
        show_default=False,
    ),
    clear_headers: bool = typer.Option(
        False, "--clear-headers", help="Send no headers but those given here (of either kind)."
    ),
    timeout: float | None = TimeoutOpt,
    rate: int | None = RateOpt,
    enable: bool | None = typer.Option(
        None, "--enable/--disable", help="Turn it on, or off: its tools are shown to no one."
    ),
    json: bool = JsonOpt,
) -> None:
    """Change what is given; the rest stays. New credentials apply to the next call."""
    try:
        request = PutMcpServerRequest(name=_check_name(name), create=False)
        headers, secrets = parse_headers(header, header_file, bearer_file)
        if url:
            request.url = _check_url(url)
            request.set.append("url")
        if description and clear_description:
            raise UsageError("--description and --clear-description both given: choose one")
        if description or clear_description:
            request.description = description
            request.set.append("description")
        if header or clear_headers:
            request.headers = headers
            request.set.append("headers")
        if header_file or bearer_file is not None or clear_headers:
            request.secret_headers = secrets
            request.set.append("secret_headers")
        if timeout is not None:
            request.timeout_s = timeout
            request.set.append("timeout_s")
        if rate is not None:
            request.rate_per_minute = rate
            request.set.append("rate_per_minute")
        if enable is not None:
            request.enabled = enable
            request.set.append("enabled")
        if not request.set:
            raise UsageError(
                "nothing to change",
                hint=f"e.g. llmgw ctl mcp change {name} --bearer-file FILE (see --help)",
            )
    except LlmgwError as e:
        raise _refused(e) from None
    call(
        lambda c: c.put_mcp_server(request),
        json=json,
        next_step=f"Check it: llmgw ctl mcp test {name}",
    )


@mcp_app.command("remove")
def remove(
    name: str = typer.Argument(..., help="The server."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Remove without asking."),
    json: bool = JsonOpt,
) -> None:
    """Remove a server, its grants and its sealed credentials; asks first."""
    if not yes:
        view = _ask(lambda c: c.get_mcp_server(name))
        grants = f" and its {len(view.grants)} grant(s)" if view.grants else ""
        if not typer.confirm(f"Remove {name}{grants}? Its tools go from every key.", err=True):
            output.stderr.print("Nothing removed.")
            raise typer.Exit(code=int(ExitCode.ERROR))
    call(lambda c: c.remove_mcp_server(name), json=json, next_step="Check it: llmgw ctl mcp list")


# -- grants ---------------------------------------------------------------------------

WhoArg = typer.Argument(..., help="A key id (key_…), or ORG, ORG/TEAM or ORG/TEAM/PROJECT.")
WhatArg = typer.Argument(
    ..., help=f"SERVER (every tool) or SERVER.TOOL; the built-in one is {ADMIN_SERVER}."
)


def _check_grant(who: str, what: str) -> None:
    try:
        parse_who(who)
        parse_what(what)
    except McpNameRefused as e:
        raise _refused(UsageError(str(e))) from None


@mcp_app.command("grant")
def grant(who: str = WhoArg, what: str = WhatArg, json: bool = JsonOpt) -> None:
    """Let a key, or every key beneath a level of the tree, see and call a server's tools."""
    _check_grant(who, what)
    reply = _ask(lambda c: c.grant_mcp(who, what))
    _said(reply, grant_text(reply, revoked=False), granted_step(who), json=json)


@mcp_app.command("revoke")
def revoke(who: str = WhoArg, what: str = WhatArg, json: bool = JsonOpt) -> None:
    """Take a grant back; says which grants above still give the tool."""
    _check_grant(who, what)
    reply = _ask(lambda c: c.revoke_mcp(who, what))
    _said(reply, grant_text(reply, revoked=True), revoked_step(who, reply), json=json)


def _said(reply: Any, text: Text | Table, next_step: str, *, json: bool) -> None:
    """A reply whose words depend on the command (not only on its type)."""
    if json:
        output.emit(reply, json=True)
        return
    output.stdout.print(text)
    if next_step:
        output.stdout.print(f"[dim]{escape(next_step)}[/dim]")


@mcp_app.command("grants")
def grants(
    who: str = typer.Argument(
        "", help="Only the grants that reach this key or level (its own and those above)."
    ),
    server: str = typer.Option("", "--server", help="Only the grants naming this server."),
    json: bool = JsonOpt,
) -> None:
    """Who may use which servers and tools."""
    if who:
        try:
            parse_who(who)
        except McpNameRefused as e:
            raise _refused(UsageError(str(e))) from None
    call(lambda c: c.list_mcp_grants(who, server), json=json)


# -- usage ----------------------------------------------------------------------------


@mcp_app.command("usage")
def usage(
    by: str = typer.Option(
        "server,tool", "--by", help=f"Group by, comma separated: {', '.join(USAGE_DIMENSIONS)}."
    ),
    from_: str = typer.Option(
        "", "--from", help="Start: 2026-09-01, 2026-09-01T13:30 or an age (7d). UTC."
    ),
    to: str = typer.Option("", "--to", help="End, not included (default: now)."),
    server: str = typer.Option("", "--server", help="Only this server."),
    key: str = typer.Option("", "--key", help="Only this key (key_…)."),
    project: str = typer.Option("", "--project", help="Only this project (or a level above)."),
    json: bool = JsonOpt,
) -> None:
    """Calls, errors, latency and bytes of the MCP tools over the last 24 hours (or --from/--to)."""
    dims = [d.strip() for d in by.split(",") if d.strip()]
    try:
        for d in dims:
            if d not in USAGE_DIMENSIONS:
                raise UsageError(f"--by {d!r}: group by {', '.join(USAGE_DIMENSIONS)}")
        start, end = period(from_, to)
    except LlmgwError as e:
        raise _refused(e) from None
    request = McpUsageRequest(
        by=dims, from_=start, to=end, server=server, key_id=key, project=project
    )
    reply = _ask(lambda c: c.mcp_usage(request))
    span = f"{short_time(start)} → {short_time(end)} UTC"
    _said(reply, usage_table(reply, dims, span), "", json=json)
