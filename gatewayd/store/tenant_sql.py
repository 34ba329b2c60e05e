"""The tenancy tree's SQL, one text for both backends, and the removal both run.

Written with ``?`` placeholders; PostgreSQL runs them through ``numbered``
(``$1``, ``$2``, …). A level is found with the levels beneath it by its path
and the path's prefix (``substr``, not LIKE: SQLite's LIKE ignores case, and
paths may hold ``_``); everything a level holds refers to its id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gatewayd.store.tenant_records import TenantHoldings, TenantRemoval

# A level and everything beneath it; arguments: subtree_args(path).
SUBTREE = "(path = ? OR substr(path, 1, ?) = ?)"
_IDS = f"SELECT id FROM tenants WHERE {SUBTREE}"

TENANT_COLUMNS = "id, path, kind, limits, created_at"
SELECT_TENANTS = f"SELECT {TENANT_COLUMNS} FROM tenants"
# A level and those beneath take the new prefix; nothing else changes, as all else
# refers to ids. Arguments: (new_path, len(path) + 1, *subtree_args(path)).
RENAME = f"UPDATE tenants SET path = ? || substr(path, ?) WHERE {SUBTREE}"
# The id's path now, or the last one it had (a removed level's).
PATH_OF_ID = "SELECT path FROM tenant_names WHERE id = ?"
# In the SELECT list of a table with a project_id (keys, files, batches, responses):
# the project's path as it is now, for people (the id is what the row belongs to).
PROJECT_PATH = "COALESCE((SELECT path FROM tenant_names WHERE id = project_id), '') AS project"

# MCP grants to a level are kept as KIND:ID (project:ten_…), to a key as key:key_…;
# they are given and shown by path (project:Acme/ml/search). A grant whose level is
# gone is not shown (a removal takes its grants; these are from before ids).
STORED_SCOPE = "SELECT kind || ':' || id AS scope FROM tenants WHERE kind = ? AND path = ?"
GRANTS_BY_PATH = (
    "SELECT COALESCE(t.kind || ':' || t.path, g.scope) AS scope, g.target, g.created_at"
    " FROM mcp_grants g LEFT JOIN tenants t ON g.scope = t.kind || ':' || t.id"
    " WHERE substr(g.scope, 1, 4) = 'key:' OR t.id IS NOT NULL"
)

# Grants to the levels, or to their keys; arguments: (*subtree, *subtree).
_GRANTED = (
    f"(scope IN (SELECT kind || ':' || id FROM tenants WHERE {SUBTREE})"
    f" OR scope IN (SELECT 'key:' || key_id FROM api_keys WHERE project_id IN ({_IDS})))"
)
_LEVELS = f"SELECT id, kind, path FROM tenants WHERE {SUBTREE}"
# Arguments: (now, *subtree).
_KEYS = (
    "SELECT key_id, name,"
    " CASE WHEN revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?) THEN 1 ELSE 0 END"
    f" AS live FROM api_keys WHERE project_id IN ({_IDS}) ORDER BY created_at, key_id"
)
# Files not expired yet (an expired one is deleted by the sweep anyway); (*subtree, now).
_FILES = (
    f"SELECT file_id, filename FROM files WHERE project_id IN ({_IDS})"
    " AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at, file_id"
)
_BATCHES = (
    f"SELECT batch_id FROM batches WHERE project_id IN ({_IDS}) ORDER BY created_at, batch_id"
)
_GRANTS = f"SELECT scope, target FROM mcp_grants WHERE {_GRANTED} ORDER BY scope, target"
_RESPONSES = f"SELECT COUNT(*) AS n FROM responses WHERE project_id IN ({_IDS})"

# The removal, in the order ``remove`` runs it (the levels go last: the others find
# their rows through them). Each removed level's id and last path are kept: its
# usage stays, shown under that path. Arguments: (now, *subtree).
_RECORD_REMOVED = (
    "INSERT INTO removed_tenants (id, path, kind, removed_at)"
    f" SELECT id, path, kind, ? FROM tenants WHERE {SUBTREE}"
)
_DELETE_GRANTS = f"DELETE FROM mcp_grants WHERE {_GRANTED}"
_DELETE_KEYS = f"DELETE FROM api_keys WHERE project_id IN ({_IDS})"
# Files expire now: the batch runner's sweep deletes them with their bytes (on the
# leader, which keeps them); no project reaches them meanwhile. (now, *subtree, now)
_EXPIRE_FILES = (
    f"UPDATE files SET expires_at = ? WHERE project_id IN ({_IDS})"
    " AND (expires_at IS NULL OR expires_at > ?)"
)
_DELETE_BATCHES = f"DELETE FROM batches WHERE project_id IN ({_IDS})"
_DELETE_RESPONSES = f"DELETE FROM responses WHERE project_id IN ({_IDS})"
_DELETE_LEVELS = f"DELETE FROM tenants WHERE {SUBTREE}"

_MARK = re.compile(r"\?")


def numbered(sql: str) -> str:
    """``?`` placeholders as PostgreSQL's ``$1``, ``$2``, … (the texts here hold no other ``?``)."""
    count = 0

    def next_mark(_: re.Match) -> str:
        nonlocal count
        count += 1
        return f"${count}"

    return _MARK.sub(next_mark, sql)


