"""Admin RPCs for the MCP gateway: company servers, their test, grants, and call usage.

What ``llmgw ctl mcp …`` and the console's MCP screen call. Credentials given
here are sealed before they reach the store and never leave it again: every
view carries header names only. A change reaches the gateway at once (the
registry is read again, the server's upstream connections are dropped so the
next call opens one with the new address or credential, its breaker and rate
buckets start afresh); other control planes read it within
``mcp.refresh_interval_s``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.admin.mcp.checks import (
    RECONNECT,
    SETTABLE,
    USAGE_BY,
    check_headers,
    check_limits,
    failure_words,
    grant_view,
    iso,
    moved_credentials,
    refused,
    server_of,
    usage_groups,
)
from gatewayd.admin.tenancy.keys import refuse
from gatewayd.admin.usage import parse_when
from gatewayd.gateway.policy.keys import KeyCache, KeyRefused
from gatewayd.gateway.policy.tenancy import NOUN, ancestors, scope_of
from gatewayd.mcp.upstream import Upstream
from gatewayd.store import Store
from gatewayd.store.mcp_records import McpGrantRecord, McpServerRecord
from llmgw.aio import within
from llmgw.mcp.names import (
    ADMIN_PREFIX,
    ADMIN_SERVER,
    Grantee,
    McpNameRefused,
    check_address,
    check_server_name,
    grant_target,
    origin_of,
    parse_what,
    parse_who,
    transport_of,
)
from proto.llmgw.v1 import (
    ListMcpGrantsReply,
    ListMcpGrantsRequest,
    ListMcpServersReply,
    ListMcpServersRequest,
    McpGrantReply,
    McpGrantRequest,
    McpGrantView,
    McpServerRequest,
    McpServerView,
    McpTestReply,
    McpUsageReply,
    McpUsageRequest,
    PutMcpServerRequest,
    RemoveMcpServerReply,
)

if TYPE_CHECKING:
    from gatewayd.mcp.runtime import McpRuntime

BUILTIN_DESCRIPTION = (
    "This cluster, read-only: its status, nodes, models, replicas, placement and engine logs"
)


class McpAdmin:
    """Mixed into AdminService."""

    _store: Store
    _keys: KeyCache
    _info: dict
    # None where mcp.enabled is false.
    _mcp: McpRuntime | None

    # ---- views ------------------------------------------------------------------

    def _runtime(self, doing: str):
        if self._mcp is None:
            raise GRPCError(
                Status.FAILED_PRECONDITION,
                f"cannot {doing}: the MCP gateway is off on this control plane;"
                " turn it on with mcp: {enabled: true} in server.yaml and restart gatewayd",
            )
        return self._mcp

    def _endpoint(self) -> str:
        url = self._info.get("gateway_url", "")
        if not url:
            return ""
        return url.removesuffix("/").removesuffix("/v1") + "/mcp"

    def _builtin_view(self, grants: list[McpGrantRecord]) -> McpServerView:
        rt = self._mcp
        tools = [t["name"] for t in rt.admin_tools.tools()] if rt is not None else []
        return McpServerView(
            name=ADMIN_SERVER,
            url=ADMIN_SERVER,
            transport="builtin",
            description=BUILTIN_DESCRIPTION,
            enabled=rt is not None,
            timeout_s=rt.cfg.default_timeout_s if rt is not None else 0.0,
            breaker="closed",
            state="ok" if rt is not None else "off",
            tools=tools,
            builtin=True,
            grants=[grant_view(g) for g in grants if server_of(g.target) == ADMIN_SERVER],
        )

    def _server_view(self, rec: McpServerRecord, grants: list[McpGrantRecord]) -> McpServerView:
        rt = self._mcp
        breaker, reason, tools = "closed", "", []
        timeout_s = rec.timeout_s
        if rt is not None:
            breaker, reason = rt.breakers.state(rec.name)
            tools = list(rt.registry.tools_seen.get(rec.name, []))
            timeout_s = rec.timeout_s or rt.cfg.default_timeout_s
        if not rec.enabled or rt is None:
            state = "off"
        elif breaker != "closed":
            state = "failing"
        elif tools:
            state = "ok"
        else:
            state = "unknown"
        return McpServerView(
            name=rec.name,
            url=rec.url,
            transport=rec.transport,
            description=rec.description,
            enabled=rec.enabled,
            header_names=sorted(rec.headers),
            sealed_header_names=sorted(rec.secret_refs),
            timeout_s=timeout_s,
            rate_per_minute=rec.rate_per_minute,
            breaker=breaker,
            breaker_reason=reason,
            state=state,
            tools=tools,
            created_at=iso(rec.created_at),
            updated_at=iso(rec.updated_at),
            grants=[grant_view(g) for g in grants if server_of(g.target) == rec.name],
        )

    async def _record(self, name: str) -> McpServerRecord:
        rec = await self._store.get_mcp_server(name)
        if rec is None:
            raise GRPCError(
                Status.NOT_FOUND, f"no MCP server named {name!r}; see: llmgw ctl mcp list"
            )
        return rec

    async def list_mcp_servers(self, message: ListMcpServersRequest) -> ListMcpServersReply:
        grants = await self._store.list_mcp_grants()
        servers = [self._builtin_view(grants)]
        servers += [self._server_view(r, grants) for r in await self._store.list_mcp_servers()]
        return ListMcpServersReply(servers=servers, endpoint=self._endpoint())

    async def get_mcp_server(self, message: McpServerRequest) -> McpServerView:
        grants = await self._store.list_mcp_grants()
        if message.name in (ADMIN_SERVER, ADMIN_PREFIX):
            return self._builtin_view(grants)
        return self._server_view(await self._record(message.name), grants)

    # ---- changes ------------------------------------------------------------------

    async def _applied(self, name: str, changed: set[str]) -> None:
        """After a change: this control plane serves it now, with fresh connections."""
        rt = self._mcp
        if rt is None:
            return
        await rt.registry.refresh()
        rt.rates.forget_server(name)
        if changed & RECONNECT:
            # Open connections carry the old address or credential: the next call opens
            # one with the new; and the old address's failures are not the new one's.
            rt.breakers.forget(name)
            await rt.pool.drop_server(name)
        if "url" in changed:
            rt.registry.tools_seen.pop(name, None)

    async def put_mcp_server(self, message: PutMcpServerRequest) -> McpServerView:
        if message.name in (ADMIN_SERVER, ADMIN_PREFIX):
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"{ADMIN_SERVER} is built in and read-only; it cannot be added or changed",
            )
        try:
            name = check_server_name(message.name)
        except McpNameRefused as e:
            raise refused(e) from None
        rt = self._runtime("add or change an MCP server")
        existing = await self._store.get_mcp_server(name)
        now = datetime.now(UTC)
        if message.create:
            if existing is not None:
                raise GRPCError(
                    Status.ALREADY_EXISTS,
                    f"an MCP server named {name!r} is there already;"
                    f" change it with: llmgw ctl mcp change {name} …",
                )
            # Every field the request names (all of them when it names none); the
            # others keep their defaults: on, no headers, the default timeout, no rate.
            fields = (set(message.set) & set(SETTABLE) or set(SETTABLE)) | {"url"}
            base = McpServerRecord(name=name, url="", transport="", created_at=now)
        else:
            if existing is None:
                raise GRPCError(
                    Status.NOT_FOUND,
                    f"no MCP server named {name!r}; add it with: llmgw ctl mcp add {name} --url …",
                )
            fields = set(message.set)
            unknown = fields - set(SETTABLE)
            if unknown:
                raise GRPCError(
                    Status.INVALID_ARGUMENT,
                    f"cannot change {', '.join(sorted(unknown))}: a server's settings are"
                    f" {', '.join(SETTABLE)}",
                )
            if not fields:
                raise GRPCError(Status.INVALID_ARGUMENT, "say what to change")
            base = existing
        rec, new_secrets = self._changed(base, message, fields, rt)
        dropped = moved_credentials(base, rec, fields)
        if dropped:
            # Credentials are the old origin's: a new host (or port, or scheme) is not
            # given them unless they are given again in the same change.
            rec = replace(rec, secret_refs={})
            fields = fields | {"secret_headers"}
        await self._store.put_mcp_server(replace(rec, updated_at=now), new_secrets)
        await self._applied(name, fields)
        view = self._server_view(await self._record(name), await self._store.list_mcp_grants())
        view.sealed_headers_dropped = dropped
        return view

    def _changed(
        self, base: McpServerRecord, message: PutMcpServerRequest, fields: set[str], rt
    ) -> tuple[McpServerRecord, dict[str, bytes]]:
        """The record with ``fields`` taken from the request, and the new sealed secrets."""
        update: dict = {}
        if "url" in fields:
            try:
                url = check_address(message.url.strip())
            except McpNameRefused as e:
                raise refused(e) from None
            update["url"], update["transport"] = url, transport_of(url)
        if "description" in fields:
            update["description"] = message.description.strip()
        if "headers" in fields:
            update["headers"] = check_headers(dict(message.headers), secret=False)
        if "timeout_s" in fields:
            update["timeout_s"] = float(message.timeout_s)
        if "rate_per_minute" in fields:
            update["rate_per_minute"] = int(message.rate_per_minute)
        if "enabled" in fields:
            update["enabled"] = bool(message.enabled)
        new_secrets: dict[str, bytes] = {}
        if "secret_headers" in fields:
            refs = {}
            for header, value in check_headers(dict(message.secret_headers), secret=True).items():
                # A new ref each time: a replaced credential's old ref is left unused and
                # the store removes it in the same transaction.
                ref = rt.sealer.new_ref(base.name)
                # Sealed for the address it is given with (the new one, when both change).
                new_secrets[ref] = rt.sealer.seal(
                    value, ref, origin_of(update.get("url", base.url))
                )
                refs[header] = ref
            update["secret_refs"] = refs
        rec = replace(base, **update)
        check_limits(rec.timeout_s, rec.rate_per_minute)
        both = {h.lower() for h in rec.headers} & {h.lower() for h in rec.secret_refs}
        if both:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"{', '.join(sorted(both))}: a header is either sent as given or sealed, not both",
            )
        return rec, new_secrets

    async def remove_mcp_server(self, message: McpServerRequest) -> RemoveMcpServerReply:
        if message.name in (ADMIN_SERVER, ADMIN_PREFIX):
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"{ADMIN_SERVER} is built in; it cannot be removed."
                f" Revoke its grants instead: llmgw ctl mcp grants --server {ADMIN_SERVER}",
            )
        removed = await self._store.delete_mcp_server(message.name)
        if removed is None:
            raise GRPCError(
                Status.NOT_FOUND, f"no MCP server named {message.name!r}; see: llmgw ctl mcp list"
            )
        await self._applied(message.name, set(SETTABLE))
        return RemoveMcpServerReply(name=message.name, grants_removed=removed)

    # ---- the test ---------------------------------------------------------------

    async def test_mcp_server(self, message: McpServerRequest) -> McpTestReply:
        if message.name in (ADMIN_SERVER, ADMIN_PREFIX):
            rt = self._runtime("test llmgw:admin")
            tools = [t["name"] for t in rt.admin_tools.tools()]
            return McpTestReply(name=ADMIN_SERVER, ok=True, tools=tools, protocol_version="")
        rec = await self._record(message.name)
        rt = self._runtime(f"test {rec.name}")
        if rt.registry.get(rec.name) is None:
            await rt.registry.refresh()  # added on another control plane a moment ago
        timeout_s = rt.registry.timeout_s(rec)
        started = time.perf_counter()
        reply = McpTestReply(name=rec.name)
        try:
            reply.tools, reply.protocol_version = await within(
                self._list_tools(rt, rec, timeout_s), timeout_s + 1
            )
            reply.ok = True
        except TimeoutError:
            reply.error = f"no answer in {timeout_s:g} s from {rec.url}"
        except Exception as e:  # noqa: BLE001  (each failure is told in words, never raised)
            reply.error = failure_words(e, rec)
        reply.latency_ms = (time.perf_counter() - started) * 1000
        if reply.ok:
            rt.registry.tools_seen[rec.name] = list(reply.tools)
        return reply

    async def _list_tools(self, rt, rec: McpServerRecord, timeout_s: float):
        # A connection of its own (owner "test"), never one a caller uses, closed after.
        headers = await rt.registry.headers_for(rec.name)
        up = Upstream(rec.name, rec.url, rec.transport, headers, timeout_s, http=rt.pool.http)
        try:
            await up.open()
            tools = await up.list_tools()
            return [t.get("name", "") for t in tools], up.protocol_version
        finally:
            await up.close()

    # ---- grants -----------------------------------------------------------------

    async def _chain(self, who: Grantee, *, must_exist: bool) -> list[str]:
        """The scopes whose grants reach ``who``: its own first, then the levels above."""
        if who.kind == "key":
            try:
                key = self._keys.get(who.path)
            except KeyRefused as e:
                if must_exist:
                    raise refuse(e) from None
                return [who.scope]
            if must_exist and key.revoked_at is not None:
                raise GRPCError(
                    Status.FAILED_PRECONDITION,
                    f"{who.path} is revoked; grant to its project ({key.project})"
                    " or to the key that replaced it",
                )
            return [who.scope, *(scope_of(p) for p in ancestors(key.project))]
        if must_exist:
            paths = {t.path for t in await self._store.list_tenants()}
            if who.path not in paths:
                raise GRPCError(
                    Status.NOT_FOUND,
                    f"no {NOUN[who.kind]} {who.path!r}; see: llmgw ctl {who.kind} list",
                )
        return [scope_of(p) for p in ancestors(who.path)]

    def _parse(self, message: McpGrantRequest) -> tuple[Grantee, str, str]:
        try:
            who = parse_who(message.who.strip())
            server, tool = parse_what(message.what.strip())
        except McpNameRefused as e:
            raise refused(e) from None
        return who, server, tool

    async def _check_target(self, server: str, tool: str) -> None:
        if server == ADMIN_SERVER:
            rt = self._mcp
            names = [t["name"] for t in rt.admin_tools.tools()] if rt is not None else []
            if tool != "*" and names and tool not in names:
                raise GRPCError(
                    Status.NOT_FOUND,
                    f"{ADMIN_SERVER} has no tool {tool!r}; its tools: {', '.join(names)}",
                )
            return
        if await self._store.get_mcp_server(server) is None:
            raise GRPCError(
                Status.NOT_FOUND,
                f"no MCP server named {server!r}; add it first (llmgw ctl mcp add {server}"
                " --url …) or see: llmgw ctl mcp list",
            )

    async def _grant_reply(self, scope: str, target: str, changed: bool) -> McpGrantReply:
        for g in await self._store.list_mcp_grants():
            if (g.scope, g.target) == (scope, target):
                return McpGrantReply(grant=grant_view(g), changed=changed)
        return McpGrantReply(grant=McpGrantView(scope=scope, target=target), changed=changed)

    async def grant_mcp(self, message: McpGrantRequest) -> McpGrantReply:
        who, server, tool = self._parse(message)
        await self._chain(who, must_exist=True)
        await self._check_target(server, tool)
        target = grant_target(server, tool)
        changed = await self._store.add_mcp_grant(who.scope, target, datetime.now(UTC))
        if changed and self._mcp is not None:
            await self._mcp.registry.refresh()
        return await self._grant_reply(who.scope, target, changed)

    async def revoke_mcp(self, message: McpGrantRequest) -> McpGrantReply:
        who, server, tool = self._parse(message)
        # A grant to a key or level since removed can still be revoked.
        chain = await self._chain(who, must_exist=False)
        target = grant_target(server, tool)
        grants = await self._store.list_mcp_grants()
        held = next((g for g in grants if (g.scope, g.target) == (who.scope, target)), None)
        changed = await self._store.remove_mcp_grant(who.scope, target)
        if changed and self._mcp is not None:
            await self._mcp.registry.refresh()
        still = []
        for g in grants:
            if g.scope not in chain or (g.scope, g.target) == (who.scope, target):
                continue
            if tool == "*":
                # Every tool was revoked: a grant of the server or any of its tools still gives some.
                gives = server_of(g.target) == server
            else:
                gives = g.target in (server, target)
            if gives:
                every = " (every tool)" if "." not in g.target else ""
                still.append(f"{g.scope} is granted {g.target}{every}")
        view = grant_view(held) if held else McpGrantView(scope=who.scope, target=target)
        return McpGrantReply(grant=view, changed=changed, still_granted_by=still)

    async def list_mcp_grants(self, message: ListMcpGrantsRequest) -> ListMcpGrantsReply:
        grants = await self._store.list_mcp_grants()
        if message.who.strip():
            try:
                who = parse_who(message.who.strip())
            except McpNameRefused as e:
                raise refused(e) from None
            chain = set(await self._chain(who, must_exist=who.kind == "key"))
            grants = [g for g in grants if g.scope in chain]
        if message.server:
            server = ADMIN_SERVER if message.server == ADMIN_PREFIX else message.server
            grants = [g for g in grants if server_of(g.target) == server]
        return ListMcpGrantsReply(grants=[grant_view(g) for g in grants])

    # ---- usage ------------------------------------------------------------------

    async def mcp_usage(self, message: McpUsageRequest) -> McpUsageReply:
        by = list(message.by) or ["server", "tool"]
        unknown = [b for b in by if b not in USAGE_BY]
        if unknown or len(set(by)) != len(by):
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"group by any of {', '.join(USAGE_BY)} (each once), not {', '.join(by)}",
            )
        since = parse_when(message.from_, "from")
        until = parse_when(message.to, "to")
        if since and until and since >= until:
            raise GRPCError(Status.INVALID_ARGUMENT, "from must be before to")
        if self._mcp is not None and getattr(self._mcp, "writer", None) is not None:
            await self._mcp.writer.flush()  # the calls of the last second count too
        rows = await self._store.list_mcp_calls(
            since=since,
            until=until,
            server=message.server,
            key_id=message.key_id,
            project=message.project,
        )
        return McpUsageReply(groups=usage_groups(rows, by), calls=len(rows))
