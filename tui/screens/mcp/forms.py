"""The MCP screen's forms: what ``llmgw ctl mcp add|change|grant|revoke`` take.

Each form checks what was typed with the gateway's own name rules
(``llmgw.mcp.names``: the same words gatewayd refuses with) and is dismissed
with the request the screen sends, or None on Escape. A credential is typed
into a password field and travels only in the request (to gatewayd on the
admin port, which seals it); the form never shows it again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Checkbox, Input, Label, TextArea

from llmgw.errors import UsageError
from llmgw.mcp.names import (
    McpNameRefused,
    check_address,
    check_server_name,
    parse_what,
    parse_who,
)
from proto.llmgw.v1 import McpServerView, PutMcpServerRequest
from tui.screens.dialogs import FormDialog

# An HTTP header name (RFC 9110 token).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
BEARER, HEADER = "bearer", "header"
_CENTERED = """
    align: center middle;
"""


def _refused(e: McpNameRefused) -> UsageError:
    return UsageError(str(e))


def parse_headers(text: str) -> dict[str, str]:
    """``N=V`` lines (or ``N: V``), as ``--header N=V`` takes them one by one."""
    headers: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        name, sep, value = line.partition("=")
        if not sep:
            name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not _HEADER_NAME.fullmatch(name):
            raise UsageError(f"{line!r} is not a header: write NAME=VALUE, one a line")
        if name.lower() in (n.lower() for n in headers):
            raise UsageError(f"the header {name} is given twice")
        headers[name] = value
    return headers


def parse_seconds(text: str, what: str) -> float:
    if not text:
        return 0.0
    try:
        value = float(text.removesuffix("s").strip())
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not a number of seconds") from None
    if value < 0:
        raise UsageError(f"{what}: {text!r} is below 0 (0: the gateway's default)")
    return value


def parse_rate(text: str) -> int:
    if not text:
        return 0
    try:
        value = int(text.removesuffix("/min").strip())
    except ValueError:
        raise UsageError(f"rate: {text!r} is not a whole number of calls a minute") from None
    if value < 0:
        raise UsageError(f"rate: {text!r} is below 0 (0: no limit)")
    return value


def secret_header(kind: str, header: str, value: str) -> dict[str, str]:
    """The sealed header a credential becomes: a bearer token is Authorization: Bearer …"""
    if not value:
        return {}
    if kind == BEARER:
        return {"Authorization": f"Bearer {value}"}
    if not _HEADER_NAME.fullmatch(header):
        raise UsageError(f"{header!r} is not a header name for the credential")
    return {header: value}


class CredentialFields:
    """The credential part of a form, on one row: which header it goes in (empty: a
    bearer token, ``Authorization: Bearer …``) and the token, in a password field."""

    def credential_fields(self, ident: str, header: str = "") -> ComposeResult:
        """Two columns, for the caller's ``form-row``; ``header``: the one sealed now."""
        with Vertical():
            yield Label("Credential header")
            yield Input(header, placeholder="(empty: bearer token)", id=f"{ident}-header")
        with Vertical():
            yield Label("Token or value")
            yield Input(password=True, placeholder="(hidden)", id=f"{ident}-secret")

    def credential(self, ident: str) -> dict[str, str]:
        form: FormDialog = self  # type: ignore[assignment]
        header = form.field(f"#{ident}-header")
        kind = HEADER if header else BEARER
        return secret_header(kind, header, form.field(f"#{ident}-secret"))