def level_of(scope: str) -> tuple[str, str] | None:
    """``project:Acme/ml/search`` → (project, Acme/ml/search); None for a key's scope."""
    kind, _, path = scope.partition(":")
    return None if kind == "key" else (kind, path)


def subtree_args(path: str) -> tuple:
    return (path, len(path) + 1, path + "/")


def rename_args(path: str, new_path: str) -> tuple:
    return (new_path, len(path) + 1, *subtree_args(path))


class Tx(Protocol):
    """A backend's open transaction, taking the texts above as written (``?``)."""

    async def rows(self, sql: str, args: Sequence[Any]) -> list[Mapping[str, Any]]: ...

    async def run(self, sql: str, args: Sequence[Any]) -> None: ...


def _named(name: str, ident: str) -> str:
    return f"{name} ({ident})" if name else ident


async def holdings(tx: Tx, path: str, now: Any) -> TenantHoldings:
    """What ``path`` and every level beneath it hold; ``now`` as the backend keeps times."""
    sub = subtree_args(path)
    levels = await tx.rows(_LEVELS, sub)
    by_scope = {f"{r['kind']}:{r['id']}": f"{r['kind']}:{r['path']}" for r in levels}
    keys = await tx.rows(_KEYS, (now, *sub))
    files = await tx.rows(_FILES, (*sub, now))
    batches = await tx.rows(_BATCHES, sub)
    grants = await tx.rows(_GRANTS, (*sub, *sub))
    responses = await tx.rows(_RESPONSES, sub)
    return TenantHoldings(
        # Sorted here: PostgreSQL's collation would not sort paths as SQLite does.
        levels=sorted(r["path"] for r in levels),
        live_keys=[_named(r["name"], r["key_id"]) for r in keys if r["live"]],
        spent_keys=sum(1 for r in keys if not r["live"]),
        files=[_named(r["filename"], r["file_id"]) for r in files],
        batches=[r["batch_id"] for r in batches],
        grants=[f"{by_scope.get(r['scope'], r['scope'])} → {r['target']}" for r in grants],
        stored_responses=int(responses[0]["n"]) if responses else 0,
    )


async def remove(tx: Tx, path: str, *, force: bool, now: Any) -> TenantRemoval | None:
    """Remove ``path``, the levels beneath it and all they hold, in the caller's transaction;
    refused (nothing removed) while it holds anything that blocks and ``force`` is not set.
    None when there is no such level."""
    held = await holdings(tx, path, now)
    if not held.levels or held.levels[0] != path:
        return None
    if held.blocking and not force:
        return TenantRemoval(removed=False, held=held)
    sub = subtree_args(path)
    await tx.run(_RECORD_REMOVED, (now, *sub))
    await tx.run(_DELETE_GRANTS, (*sub, *sub))
    await tx.run(_DELETE_KEYS, sub)
    await tx.run(_EXPIRE_FILES, (now, *sub, now))
    await tx.run(_DELETE_BATCHES, sub)
    await tx.run(_DELETE_RESPONSES, sub)
    await tx.run(_DELETE_LEVELS, sub)
    return TenantRemoval(removed=True, held=held)
