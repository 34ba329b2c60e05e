"""An engine's output: a file of its own, followed into the shard's log.

Output goes to a file, not to a pipe of the agent's. A pipe has one reader,
the agent that started the engine; when that agent restarts, the engine it
leaves running (and adopts a moment later) writes into a pipe nobody reads,
and its next write past the pipe's buffer fails with EPIPE — in a Python
engine that raises inside whatever the progress bar was reporting on. A file
has no reader to lose: the engine appends, every agent reads, and the lines
from before a restart are there for the agent after it.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from agentd.supervisor.scrub import scrub

# Past this a file is emptied in place and the engine goes on appending to
# it: a progress bar rewriting itself for an hour would otherwise fill the
# disk. The shard's log keeps the last lines, which is what operators read.
MAX_OUTPUT_BYTES = 64 << 20
# Lines kept per shard for `llmgw ctl logs`: a screenful of context many
# times over, and ~100 KB of memory for a typical engine.
LOG_LINES = 500
# A line with no newline is flushed at this length, so a \r-only progress
# bar or a binary blob cannot grow the pending buffer without bound.
MAX_LINE_BYTES = 64 << 10
# A line flushed at that length is cut at its last space within this much
# of the cut, so no word of it is split: a key cut in two would reach the
# log as two halves, neither of which the scrubber knows as the key.
CUT_SEARCH_BYTES = 4 << 10
# At most this much is read per pass: a flood of output is taken in slices
# between which the event loop runs other shards' work.
READ_SLICE_BYTES = 1 << 20
# An adopted engine's file is read from this far before its end: enough
# for the log's lines, without reading 64 MiB of old output at start.
ADOPTED_TAIL_BYTES = 1 << 20


class LogRing:
    """The last lines of a shard's output, oldest first."""

    def __init__(self, max_lines: int = LOG_LINES) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)

    def add(self, line: str) -> None:
        self._lines.append(line)

    def tail(self, n: int) -> list[str]:
        if n <= 0:
            return []
        return list(self._lines)[-n:]

    def __len__(self) -> int:
        return len(self._lines)


def open_output(path: Path) -> int:
    """A new, empty output file for a process that is new; 0600 from the start.

    O_APPEND matters: every write lands at the current end, so after the
    follower empties the file the engine writes at its start again rather
    than at its old offset, which would leave a sparse file of that size.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # a file left by an earlier run keeps its mode otherwise
    return fd


class OutputFollower:
    """Reads what a process appends to its file into a LogRing, its secrets scrubbed.

    Not a task of its own: the supervisor calls ``read_available`` on a
    timer and ``drain`` once the process has ended. Reads are of a local
    file from the page cache, bounded per pass, so they run on the loop.

    Every line is scrubbed (scrub.py) before the ring keeps it: the ring is
    what the shard's log, a failure's reason and the admin tools read.
    ``secrets`` are the values the engine was given to hide (scrub.secrets_of).
    """

    def __init__(
        self,
        path: Path,
        ring: LogRing,
        *,
        max_bytes: int = MAX_OUTPUT_BYTES,
        from_tail: bool = False,
        secrets: Sequence[str] = (),
    ) -> None:
        self.path = Path(path)
        self.ring = ring
        self.secrets = tuple(secrets)
        self.max_bytes = max_bytes
        self._from_tail = from_tail
        self._fd: int | None = None
        self._offset = 0
        self._pending = b""
        self._skip_to_newline = False

    def _open(self) -> bool:
        try:
            # Read-write: the cap empties this very file even if its name is
            # gone or taken by a newer one.
            self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        if self._from_tail:
            size = os.fstat(self._fd).st_size
            if size > ADOPTED_TAIL_BYTES:
                self._offset = size - ADOPTED_TAIL_BYTES
                self._skip_to_newline = True  # the first line read is a piece of one
        return True

    def read_available(self) -> bool:
        """Take in what is new (one slice at most); True when more is waiting."""
        if self._fd is None and not self._open():
            return False
        fd = self._fd
        size = os.fstat(fd).st_size
        if size < self._offset:
            # Emptied past its bound, by this agent or an earlier one.
            self._offset, self._pending = 0, b""
        budget = READ_SLICE_BYTES
        while self._offset < size and budget > 0:
            data = os.pread(fd, min(64 << 10, size - self._offset, budget), self._offset)
            if not data:
                break
            self._offset += len(data)
            budget -= len(data)
            self._feed(data)
        if size > self.max_bytes:
            os.ftruncate(fd, 0)
            self._offset, self._pending = 0, b""
            self.ring.add(f"[output file passed {self.max_bytes} bytes and was emptied]")
            return False
        return self._offset < size

    def _feed(self, data: bytes) -> None:
        if self._skip_to_newline:
            newline = data.find(b"\n")
            if newline < 0:
                return
            data, self._skip_to_newline = data[newline + 1 :], False
        *lines, rest = (self._pending + data).split(b"\n")
        for raw in lines:
            self._emit(raw)
        while len(rest) > MAX_LINE_BYTES:
            cut = rest.rfind(b" ", MAX_LINE_BYTES - CUT_SEARCH_BYTES, MAX_LINE_BYTES) + 1
            cut = cut or MAX_LINE_BYTES
            self._emit(rest[:cut])
            rest = rest[cut:]
        self._pending = rest

    def _emit(self, raw: bytes) -> None:
        # A progress bar redraws with \r: its last drawing is what it says now.
        line = raw.rstrip(b"\r").rsplit(b"\r", 1)[-1]
        self.ring.add(scrub(line.decode("utf-8", errors="replace"), self.secrets))

    def drain(self) -> None:
        """Read to the end, pending half-line included: the process has ended."""
        for _ in range(64):  # 64 slices: 64 MiB, the most a file can hold
            if not self.read_available():
                break
        if self._pending:
            self._emit(self._pending)
            self._pending = b""

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