class McpServerDialog(CredentialFields, FormDialog[PutMcpServerRequest]):
    """Adds a company MCP server (``ctl mcp add``), or changes one (``ctl mcp change``)."""

    DEFAULT_CSS = (
        f"McpServerDialog {{{_CENTERED}}}\n"
        "McpServerDialog TextArea { height: 4; }\n"
        "McpServerDialog .mcp-name { width: 24; }\n"
        "McpServerDialog .mcp-number { width: 16; }\n"
        "McpServerDialog .mcp-off { width: 18; }"
    )

    def __init__(self, current: McpServerView | None = None) -> None:
        self.current = current
        self.OK_LABEL = "Add" if current is None else "Change"
        super().__init__("Add an MCP server" if current is None else f"Change {current.name}")

    def fields(self) -> ComposeResult:
        c = self.current
        with Horizontal(classes="form-row"):
            if c is None:
                with Vertical(classes="mcp-name"):
                    yield Label("Name (tools: NAME.TOOL)")
                    yield Input(placeholder="hr", id="mcp-name")
            with Vertical():
                yield Label("Address: http(s)://… (…/sse: SSE)")
                yield Input(
                    c.url if c else "", placeholder="http://10.0.0.9:8000/mcp", id="mcp-url"
                )
        with Horizontal(classes="form-row"):
            with Vertical():
                yield Label("Description")
                yield Input(c.description if c else "", id="mcp-description")
            with Vertical(classes="mcp-number"):
                yield Label("Timeout, s")
                yield Input(
                    f"{c.timeout_s:g}" if c else "", placeholder="default", id="mcp-timeout"
                )
            with Vertical(classes="mcp-number"):
                yield Label("Calls/min/key")
                yield Input(
                    str(c.rate_per_minute) if c else "", placeholder="no limit", id="mcp-rate"
                )
        if c is not None and c.header_names:
            now = ", ".join(c.header_names)
            yield Label(f"Headers, NAME=VALUE a line (now {now}; empty keeps them)")
        else:
            yield Label("Headers sent as given, NAME=VALUE a line (not secret)")
        yield TextArea(id="mcp-headers")
        with Horizontal(classes="form-row"):
            if c is None:
                yield from self.credential_fields("mcp")
            with Vertical(classes="mcp-off"):
                yield Label(" ")
                yield Checkbox("Turned off", c is not None and not c.enabled, id="mcp-off")

    def result(self) -> PutMcpServerRequest:
        try:
            url = check_address(self.field("#mcp-url"))
            name = self.current.name if self.current else check_server_name(self.field("#mcp-name"))
        except McpNameRefused as e:
            raise _refused(e) from None
        description = self.field("#mcp-description")
        headers = parse_headers(self.query_one("#mcp-headers", TextArea).text)
        timeout_s = parse_seconds(self.field("#mcp-timeout"), "timeout")
        rate = parse_rate(self.field("#mcp-rate"))
        enabled = not self.query_one("#mcp-off", Checkbox).value
        c = self.current
        if c is None:
            secrets = self.credential("mcp")
            clash = {n.lower() for n in headers} & {n.lower() for n in secrets}
            if clash:
                raise UsageError(
                    f"{', '.join(sorted(clash))} is both a plain header and the credential:"
                    " give it once, as the credential"
                )
            given = ["url", "description", "headers", "secret_headers", "timeout_s"]
            return PutMcpServerRequest(
                name=name,
                create=True,
                set=[*given, "rate_per_minute", "enabled"],
                url=url,
                description=description,
                headers=headers,
                secret_headers=secrets,
                timeout_s=timeout_s,
                rate_per_minute=rate,
                enabled=enabled,
            )
        # Only what differs from the server as read, in the order ctl mcp change sends it.
        request = PutMcpServerRequest(name=name, create=False)
        for field, now, was in (
            ("url", url, c.url),
            ("description", description, c.description),
            # Header values are never read back: any typed replace them all.
            ("headers", headers, None if headers else {}),
            ("timeout_s", timeout_s, c.timeout_s),
            ("rate_per_minute", rate, c.rate_per_minute),
            ("enabled", enabled, c.enabled),
        ):
            if now != was:
                setattr(request, field, now)
                request.set.append(field)
        if not request.set:
            raise UsageError(f"nothing changed: {c.name} is as the form shows it")
        return request


class CredentialDialog(CredentialFields, FormDialog[PutMcpServerRequest]):
    """Replaces a server's sealed credential (``ctl mcp change NAME --bearer-file F``)."""

    DEFAULT_CSS = f"CredentialDialog {{{_CENTERED}}}"
    OK_LABEL = "Replace"

    def __init__(self, current: McpServerView) -> None:
        super().__init__(f"Replace the credential of {current.name}")
        self.current = current

    def fields(self) -> ComposeResult:
        sealed = ", ".join(self.current.sealed_header_names) or "none"
        yield Label(f"Sealed now: {sealed}. The new one replaces every sealed header;")
        yield Label("its value is never shown again (only its header name).")
        # A header of its own stays the one to replace; Authorization is a bearer token.
        own = [n for n in self.current.sealed_header_names if n.lower() != "authorization"]
        with Horizontal(classes="form-row"):
            yield from self.credential_fields("cred", own[0] if len(own) == 1 else "")

    def result(self) -> PutMcpServerRequest:
        secrets = self.credential("cred")
        if not secrets:
            raise UsageError("type the token or value: an empty credential is not sent")
        return PutMcpServerRequest(
            name=self.current.name, create=False, set=["secret_headers"], secret_headers=secrets
        )


@dataclass(frozen=True)
class GrantAsk:
    """Who and what, as ``ctl mcp grant|revoke WHO WHAT`` take them."""

    who: str
    what: str


class GrantDialog(FormDialog[GrantAsk]):
    """Grants (or revokes) a server or one of its tools to an org, team, project or key."""

    DEFAULT_CSS = f"GrantDialog {{{_CENTERED}}}"
    VERBS: ClassVar[dict[bool, str]] = {True: "Grant", False: "Revoke"}

    def __init__(self, *, grant: bool, who: str = "", what: str = "") -> None:
        self.OK_LABEL = self.VERBS[grant]
        super().__init__(f"{self.VERBS[grant]} MCP tools")
        self.grant, self._who, self._what = grant, who, what

    def fields(self) -> ComposeResult:
        yield Label("Who: ORG, ORG/TEAM, ORG/TEAM/PROJECT or a key id (key_…)")
        yield Input(self._who, placeholder="Acme/ml", id="grant-who")
        yield Label("What: SERVER (every tool) or SERVER.TOOL")
        yield Input(self._what, placeholder="hr.lookup", id="grant-what")

    def result(self) -> GrantAsk:
        who, what = self.field("#grant-who"), self.field("#grant-what")
        try:
            parse_who(who)
            parse_what(what)
        except McpNameRefused as e:
            raise _refused(e) from None
        return GrantAsk(who, what)
