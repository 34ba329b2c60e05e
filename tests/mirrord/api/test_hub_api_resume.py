"""A download cut half way resumes from the mirror with a 206, as huggingface_hub does it.

huggingface_hub 2.4 resumes inside one download: when the connection drops
mid-body it asks again with ``Range: bytes=<what it has>-`` into the same
temporary file, and a 200 there would make it throw away what it has. A
proxy between the client and the mirror cuts the first answer of the file
after half its bytes, and notes every request and status that passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Self

from huggingface_hub import hf_hub_download

# Over two of huggingface_hub's 10 MB read chunks: it writes (and so resumes
# after) whole chunks only, so a cut before the first chunk's end restarts
# the file however the server answers.
WEIGHTS = os.urandom(24 << 20)


class CuttingProxy:
    """HTTP/1.1 to the mirror, one request per upstream connection; cuts one answer once."""

    def __init__(self, upstream_port: int, cut_path: str, cut_after_bytes: int) -> None:
        self.upstream_port = upstream_port
        self.cut_path = cut_path
        self.cut_after_bytes = cut_after_bytes
        self.seen: list[tuple[str, str, str]] = []  # (request line, range, status line)
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            rng = next((v for v in lines if v.lower().startswith("range:")), "")
            # The client's connection ends with this answer: it asks again on a new one.
            head = head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            up_w.write(head)
            await up_w.drain()
            answer = await up_r.readuntil(b"\r\n\r\n")
            status = answer.split(b"\r\n", 1)[0].decode()
            self.seen.append((lines[0], rng.partition(":")[2].strip(), status))
            writer.write(answer)
            cut = lines[0].startswith("GET ") and self.cut_path in lines[0] and not rng
            left = self.cut_after_bytes if cut and self.cut_after_bytes else -1
            while data := await up_r.read(1 << 16):
                if left >= 0:
                    data = data[:left]
                    left -= len(data)
                writer.write(data)
                await writer.drain()
                if left == 0:
                    self.cut_after_bytes = 0  # once
                    writer.transport.abort()
                    break
            up_w.close()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()


async def test_a_download_cut_at_half_resumes_with_a_206_and_is_byte_identical(mirror, tmp_path):
    mirror.put_model("org/big", {"model.safetensors": WEIGHTS, "config.json": b"{}"})
    half = len(WEIGHTS) // 2
    async with CuttingProxy(mirror.port, "/model.safetensors", half) as proxy:
        got = await asyncio.to_thread(
            hf_hub_download,
            "org/big",
            "model.safetensors",
            endpoint=f"http://127.0.0.1:{proxy.port}",
            token=mirror.read_token,
            cache_dir=tmp_path / "hf",
        )
    assert Path(got).read_bytes() == WEIGHTS
    gets = [(rng, status) for line, rng, status in proxy.seen if line.startswith("GET ")]
    # The first GET was cut; the second asked for the rest, from where the cut
    # left it, and got it as a 206 (never the whole file again).
    assert gets[0] == ("", "HTTP/1.1 200 OK")
    rng, status = gets[1]
    assert status == "HTTP/1.1 206 Partial Content"
    resumed_at = int(rng.removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= half
    assert len(gets) == 2


async def test_a_resume_of_a_file_at_its_end_gets_416_naming_the_size(mirror):
    # Guards huggingface_hub#2197: a mirror answering a resume past the end
    # without Content-Range left the client unable to tell it was complete.
    mirror.put_model("org/big", {"model.safetensors": WEIGHTS})
    async with mirror.client() as c:
        r = await c.get(
            "/org/big/resolve/main/model.safetensors",
            headers={"Range": f"bytes={len(WEIGHTS)}-"},
        )
    assert r.status_code == 416
    assert r.headers["content-range"] == f"bytes */{len(WEIGHTS)}"
