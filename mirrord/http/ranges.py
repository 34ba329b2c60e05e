"""Byte ranges of a file: ``Range``, ``If-Range``, 206 and 416, as the hub answers them.

A client that resumes (huggingface_hub after a cut, an agent moving to the
next mirror at the byte it reached) sends ``Range: bytes=N-`` and must get
206: a 200 makes huggingface_hub throw away what it has and start over. One
range is served; a header naming several, or one we cannot read, is ignored
and the whole file sent (RFC 9110 lets a server do that).
"""

from __future__ import annotations

from pathlib import Path

from mirrord.http.messages import FileResponse, Headers, Request, Response


class Unsatisfiable(Exception):
    """A range that starts past the file's end (answered 416)."""


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """``(first, last)`` inclusive of one byte range, or None for the whole file."""
    unit, sep, spec = (header or "").partition("=")
    if not sep or unit.strip().lower() != "bytes" or "," in spec:
        return None
    first_text, dash, last_text = spec.strip().partition("-")
    if not dash:
        return None
    first_text, last_text = first_text.strip(), last_text.strip()
    if not (first_text.isdigit() or first_text == "") or not (
        last_text.isdigit() or last_text == ""
    ):
        return None
    if not first_text:
        # A suffix: the last N bytes.
        if not last_text:
            return None
        n = int(last_text)
        if n == 0 or size == 0:
            raise Unsatisfiable
        return max(size - n, 0), size - 1
    first = int(first_text)
    if first >= size:
        raise Unsatisfiable
    last = int(last_text) if last_text else size - 1
    if last < first:
        return None
    return first, min(last, size - 1)


def serve_file(req: Request, path: Path, size: int, etag: str, headers: Headers):
    """The whole file (200), a range of it (206) or 416, with ``headers`` on each.

    ``etag`` is bare (a digest); it is sent quoted, and an ``If-Range`` naming
    another one gets the whole file, as the representation changed.
    """
    quoted = f'"{etag}"'
    head: Headers = [
        ("ETag", quoted),
        ("Accept-Ranges", "bytes"),
        *headers,
    ]
    if not any(k.lower() == "content-type" for k, _ in head):
        head.append(("Content-Type", "application/octet-stream"))
    rng = req.header("range")
    if_range = req.header("if-range")
    if rng and if_range and if_range != quoted:
        rng = ""
    try:
        part = parse_range(rng, size) if rng else None
    except Unsatisfiable:
        return Response(416, [*head, ("Content-Range", f"bytes */{size}")], b"")
    if part is None:
        return FileResponse(200, head, path, 0, size)
    first, last = part
    head.append(("Content-Range", f"bytes {first}-{last}/{size}"))
    return FileResponse(206, head, path, first, last - first + 1)
