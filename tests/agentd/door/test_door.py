"""The engine door over real sockets: keys checked and swapped, TLS with a control plane's certificate."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from agentd.door import Doors, door_context
from llmgw.tls import pki

KEY = "replica-key-0123456789"


@pytest.fixture
async def engine():
    """A stand-in engine on loopback: answers with the Authorization it got, streams on /stream."""
    seen: list[str] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(request.headers.get("authorization", ""))
        body = await request.read()
        return web.json_response({"auth": request.headers.get("authorization"), "len": len(body)})

    async def stream(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("authorization", ""))
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(5):
            await resp.write(f"data: {i}\n\n".encode())
            await asyncio.sleep(0)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/echo", echo)
    app.router.add_post("/v1/stream", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield port, seen
    await runner.cleanup()


async def _door(tmp_path: Path, engine_port: int, **kw) -> tuple[Doors, int, str]:
    doors = Doors(tmp_path / "doors", "127.0.0.1", kw.pop("tls", None), **kw)
    record = doors.prepare("s1", engine_port, [KEY])
    port = await doors.open(record)
    return doors, port, record.engine_key


async def test_a_request_with_the_replica_key_reaches_the_engine_with_the_engines_own_key(
    tmp_path, engine
):
    engine_port, seen = engine
    doors, port, engine_key = await _door(tmp_path, engine_port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(3):  # one kept connection, several requests
                r = await http.post(
                    "/v1/echo", content=b"x" * 100_000, headers={"authorization": f"Bearer {KEY}"}
                )
                assert r.status_code == 200
                assert r.json() == {"auth": f"Bearer {engine_key}", "len": 100_000}
            chunks = []
            async with http.stream(
                "POST", "/v1/stream", content=b"{}", headers={"authorization": f"Bearer {KEY}"}
            ) as s:
                async for line in s.aiter_lines():
                    if line:
                        chunks.append(line)
            assert chunks[-1] == "data: [DONE]" and len(chunks) == 6
        # The replica key itself never reached the engine.
        assert seen and all(a == f"Bearer {engine_key}" for a in seen)
    finally:
        await doors.close_all()


async def test_a_request_without_an_accepted_key_is_refused_and_never_reaches_the_engine(
    tmp_path, engine
):
    engine_port, seen = engine
    doors, port, _ = await _door(tmp_path, engine_port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": KEY}):
                r = await http.post("/v1/echo", content=b"{}", headers=headers)
                assert r.status_code == 401
                assert r.json()["error"]["code"] == "invalid_engine_key"
        assert seen == []
    finally:
        await doors.close_all()


async def test_a_rotation_refuses_the_old_key_from_the_next_request_of_a_kept_connection(
    tmp_path, engine
):
    engine_port, _ = engine
    doors, port, _ = await _door(tmp_path, engine_port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            old = {"authorization": f"Bearer {KEY}"}
            new = {"authorization": "Bearer the-new-key-abcdefgh"}
            assert (await http.post("/v1/echo", content=b"{}", headers=old)).status_code == 200
            doors.set_keys("s1", [KEY, "the-new-key-abcdefgh"])  # both, while gateways switch
            assert (await http.post("/v1/echo", content=b"{}", headers=new)).status_code == 200
            assert (await http.post("/v1/echo", content=b"{}", headers=old)).status_code == 200
            doors.set_keys("s1", ["the-new-key-abcdefgh"])
            assert (await http.post("/v1/echo", content=b"{}", headers=old)).status_code == 401
            assert (await http.post("/v1/echo", content=b"{}", headers=new)).status_code == 200
    finally:
        await doors.close_all()


async def test_a_door_reopened_from_its_record_keeps_its_port_and_engine_key(tmp_path, engine):
    engine_port, _ = engine
    doors, port, engine_key = await _door(tmp_path, engine_port)
    await doors.close_all()
    again = Doors(tmp_path / "doors", "127.0.0.1", None)
    record = again.record("s1")
    assert record is not None and record.engine_key == engine_key and record.keys == [KEY]
    assert (tmp_path / "doors" / "s1.json").stat().st_mode & 0o077 == 0
    assert await again.open(record) == port
    await again.close("s1")
    assert again.record("s1") is None


def _pki(tmp_path: Path) -> dict[str, Path]:
    ca = pki.create_ca("test")
    node = pki.issue_node_cert(ca, "node-1")
    cp = pki.issue_control_plane_client_cert(ca, "cp-1")
    other = pki.issue_node_cert(ca, "node-2")  # a node's certificate is no control plane's
    files = {}
    for name, pair in {"node": node, "cp": cp, "other": other}.items():
        (tmp_path / f"{name}.crt").write_bytes(pair.cert_pem)
        (tmp_path / f"{name}.key").write_bytes(pair.key_pem)
        files[name] = tmp_path / name
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    files["ca"] = tmp_path / "ca.crt"
    return files


def _client(files: dict[str, Path], who: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(files["ca"]))
    ctx.check_hostname = False  # the door's certificate names the node (CN), checked below
    if who is not None:
        ctx.load_cert_chain(f"{files[who]}.crt", f"{files[who]}.key")
    return ctx


async def test_off_the_node_only_a_control_planes_certificate_gets_through_tls(tmp_path, engine):
    engine_port, seen = engine
    files = _pki(tmp_path)
    tls = door_context(files["ca"], Path(f"{files['node']}.crt"), Path(f"{files['node']}.key"))
    # plain_over_loopback=False: this connection is taken as one from another machine.
    doors, port, engine_key = await _door(
        tmp_path, engine_port, tls=tls, plain_over_loopback=False
    )
    headers = {"authorization": f"Bearer {KEY}"}
    try:
        async with httpx.AsyncClient(verify=_client(files, "cp")) as http:
            r = await http.post(f"https://127.0.0.1:{port}/v1/echo", content=b"{}", headers=headers)
            assert r.json()["auth"] == f"Bearer {engine_key}"
        for who in (None, "other"):
            async with httpx.AsyncClient(verify=_client(files, who)) as http:
                with pytest.raises(httpx.TransportError):
                    await http.post(
                        f"https://127.0.0.1:{port}/v1/echo", content=b"{}", headers=headers
                    )
        # In clear, not even a 401: the connection is TLS or nothing.
        async with httpx.AsyncClient() as http:
            with pytest.raises(httpx.TransportError):
                await http.post(f"http://127.0.0.1:{port}/v1/echo", content=b"{}", headers=headers)
        assert len(seen) == 1
    finally:
        await doors.close_all()
