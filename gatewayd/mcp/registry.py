"""McpRegistry: the company MCP servers and grants as the hot path reads them.

Read from the store at start and again every ``mcp.refresh_interval_s`` (so a
change made on another control plane arrives within it), and at once by the
admin RPCs after they write. ``allowed()`` runs on every tools/call: it is a
dict lookup per key plus a set lookup, over grants merged per (key, project)
the first time a key asks after a change.

The grant rule: deny by default; a key may call ``server.tool`` iff a scope of
its chain — ``key:ID``, then ``project:P``, ``team:T``, ``org:O`` of its
project — holds a grant whose target is ``server`` (every tool) or
``server.tool``. A disabled or unknown server allows nothing; ``llmgw:admin``
is always there to be granted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from gatewayd.gateway.policy.tenancy import ancestors
from gatewayd.mcp.seal import Sealer, SealError
from gatewayd.store.mcp_records import McpGrantRecord, McpServerRecord
from llmgw.errors import NotFoundError
from llmgw.mcp.config import McpConfig
from llmgw.mcp.names import ADMIN_SERVER, McpNameRefused, origin_of

if TYPE_CHECKING:
    from gatewayd.gateway.policy.keys import KeyInfo
    from gatewayd.store.base import Store

log = logging.getLogger(__name__)

# In a target's tool set: every tool of the server.
EVERY_TOOL = "*"
# A level's scope kind by how many '/' its path has: Acme, Acme/ml, Acme/ml/search.
_LEVEL_KINDS = ("org", "team", "project")

# server -> the tools granted ({"*"}: all of them)
Granted = dict[str, frozenset[str]]


def chain_of(key_id: str, project: str) -> list[str]:
    """The scopes whose grants reach a key, its own first: key:ID, project:…, team:…, org:…."""
    scopes = [f"key:{key_id}"]
    if project:
        for path in ancestors(project):
            depth = path.count("/")
            if depth < len(_LEVEL_KINDS):
                scopes.append(f"{_LEVEL_KINDS[depth]}:{path}")
    return scopes


def split_target(target: str) -> tuple[str, str]:
    """``hr`` → (hr, *); ``hr.lookup`` → (hr, lookup); ``llmgw:admin.list_nodes`` too."""
    server, dot, tool = target.partition(".")
    return server, (tool if dot and tool else EVERY_TOOL)


class McpRegistry:
    """Servers, grants and credentials, read from the store; what each key may call."""

    def __init__(self, store: Store, sealer: Sealer, cfg: McpConfig) -> None:
        self._store = store
        self._sealer = sealer
        self._cfg = cfg
        # Changes whenever servers or grants changed; 0 until something was read.
        self.version = 0
        # server -> bare tool names it last listed (the test and list paths fill it).
        self.tools_seen: dict[str, list[str]] = {}
        self._servers: dict[str, McpServerRecord] = {}
        self._grants: list[McpGrantRecord] = []
        # scope -> what it grants, enabled (or built-in) servers only.
        self._by_scope: dict[str, Granted] = {}
        # (key id, project) -> the merged grants of its chain; filled on demand.
        self._merged: dict[tuple[str, str], Granted] = {}
        # (ref, origin) -> opened value; a ref's value never changes (new value, new ref),
        # and it opens only for the origin it was sealed for: an address moved in the
        # store must not find its old credential opened here already.
        self._unsealed: dict[tuple[str, str], str] = {}
        self._callbacks: list[Callable[[], None]] = []
        # Two refreshes at once (the loop, an admin RPC) would let the one that
        # read the store first apply last and undo a change for a round.
        self._refreshing = asyncio.Lock()

    # ---- reading the store ------------------------------------------------------

    async def refresh(self) -> None:
        """Read servers and grants again; bump ``version`` and tell listeners on a change."""
        async with self._refreshing:
            servers = await self._store.list_mcp_servers()
            grants = await self._store.list_mcp_grants()
            if servers == list(self._servers.values()) and grants == self._grants:
                return
            self._apply(servers, grants)
        for callback in list(self._callbacks):
            try:
                callback()
            except Exception:
                log.exception("an MCP registry listener failed")

    def _apply(self, servers: list[McpServerRecord], grants: list[McpGrantRecord]) -> None:
        by_name = {s.name: s for s in servers}
        callable_servers = {s.name for s in servers if s.enabled} | {ADMIN_SERVER}
        building: dict[str, dict[str, set[str]]] = {}
        for g in grants:
            server, tool = split_target(g.target)
            if server in callable_servers:
                building.setdefault(g.scope, {}).setdefault(server, set()).add(tool)
        self._by_scope = {
            scope: {server: frozenset(tools) for server, tools in targets.items()}
            for scope, targets in building.items()
        }
        self._merged = {}
        self._servers = by_name
        self._grants = grants
        referenced = {ref for s in servers for ref in s.secret_refs.values()}
        self._unsealed = {k: v for k, v in self._unsealed.items() if k[0] in referenced}
        self.tools_seen = {
            name: tools
            for name, tools in self.tools_seen.items()
            if name in by_name or name == ADMIN_SERVER
        }
        self.version += 1

    async def run(self) -> None:
        """Refresh now and every ``refresh_interval_s``, forever; a store outage is logged
        once and retried."""
        failing = False
        while True:
            try:
                await self.refresh()
            except Exception as e:  # noqa: BLE001 (the loop outlives one bad read: StoreError or worse)
                if not failing:
                    log.warning(
                        "cannot read MCP servers and grants from the store: %s;"
                        " serving the last ones read, trying again every %g s",
                        e,
                        self._cfg.refresh_interval_s,
                    )
                failing = True
            else:
                if failing:
                    log.info("MCP servers and grants are read from the store again")
                failing = False
            await asyncio.sleep(self._cfg.refresh_interval_s)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every refresh that changed servers or grants."""
        self._callbacks.append(callback)

    # ---- servers ----------------------------------------------------------------

    def servers(self) -> list[McpServerRecord]:
        """The company servers (not llmgw:admin), by name, enabled or not."""
        return sorted(self._servers.values(), key=lambda s: s.name)

    def get(self, name: str) -> McpServerRecord | None:
        return self._servers.get(name)

    def timeout_s(self, rec: McpServerRecord) -> float:
        return rec.timeout_s or self._cfg.default_timeout_s

    async def headers_for(self, name: str) -> dict[str, str]:
        """What to send the server: its plain headers and its credentials, opened."""
        rec = self._servers.get(name)
        if rec is None:
            raise NotFoundError(f"there is no MCP server {name!r}", hint="llmgw ctl mcp list")
        origin = _origin(rec) if rec.secret_refs else ""
        missing = [r for r in rec.secret_refs.values() if (r, origin) not in self._unsealed]
        if missing:
            sealed = await self._store.get_sealed_secrets(missing)
            for ref in missing:
                blob = sealed.get(ref)
                if blob is None:
                    raise SealError(
                        f"the credential {ref} of MCP server {name} is not in the store",
                        hint=f"set it again: llmgw ctl mcp change {name} --bearer-file FILE"
                        " (or --header-file NAME=FILE)",
                    )
                self._unsealed[ref, origin] = self._sealer.open(blob, ref, origin)
        headers = dict(rec.headers)
        for header, ref in rec.secret_refs.items():
            headers[header] = self._unsealed[ref, origin]
        return headers

    # ---- grants -----------------------------------------------------------------

    def grants(self) -> list[McpGrantRecord]:
        """Every grant, by scope then target (including those of disabled servers)."""
        return list(self._grants)

    def _granted(self, key: KeyInfo) -> Granted:
        cache_key = (key.key_id, key.project)
        merged = self._merged.get(cache_key)
        if merged is None:
            building: dict[str, frozenset[str]] = {}
            for scope in chain_of(key.key_id, key.project):
                for server, tools in self._by_scope.get(scope, {}).items():
                    building[server] = building.get(server, frozenset()) | tools
            merged = self._merged[cache_key] = building
        return merged

    def allowed(self, key: KeyInfo, server: str, tool: str) -> bool:
        """May ``key`` call ``tool`` (bare) of ``server``? Deny unless a grant says so."""
        tools = self._granted(key).get(server)
        return tools is not None and (EVERY_TOOL in tools or tool in tools)

    def granted_servers(self, key: KeyInfo) -> list[str]:
        """Servers any of whose tools ``key`` may call: llmgw:admin first, then by name."""
        return sorted(self._granted(key), key=lambda s: (s != ADMIN_SERVER, s))


def _origin(rec: McpServerRecord) -> str:
    """The origin a server's credentials must have been sealed for: its address's now."""
    try:
        return origin_of(rec.url)
    except McpNameRefused as e:  # an address edited in the store by hand
        raise SealError(
            f"the credentials of MCP server {rec.name} are not opened: {e}",
            hint=f"give its address again: llmgw ctl mcp change {rec.name} --url URL",
        ) from None
