"""Organizations, teams and projects: the tree keys hang from, each level with its own limits.

A level is named by its path: ``Acme`` (an organization), ``Acme/ml`` (a
team), ``Acme/ml/search`` (a project). Paths are what the admin API, the
store and the limit scopes (``project:Acme/ml/search``) all use. The tree is
held in memory and refreshed from the store with the keys, so the hot path
reads a project's chain of limits from a dict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

from gatewayd.gateway.policy.limits import UNLIMITED, Limits
from gatewayd.store import Store, TenantRecord

KINDS = ("org", "team", "project")
DEPTH = {"org": 1, "team": 2, "project": 3}
NOUN = {"org": "organization", "team": "team", "project": "project"}
_ELEMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
LIMIT_FIELDS = tuple(Limits.model_fields)


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
        # project path -> ((scope, limits), …) for the project, its team and its org.
        self._chains: dict[str, tuple[tuple[str, Limits], ...]] = {}

    async def refresh(self) -> None:
        self._set(await self._store.list_tenants())

    def _set(self, records: Iterable[TenantRecord]) -> None:
        self._by_path = {r.path: r for r in records}
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

    async def remove(self, kind: str, path: str, *, live_keys: int) -> None:
        """Remove an empty level: no levels beneath it, no key that still works."""
        self.require(kind, path)
        below = self.children(path)
        if below:
            raise TenancyRefused(
                "conflict",
                f"{path} still holds {len(below)} "
                f"{'level' if len(below) == 1 else 'levels'} ({', '.join(sorted(below)[:3])}"
                f"{', …' if len(below) > 3 else ''}); remove {'it' if len(below) == 1 else 'them'} first",
            )
        if live_keys:
            raise TenancyRefused(
                "conflict",
                f"{path} still has {live_keys} API {'key' if live_keys == 1 else 'keys'}"
                " that work; revoke them first (llmgw ctl keys list --project " + path + ")",
            )
        await self._store.delete_tenant(path)
        await self.refresh()

    async def set_limits(self, path: str, limits: Limits) -> TenantRecord:
        rec = self.require(kind_of(path), path)
        rec = rec.model_copy(update={"limits": limits.model_dump(exclude_none=True)})
        await self._store.put_tenant(rec)
        self._by_path[path] = rec
        self._chains = {}
        return rec
