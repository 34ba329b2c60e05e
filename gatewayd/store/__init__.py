"""The control plane's durable state: one async interface, SQLite or PostgreSQL.

``open_store_from_config`` picks the backend from server.yaml's ``store``
section; ``connect_store`` also opens it (connects, applies migrations).
Driver errors come out as ``StoreError``; problems in the settings
themselves as ``ConfigError``. No message ever shows a DSN's password.
"""

from __future__ import annotations

from pathlib import Path

from gatewayd.store.base import Store
from gatewayd.store.cluster_records import ControlPlaneRecord, LeaderChange, LeaseState
from gatewayd.store.mcp_records import McpCallRow, McpGrantRecord, McpServerRecord
from gatewayd.store.postgres.store import PostgresStore, mask_dsn
from gatewayd.store.records import (
    HeartbeatRow,
    KeyRecord,
    ModelRecord,
    NodeRecord,
    ReplicaRecord,
    TenantRecord,
)
from gatewayd.store.sqlite.store import SqliteStore
from gatewayd.store.usage_records import USAGE_DIMENSIONS, UsageFields, UsageRecord, UsageSum
from llmgw.config import StoreConfig
from llmgw.errors import ConfigError
from llmgw.paths import Paths

__all__ = [
    "USAGE_DIMENSIONS",
    "ControlPlaneRecord",
    "HeartbeatRow",
    "KeyRecord",
    "LeaderChange",
    "LeaseState",
    "McpCallRow",
    "McpGrantRecord",
    "McpServerRecord",
    "ModelRecord",
    "NodeRecord",
    "PostgresStore",
    "ReplicaRecord",
    "SqliteStore",
    "Store",
    "TenantRecord",
    "UsageFields",
    "UsageRecord",
    "UsageSum",
    "connect_store",
    "mask_dsn",
    "open_store_from_config",
    "resolve_dsn",
]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_SQLITE_SCHEME = "sqlite://"


def resolve_dsn(cfg: StoreConfig, paths: Paths) -> str:
    """The DSN in force: ``store.dsn``, or the contents of ``store.dsn_file``; may be empty."""
    if cfg.dsn and cfg.dsn_file:
        raise ConfigError(
            "store.dsn and store.dsn_file are both set",
            hint="keep one: dsn_file when the DSN holds a password",
        )
    if not cfg.dsn_file:
        return cfg.dsn
    # A relative dsn_file is relative to the config dir, like the other files it holds.
    path = paths.config_dir / Path(cfg.dsn_file).expanduser()
    try:
        dsn = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError as e:
        raise ConfigError(
            f"store.dsn_file {path} does not exist",
            hint="write the DSN into it (mode 0600), or remove store.dsn_file",
        ) from e
    except OSError as e:
        raise ConfigError(f"store.dsn_file {path} cannot be read: {e.strerror}") from e
    if not dsn:
        raise ConfigError(
            f"store.dsn_file {path} is empty",
            hint="write postgresql://USER:PASSWORD@HOST:PORT/DATABASE into it",
        )
    if not dsn.startswith((*_POSTGRES_SCHEMES, _SQLITE_SCHEME)):
        # Not echoed: the file is a secret, and a malformed DSN may still hold a password.
        raise ConfigError(
            f"store.dsn_file {path} does not hold a postgresql://… or sqlite:///… DSN",
            hint="write postgresql://USER:PASSWORD@HOST:PORT/DATABASE into it",
        )
    return dsn


def _sqlite_path(dsn: str, paths: Paths) -> Path:
    """``sqlite:///var/lib/x.db`` → /var/lib/x.db; ``sqlite://x.db`` → x.db in the data dir."""
    rest = dsn.removeprefix(_SQLITE_SCHEME)
    if not rest.strip("/"):
        raise ConfigError(
            f"store.dsn {dsn!r} names no file", hint="write it as sqlite:///path/to/llmgw.db"
        )
    if rest.startswith("/"):
        # sqlite:////abs (the SQLAlchemy spelling) means the same as sqlite:///abs.
        return Path("/" + rest.lstrip("/"))
    return paths.server_data_dir / rest


def open_store_from_config(cfg: StoreConfig, paths: Paths) -> Store:
    """The store ``cfg`` describes, constructed but not opened.

    Empty DSN: SQLite at ``paths.sqlite_file``; ``postgresql://`` or
    ``postgres://``: PostgreSQL; ``sqlite:///path``: SQLite at that path.
    """
    dsn = resolve_dsn(cfg, paths)
    if not dsn:
        return SqliteStore(paths.sqlite_file)
    if dsn.startswith(_POSTGRES_SCHEMES):
        return PostgresStore(dsn, cluster_ca=paths.ca_cert)
    if dsn.startswith(_SQLITE_SCHEME):
        return SqliteStore(_sqlite_path(dsn, paths))
    raise ConfigError(
        f"store.dsn {mask_dsn(dsn)} is neither postgresql://… nor sqlite:///…",
        hint="leave it empty for the embedded SQLite file",
    )


async def connect_store(cfg: StoreConfig, paths: Paths) -> Store:
    """The store ``cfg`` describes, opened: connected and migrated. Close it when done."""
    store = open_store_from_config(cfg, paths)
    await store.open()
    return store
