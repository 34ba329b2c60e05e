"""The agent's side of its engine doors: each a process of its own (``python -m agentd.door``).

An engine outlives its agent (it is adopted when the agent comes back), so
its door must too: a door inside the agent took every replica of the node
off the air for as long as the agent was away (the fault suite's kill -9 of
the agent saw 502s). So each door runs in a session of its own beside its
engine; the agent writes the door's record (keys, the engine's pid) and
signals it (SIGHUP) to read it again, and finds it still running when it
comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import sys
from pathlib import Path

import psutil

from agentd.door.door import DoorRecord, new_engine_key, read_record, write_record

log = logging.getLogger(__name__)

START_TIMEOUT_S = 15.0


class DoorKeeper:
    """Every shard's door on this node, kept under ``state_dir`` (a 0600 record each).

    ``tls_files``: (CA, certificate, key) for TLS from other machines; None
    where the doors are on loopback only.
    """

    def __init__(self, state_dir: Path, host: str, tls_files: tuple[Path, Path, Path] | None):
        self.state_dir = state_dir
        self.host = host
        self.tls_files = tls_files

    def record(self, shard_id: str) -> DoorRecord | None:
        return read_record(self._file(shard_id))

    def prepare(self, shard_id: str, engine_port: int, keys: list[str]) -> DoorRecord:
        """A new record for a shard about to start: its engine's port and a fresh key."""
        return DoorRecord(shard_id, 0, engine_port, new_engine_key(), list(keys))

    async def open(self, record: DoorRecord) -> int:
        """Start a shard's door (or find it still running, after an agent restart); its port."""
        if record.pid and _is_door(record.pid):
            return record.port
        write_record(self._file(record.shard_id), record)
        argv = [sys.executable, "-m", "agentd.door", str(self._file(record.shard_id)),
                "--host", self.host]  # fmt: skip
        if self.tls_files is not None:
            ca, cert, key = self.tls_files
            argv += ["--ca", str(ca), "--cert", str(cert), "--key", str(key)]
        log_file = self._file(record.shard_id).with_suffix(".log")
        pid, port = await asyncio.to_thread(_spawn, argv, log_file)
        record.port, record.pid = port, pid
        write_record(self._file(record.shard_id), record)
        return port

    def set_keys(self, shard_id: str, keys: list[str]) -> bool:
        """The keys a shard's door takes from now on; False when it has no door here."""
        return self._change(shard_id, keys=list(keys))

    def set_engine_pid(self, shard_id: str, pid: int) -> None:
        self._change(shard_id, engine_pid=pid)

    async def close(self, shard_id: str, record: DoorRecord | None = None) -> None:
        """End a shard's door: the one ``record`` names (as it was when its stop began),
        else the one running now. A door started meanwhile for a new start of the same
        shard is left alone, and so is its record."""
        now = self.record(shard_id)
        record = record or now
        if record is None:
            return
        if now is not None and now.pid == record.pid:
            with contextlib.suppress(FileNotFoundError):
                self._file(shard_id).unlink()
        if record.pid and _is_door(record.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGTERM)

    async def close_all(self) -> None:
        """Nothing: doors stay beside their engines while the agent is away."""

    def pids(self) -> list[int]:
        """The door processes running now (for a test's cluster going away)."""
        out = []
        for path in self.state_dir.glob("*.json"):
            record = read_record(path)
            if record is not None and record.pid and _is_door(record.pid):
                out.append(record.pid)
        return out

    def _change(self, shard_id: str, **fields) -> bool:
        record = self.record(shard_id)
        if record is None or not record.pid or not _is_door(record.pid):
            return False
        for name, value in fields.items():
            setattr(record, name, value)
        write_record(self._file(shard_id), record)
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGHUP)
        return True

    def _file(self, shard_id: str) -> Path:
        return self.state_dir / f"{shard_id}.json"


def _spawn(argv: list[str], log_file: Path) -> tuple[int, int]:
    """Start a door in a session of its own, not as a child asyncio or Popen would wait on
    (it outlives the agent); (its pid, the port it printed)."""
    err = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    read_end, write_end = os.pipe()
    try:
        pid = os.posix_spawn(
            argv[0],
            argv,
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, write_end, 1),
                (os.POSIX_SPAWN_DUP2, err, 2),
            ],
            setsid=True,
        )
    finally:
        os.close(write_end)
        os.close(err)
    with os.fdopen(read_end, "rb") as out:
        ready, _, _ = select.select([out], [], [], START_TIMEOUT_S)
        line = out.readline() if ready else b""
    try:
        return pid, int(line)
    except ValueError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
        tail = log_file.read_text(errors="replace")[-400:].strip()
        raise OSError(f"the engine door did not start: {tail or 'no word from it'}") from None


def _reap(pid: int) -> None:
    """Collect a door of this agent's that has ended (none of an earlier agent's is ours)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _is_door(pid: int) -> bool:
    _reap(pid)
    try:
        return "agentd.door" in " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
