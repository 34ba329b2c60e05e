"""Pid files of the long-running llmgw commands (server, agent, mirror serve).

Each writes its pid under the run dir while it runs and removes the file on a
clean exit, so ``llmgw stop`` finds it on a machine without systemd. A file
left by a crash is harmless: a pid is trusted only while it names a live llmgw
process of the same kind (a reused pid belongs to some other program).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import psutil

log = logging.getLogger(__name__)


@contextlib.contextmanager
def held(path: Path) -> Iterator[None]:
    """This process's pid in ``path`` for the duration; removed after if still ours.

    A pid file that cannot be written (a run dir this user may not write) is
    said in the log and not fatal: the daemon matters more than the file.
    """
    pid = os.getpid()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{pid}")
        tmp.write_text(f"{pid}\n")
        tmp.replace(path)
    except OSError as e:
        log.warning("could not write the pid file %s: %s", path, e.strerror)
    try:
        yield
    finally:
        # Another instance started since (the fault suite runs several) owns it now.
        if read_pid(path) == pid:
            with contextlib.suppress(OSError):
                path.unlink()


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def live_pid(path: Path, word: str) -> int | None:
    """The pid in ``path`` when it is a running llmgw process whose command has ``word``."""
    pid = read_pid(path)
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        argv = proc.cmdline()
    except psutil.Error:
        return None
    is_llmgw = any(Path(a).name == "llmgw" or a == "llmgw" for a in argv)
    return pid if is_llmgw and word in argv else None
