"""Organizations, teams and projects: the tree keys hang from, each level with its own limits.

A level is named by its path: ``Acme`` (an organization), ``Acme/ml`` (a
team), ``Acme/ml/search`` (a project), and is its id (``ten_…``, never
changed): keys, files, batches, stored responses, MCP grants and usage refer
to the id, so a rename moves all of them, and a level made again under an old
path sees nothing of the one removed. Paths are what people, the admin API and
the limit scopes (``project:Acme/ml/search``) use. The tree is held in memory
and refreshed from the store with the keys, so the hot path reads a project's
chain of limits from a dict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

from gatewayd.gateway.policy.limits import UNLIMITED, Limits
from gatewayd.store import Store, TenantRecord
from gatewayd.store.tenant_records import TenantHoldings

KINDS = ("org", "team", "project")
DEPTH = {"org": 1, "team": 2, "project": 3}
NOUN = {"org": "organization", "team": "team", "project": "project"}
_ELEMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
LIMIT_FIELDS = tuple(Limits.model_fields)
# Names shown of each kind of thing a removal is refused over; the rest are counted.
SHOWN_NAMES = 3


class TenancyRefused(Exception):
    """A change the admin API refuses (``kind``: invalid / not_found / conflict)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise TenancyRefused("invalid", f"kind {kind!r} must be one of: org, team, project")
    return kind


def check_element(name: str) -> str:
    if not _ELEMENT.fullmatch(name):
        raise TenancyRefused(
            "invalid",
            f"{name!r} is not a valid name: 1-63 letters, digits, '.', '_' or '-',"
            " starting with a letter or digit",
        )
    return name


def check_path(kind: str, path: str) -> str:
    """``path`` as a valid path for a level of ``kind`` (``ORG``, ``ORG/TEAM``, ``ORG/TEAM/PROJECT``)."""
    check_kind(kind)
    parts = path.split("/")
    shape = "/".join(["ORG", "TEAM", "PROJECT"][: DEPTH[kind]])
    if len(parts) != DEPTH[kind]:
        raise TenancyRefused("invalid", f"a {NOUN[kind]} is named {shape}, not {path!r}")
    for part in parts:
        check_element(part)
    return path


def kind_of(path: str) -> str:
    return KINDS[min(path.count("/"), 2)]


def scope_of(path: str) -> str:
    """The limit scope of a level: ``project:Acme/ml/search``."""
    return f"{kind_of(path)}:{path}"


def ancestors(path: str) -> list[str]:
    """The path and the levels above it, nearest first: Acme/ml/search, Acme/ml, Acme."""
    parts = path.split("/")
    return ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]


def limits_of(raw: dict) -> Limits:
    return Limits.model_validate({k: v for k, v in raw.items() if v is not None})


