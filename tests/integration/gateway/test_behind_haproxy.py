"""A real gatewayd behind the shipped HAProxy config (send-proxy-v2): clients counted apart.

Before, every connection through HAProxy was HAProxy's: a tenant holding 256
of them locked every other client out of the gateway. Here the control plane
trusts HAProxy's address, reads its PROXY v2 headers (HAProxy's own bytes, not
ours), and bounds each client by its own address.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gatewayd.http.guard import PortGuard
from tests.cluster_fixture import running_cluster, wait_for
from tests.faults.harness.haproxy import HAPROXY, PROXY_SOURCE, behind_haproxy, haproxy
from tests.faults.harness.procs import require_binaries

CLIENT_A, CLIENT_B = "127.0.0.2", "127.0.0.3"
PER_ADDRESS = 2
# A request whose body never comes whole: gatewayd holds its connection (and HAProxy
# the one to gatewayd) until the body read deadline, long past this test.
HELD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b"authorization: Bearer llmgw-nope\r\ncontent-length: 1000\r\n\r\n{"
)
HEALTH = b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"


async def _open(port: int, source: str, request: bytes):
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(request)
    await writer.drain()
    return reader, writer


async def _status(reader: asyncio.StreamReader) -> int:
    async with asyncio.timeout(10):
        line = await reader.readline()
    return int(line.split()[1]) if line else 0


async def _held_by(guard: PortGuard, client: str, count: int) -> None:
    await wait_for(lambda: guard.per_address.held(client) == count, attempts=200)


async def test_two_clients_through_haproxy_are_bounded_each_by_their_own_address(tmp_path):
    require_binaries(HAPROXY)

    def configure(cfg):
        behind_haproxy(cfg)
        cfg.connections.max_per_address = PER_ADDRESS
        cfg.connections.body_read_timeout = 60

    async with running_cluster(tmp_path, configure=configure) as cluster:
        guard = cluster.server.guards["http"]
        backend = f"127.0.0.1:{cluster.server.ports['http']}"
        async with haproxy(tmp_path / "lb", [backend]) as lb:
            # HAProxy's health checks carry a LOCAL header: it counts it as up.
            await lb.wait_servers_up(1)
            held = []
            try:
                for _ in range(PER_ADDRESS):
                    held.append(await _open(lb.front_port, CLIENT_A, HELD))
                await _held_by(guard, CLIENT_A, PER_ADDRESS)
                # A's next one is past A's bound: gatewayd resets it, HAProxy answers 502.
                reader, writer = await _open(lb.front_port, CLIENT_A, HEALTH)
                assert await _status(reader) in (502, 503)
                writer.close()
                assert guard.refused["per_address"] >= 1
                # B, through the same HAProxy, is not locked out by A.
                reader, writer = await _open(lb.front_port, CLIENT_B, HEALTH)
                assert await _status(reader) == 200
                writer.close()
                held.append(await _open(lb.front_port, CLIENT_B, HELD))
                await _held_by(guard, CLIENT_B, 1)
                # HAProxy itself is never the one counted against a bound.
                assert guard.per_address.held(PROXY_SOURCE) <= 1  # a health check at most
            finally:
                for _, writer in held:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()


@pytest.mark.parametrize("source", [CLIENT_A])
async def test_a_plain_connection_from_an_untrusted_address_is_its_own(tmp_path, source):
    # Guards a trust list that swallowed every peer: direct clients still speak plain HTTP.
    async with running_cluster(tmp_path, configure=behind_haproxy) as cluster:
        reader, writer = await _open(cluster.server.ports["http"], source, HEALTH)
        assert await _status(reader) == 200
        writer.close()


async def test_through_haproxy_over_tls_each_client_is_still_counted_by_its_own_address(
    tmp_path,
):
    # HAProxy's send-proxy-v2 with ssl: the PROXY header first, then the TLS handshake,
    # HAProxy checking gatewayd's certificate against the cluster CA. Before, the config
    # refused TLS with proxy_protocol, and every client was HAProxy's again.
    require_binaries(HAPROXY)
    from llmgw.config import HttpConfig
    from llmgw.paths import Paths
    from llmgw.setup.http_init import ensure_http_cert, http_cert_paths

    home = tmp_path / "home"
    paths = Paths.under(home)

    def configure(cfg):
        ensure_http_cert(paths, ["localhost"])
        crt, key = http_cert_paths(paths)
        cfg.http = HttpConfig(
            tls_cert=str(crt), tls_key=str(key), trusted_proxies=[PROXY_SOURCE], proxy_protocol=True
        )
        cfg.connections.max_per_address = PER_ADDRESS
        cfg.connections.body_read_timeout = 60

    async with running_cluster(tmp_path, configure=configure) as cluster:
        guard = cluster.server.guards["http"]
        backend = f"127.0.0.1:{cluster.server.ports['http']}"
        tls = ["ssl", "verify", "required", "ca-file", str(paths.ca_cert), "verifyhost", "localhost"]
        async with haproxy(tmp_path / "lb", [backend], server_options=tls) as lb:
            await lb.wait_servers_up(1)  # its health checks: a LOCAL header, then TLS
            held = []
            try:
                reader, writer = await _open(lb.front_port, CLIENT_B, HEALTH)
                assert await _status(reader) == 200
                writer.close()
                for _ in range(PER_ADDRESS):
                    held.append(await _open(lb.front_port, CLIENT_A, HELD))
                await _held_by(guard, CLIENT_A, PER_ADDRESS)
                reader, writer = await _open(lb.front_port, CLIENT_A, HEALTH)
                assert await _status(reader) in (502, 503)
                writer.close()
                reader, writer = await _open(lb.front_port, CLIENT_B, HEALTH)
                assert await _status(reader) == 200
                writer.close()
                assert guard.refused["proxy_header"] == 0
            finally:
                for _, writer in held:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
