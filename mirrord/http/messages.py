"""What the mirror's HTTP server hands a handler and takes back from it.

A ``Request`` with its ``Body`` (read from the connection only as the handler
iterates it: ``async for chunk in req.body``, or ``await req.body.read(limit)``),
and one of three answers: ``Response`` (in memory), ``FileResponse`` (a range
of a file, sent with sendfile) or ``StreamResponse`` (chunked, as it is made).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# What one read of a request body hands the handler.
BODY_CHUNK_BYTES = 1 << 20

Headers = list[tuple[str, str]]


class BodyTooLarge(Exception):
    """A request body longer than the handler takes (answered 413)."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"the request body is over {limit_bytes} bytes")
        self.limit_bytes = limit_bytes


class BodyIncomplete(Exception):
    """The client stopped sending before its body's end (the connection is dropped)."""


class Body:
    """A request's body, read from the connection as the handler asks for it."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        length: int | None,
        chunked: bool,
        expect_continue: bool,
    ) -> None:
        self._reader = reader
        self._writer = writer
        # None with chunked: read to the last chunk.
        self.length = length
        self.chunked = chunked
        self._left = length or 0
        self._expect_continue = expect_continue
        self.started = False
        self.finished = not chunked and not length

    async def _continue(self) -> None:
        if self._expect_continue and not self.started:
            self._writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await self._writer.drain()
        self.started = True

    async def _next(self) -> bytes:
        if self.finished:
            return b""
        await self._continue()
        try:
            if self.chunked:
                return await self._next_chunk()
            data = await self._reader.read(min(self._left, BODY_CHUNK_BYTES))
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            raise BodyIncomplete("the client went away during its request body") from e
        if not data:
            raise BodyIncomplete("the client went away during its request body")
        self._left -= len(data)
        if self._left <= 0:
            self.finished = True
        return data

    async def _next_chunk(self) -> bytes:
        if self._left == 0:
            line = await self._reader.readuntil(b"\r\n")
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError as e:
                raise BodyIncomplete("a chunk of the request body has no size") from e
            if size == 0:
                # Trailers (if any) end with an empty line.
                while (await self._reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                self.finished = True
                return b""
            self._left = size
        data = await self._reader.read(min(self._left, BODY_CHUNK_BYTES))
        if not data:
            raise BodyIncomplete("the client went away during its request body")
        self._left -= len(data)
        if self._left == 0:
            await self._reader.readexactly(2)
        return data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[bytes]:
        while not self.finished:
            data = await self._next()
            if data:
                yield data

    async def read(self, limit_bytes: int) -> bytes:
        """The whole body; BodyTooLarge past ``limit_bytes``."""
        if self.length is not None and self.length > limit_bytes:
            raise BodyTooLarge(limit_bytes)
        parts: list[bytes] = []
        total = 0
        async for data in self:
            total += len(data)
            if total > limit_bytes:
                raise BodyTooLarge(limit_bytes)
            parts.append(data)
        return b"".join(parts)

    async def drain(self, max_bytes: int) -> bool:
        """Read and drop what the handler left; False when that was over ``max_bytes``."""
        if self.finished:
            return True
        if not self.started and self._expect_continue:
            # The client waits for our word before sending: it never sent the body.
            return False
        if self.length is not None and self._left > max_bytes:
            return False
        dropped = 0
        try:
            while not self.finished:
                dropped += len(await self._next())
                if dropped > max_bytes:
                    return False
        except (BodyIncomplete, asyncio.LimitOverrunError):
            return False
        return True


@dataclass
class Request:
    """One request as the handler sees it; ``path`` is still %-encoded."""

    method: str
    target: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    version: str
    body: Body
    client: tuple[str, int] | None = None
    # The client certificate's fields, when TLS verified one (a node's).
    peer_cert: dict[str, Any] | None = None
    tls: bool = False

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)

    def arg(self, name: str, default: str = "") -> str:
        values = self.query.get(name)
        return values[0] if values else default

    def base_url(self) -> str:
        """scheme://host[:port] as the client addressed us (for Link headers)."""
        host = self.header("host") or "127.0.0.1"
        return f"{'https' if self.tls else 'http'}://{host}"

    async def json(self, limit_bytes: int = 1 << 20) -> Any:
        """The body as JSON (ValueError when it is not)."""
        data = await self.body.read(limit_bytes)
        return json.loads(data) if data.strip() else {}


@dataclass
class Response:
    """An answer held in memory (JSON, HTML, small bytes)."""

    status: int = 200
    headers: Headers = field(default_factory=list)
    body: bytes = b""

    @classmethod
    def json(cls, obj: Any, status: int = 200, headers: Headers | None = None) -> Response:
        data = json.dumps(obj, separators=(",", ":")).encode()
        return cls(status, [("Content-Type", "application/json"), *(headers or [])], data)


@dataclass
class FileResponse:
    """``count`` bytes of a file from ``offset``, sent with sendfile."""

    status: int
    headers: Headers
    path: Path
    offset: int
    count: int


@dataclass
class StreamResponse:
    """An answer of unknown length, sent chunked as ``chunks`` yields."""

    status: int
    headers: Headers
    chunks: AsyncIterator[bytes]


AnyResponse = Response | FileResponse | StreamResponse
Handler = Callable[[Request], Awaitable[AnyResponse]]
