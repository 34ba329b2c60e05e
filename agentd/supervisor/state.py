"""Shard state files: what a restarted agent reads to adopt the engines still running.

One file per shard, ``<state_dir>/<shard_id>.json``, written atomically (a
crash mid-write leaves the old file or the new one) and 0600 in a 0700
directory: it names processes and ports, nothing anyone else needs.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pydantic import ValidationError

from agentd.supervisor.model import ShardRecord, check_shard_id
from llmgw.fsutil import write_atomic

log = logging.getLogger(__name__)


def state_path(state_dir: Path, shard_id: str) -> Path:
    return Path(state_dir) / f"{check_shard_id(shard_id)}.json"


def write_record(state_dir: Path, record: ShardRecord) -> None:
    """Write (or replace) a shard's state file. Blocking: it fsyncs."""
    Path(state_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(
        state_path(state_dir, record.shard_id), record.model_dump_json(indent=2), mode=0o600
    )


def remove_record(state_dir: Path, shard_id: str) -> None:
    state_path(state_dir, shard_id).unlink(missing_ok=True)


def read_records(state_dir: Path) -> tuple[list[ShardRecord], dict[str, str]]:
    """Every readable state file, and why each unreadable one was not (by shard id).

    Temp files of a write in progress (a leading dot) are not records.
    """
    records: list[ShardRecord] = []
    unreadable: dict[str, str] = {}
    directory = Path(state_dir)
    if not directory.is_dir():
        return records, unreadable
    for path in sorted(directory.glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            record = ShardRecord.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as e:
            log.warning("shard state file %s is unreadable: %s", path, e)
            unreadable[path.stem] = "its state file could not be read"
            continue
        if record.shard_id != path.stem:
            unreadable[path.stem] = f"its state file names another shard ({record.shard_id})"
            continue
        records.append(record)
    return records, unreadable
