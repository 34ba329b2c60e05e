"""A streaming reader of multipart/form-data bodies (RFC 7578), as the ``openai`` SDK sends them.

Fed the body a chunk at a time, it hands out each part's headers and then its
bytes as they come, holding back only what could be the start of the next
boundary, so a 200 MB upload goes to disk without being held in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

# Headers of one part past this are not a form part: refused rather than buffered.
MAX_PART_HEADER_BYTES = 16 * 1024


class MultipartError(ValueError):
    """The body is not multipart/form-data as its content-type says."""


def boundary_of(content_type: str) -> bytes:
    """The boundary a ``multipart/form-data; boundary=…`` content-type names."""
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise MultipartError("the body must be multipart/form-data (a form with purpose and file)")
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value:
            value = value.strip().strip('"')
            if 0 < len(value) <= 200:
                return value.encode("latin-1")
    raise MultipartError("the multipart/form-data content-type names no boundary")


@dataclass
class Part:
    """A part's headers: its form field ``name`` and, for a file, its ``filename``."""

    name: str
    filename: str | None
    headers: dict[str, str] = field(default_factory=dict)


def _disposition(value: str) -> tuple[str, str | None]:
    name, filename = "", None
    for item in value.split(";")[1:]:
        key, _, v = item.strip().partition("=")
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] == '"':
            v = v[1:-1].replace('\\"', '"')
        if key.lower() == "name":
            name = v
        elif key.lower() == "filename":
            filename = v
    return name, filename


def _part(raw: bytes) -> Part:
    headers = {}
    for line in raw.decode("utf-8", "replace").split("\r\n"):
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise MultipartError(f"a part's header line {line[:60]!r} has no ':'")
        headers[key.strip().lower()] = value.strip()
    disposition = headers.get("content-disposition", "")
    if not disposition.lower().startswith("form-data"):
        raise MultipartError("a part has no content-disposition: form-data header")
    name, filename = _disposition(disposition)
    return Part(name, filename, headers)


class MultipartReader:
    """Feed it the body; iterate what each chunk completes: Part, bytes, or None (a part ended)."""

    def __init__(self, boundary: bytes) -> None:
        # Every boundary but the first follows a CRLF; a CRLF put in front of the
        # body makes the first one look the same.
        self._delimiter = b"\r\n--" + boundary
        self._buf = b"\r\n"
        self._state = "preamble"
        self.done = False

    def feed(self, chunk: bytes) -> Iterator[Part | bytes | None]:
        self._buf += chunk
        d = self._delimiter
        while True:
            if self._state == "preamble":
                at = self._buf.find(d)
                if at < 0:
                    self._buf = self._buf[-(len(d) - 1) :]
                    return
                self._buf = self._buf[at + len(d) :]
                self._state = "after_boundary"
            if self._state == "after_boundary":
                if len(self._buf) < 2:
                    return
                if self._buf.startswith(b"--"):
                    self._state, self.done, self._buf = "end", True, b""
                    return
                # Transport padding (spaces, tabs) may sit before the CRLF.
                end = self._buf.find(b"\r\n")
                if end < 0:
                    if len(self._buf) > 256:
                        raise MultipartError("a boundary line does not end")
                    return
                self._buf = self._buf[end + 2 :]
                self._state = "headers"
            if self._state == "headers":
                if self._buf.startswith(b"\r\n"):  # a part with no headers at all
                    raise MultipartError("a part has no content-disposition: form-data header")
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buf) > MAX_PART_HEADER_BYTES:
                        raise MultipartError("a part's headers are too long")
                    return
                yield _part(self._buf[:end])
                self._buf = self._buf[end + 4 :]
                self._state = "data"
            if self._state == "data":
                at = self._buf.find(d)
                if at < 0:
                    # Keep what could be the start of the delimiter.
                    keep = len(d) - 1
                    if len(self._buf) > keep:
                        yield self._buf[:-keep]
                        self._buf = self._buf[-keep:]
                    return
                if at:
                    yield self._buf[:at]
                yield None
                self._buf = self._buf[at + len(d) :]
                self._state = "after_boundary"
            if self._state == "end":
                return