class Tenancy:
    """The tree as the store has it, and the changes the admin API may make to it."""

    def __init__(self, store: Store):
        self._store = store
        self._by_path: dict[str, TenantRecord] = {}
        self._by_id: dict[str, TenantRecord] = {}
        # project path -> ((scope, limits), …) for the project, its team and its org.
        self._chains: dict[str, tuple[tuple[str, Limits], ...]] = {}

    async def refresh(self) -> None:
        self._set(await self._store.list_tenants())

    def _set(self, records: Iterable[TenantRecord]) -> None:
        self._by_path = {r.path: r for r in records}
        self._by_id = {r.id: r for r in self._by_path.values()}
        self._chains = {}

    # ---- the hot path ----------------------------------------------------------

    def chain(self, project: str) -> tuple[tuple[str, Limits], ...]:
        """The project's, team's and organization's limits, the project first."""
        got = self._chains.get(project)
        if got is None:
            got = tuple(
                (
                    scope_of(p),
                    limits_of(self._by_path[p].limits) if p in self._by_path else UNLIMITED,
                )
                for p in ancestors(project)
            )
            self._chains[project] = got
        return got

    # ---- reads -----------------------------------------------------------------

    def get(self, path: str) -> TenantRecord | None:
        return self._by_path.get(path)

    def path_of(self, tenant_id: str, default: str = "") -> str:
        """The level's path now; ``default`` when no level has that id (any more)."""
        rec = self._by_id.get(tenant_id)
        return rec.path if rec is not None else default

    def list(self, kind: str = "", under: str = "") -> list[TenantRecord]:
        if kind:
            check_kind(kind)
        out = []
        for path in sorted(self._by_path):
            rec = self._by_path[path]
            if kind and rec.kind != kind:
                continue
            if under and not (path == under or path.startswith(under + "/")):
                continue
            out.append(rec)
        return out

    def children(self, path: str) -> list[str]:
        return [p for p in self._by_path if p.startswith(path + "/")]

    def require(self, kind: str, path: str) -> TenantRecord:
        check_path(kind, path)
        rec = self._by_path.get(path)
        if rec is None:
            raise TenancyRefused(
                "not_found",
                f"no {NOUN[kind]} {path!r}; see: llmgw ctl {kind} list",
            )
        return rec

    def require_project(self, project: str) -> TenantRecord:
        """The project a key is made in; refused, with what to run, when it does not exist."""
        check_path("project", project)
        rec = self._by_path.get(project)
        if rec is None:
            raise TenancyRefused(
                "not_found",
                f"no project {project!r}; create it first: "
                f"llmgw ctl project create --parents {project}",
            )
        return rec

    # ---- changes ---------------------------------------------------------------

    async def create(self, kind: str, path: str, *, parents: bool = False) -> TenantRecord:
        check_path(kind, path)
        if path in self._by_path:
            raise TenancyRefused("conflict", f"the {NOUN[kind]} {path!r} already exists")
        made: list[TenantRecord] = []
        now = datetime.now(UTC)
        for above in reversed(ancestors(path)[1:]):
            if above in self._by_path:
                continue
            if not parents:
                k = kind_of(above)
                raise TenancyRefused(
                    "not_found",
                    f"no {NOUN[k]} {above!r}; create it first (llmgw ctl {k} create {above})"
                    f" or pass --parents",
                )
            made.append(TenantRecord(kind=kind_of(above), path=above, created_at=now))
        made.append(TenantRecord(kind=kind, path=path, created_at=now))
        for rec in made:
            if await self._store.create_tenant(rec):
                self._by_path[rec.path] = rec
            elif rec.path == path:
                raise TenancyRefused("conflict", f"the {NOUN[kind]} {path!r} already exists")
        self._chains = {}
        await self.refresh()
        return self._by_path[path]

    async def rename(self, kind: str, path: str, new_name: str) -> TenantRecord:
        self.require(kind, path)
        check_element(new_name)
        new_path = "/".join([*path.split("/")[:-1], new_name])
        if new_path == path:
            return self._by_path[path]
        if new_path in self._by_path:
            raise TenancyRefused("conflict", f"the {NOUN[kind]} {new_path!r} already exists")
        await self._store.rename_tenant(path, new_path)
        await self.refresh()
        return self._by_path[new_path]

    async def remove(self, kind: str, path: str, *, force: bool = False) -> TenantHoldings:
        """Remove a level that holds nothing, or with ``force`` the level, the levels beneath
        it and all they hold; usage is kept, shown under the path it had last. What went."""
        self.require(kind, path)
        outcome = await self._store.remove_tenant(path, force=force, now=datetime.now(UTC))
        await self.refresh()
        if outcome is None:
            raise TenancyRefused(
                "not_found", f"no {NOUN[kind]} {path!r}; see: llmgw ctl {kind} list"
            )
        if not outcome.removed:
            raise TenancyRefused("conflict", still_held(kind, path, outcome.held))
        return outcome.held

    async def set_limits(self, path: str, limits: Limits) -> TenantRecord:
        rec = self.require(kind_of(path), path)
        rec = rec.model_copy(update={"limits": limits.model_dump(exclude_none=True)})
        await self._store.put_tenant(rec)
        self._by_path[path] = rec
        self._chains = {}
        return rec


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (", …" if len(names) > SHOWN_NAMES else "")


def _counted(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def still_held(kind: str, path: str, held: TenantHoldings) -> str:
    """Why a level is not removed, naming what it holds, and what to do about it."""
    parts: list[str] = []
    steps: list[str] = []
    for names, one, many, step in (
        (held.beneath, "level", "levels", "remove {it} first"),
        (
            held.live_keys,
            "API key that works",
            "API keys that work",
            f"revoke {{it}} first (llmgw ctl keys list --project {path})",
        ),
        (
            held.files,
            "file",
            "files",
            "delete {it} first (DELETE /v1/files/ID with a key of the project)",
        ),
        (held.batches, "batch", "batches", ""),
        (
            held.grants,
            "MCP grant",
            "MCP grants",
            f"revoke {{it}} first (llmgw ctl mcp grants {path})",
        ),
    ):
        if not names:
            continue
        parts.append(f"{_counted(len(names), one, many)} ({_some(names)})")
        if step:
            steps.append(step.format(it="it" if len(names) == 1 else "them"))
    return (
        f"{path} still holds {', '.join(parts)}: {'; '.join(steps) or 'nothing removes it'}"
        f"; or remove {path} with all it holds (its usage is kept):"
        f" llmgw ctl {kind} rm {path} --force"
    )
