"""A link between one control plane and one PostgreSQL member that the suite can cut.

A TCP forwarder on a loopback port of its own: the control plane's DSN names
the links, one per Patroni member, instead of the members. ``cut()`` is a
network partition as the control plane sees it: the connections it has stop
carrying bytes (nothing is closed, nothing refused: its reads wait, as on a
cable pulled out), and new ones are taken but never reach the member.
``restore()`` closes what stood through the cut (as TCP gives up on a peer
gone for long) and forwards new connections again.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

CHUNK = 64 * 1024


@dataclass
class StoreLink:
    """127.0.0.1:``port`` → ``target`` (``host:port``), cut and restored on demand."""

    target: str
    port: int = 0
    _server: asyncio.Server | None = None
    _open: asyncio.Event = field(default_factory=asyncio.Event)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _tasks: set[asyncio.Task] = field(default_factory=set)

    async def start(self) -> StoreLink:
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return not self._open.is_set()

    def cut(self) -> None:
        self._open.clear()

    def restore(self) -> None:
        """Forward again; every connection that stood through the cut is closed first."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        self._open.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        # While cut, a new connection is taken and then hears nothing (a dial that
        # hangs, not one refused).
        await self._open.wait()
        if writer.transport.is_closing():  # taken during a cut: closed by restore()
            self._writers.discard(writer)
            return
        host, port = self.target.rsplit(":", 1)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.transport.abort()
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer)),
            asyncio.ensure_future(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._tasks.discard(task)
            for w in (writer, up_writer):
                w.transport.abort()
                self._writers.discard(w)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                return
            # Bytes read during a cut are held, never passed on: the cut swallows them.
            await self._open.wait()
            if writer.transport.is_closing():
                return
            writer.write(data)
            await writer.drain()
