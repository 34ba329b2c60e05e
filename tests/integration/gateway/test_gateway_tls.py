"""The gateway port serving HTTPS itself (server.yaml http.tls_*), with the openai SDK."""

from __future__ import annotations

import ssl

import httpx
import openai

from llmgw.config import HttpConfig
from llmgw.setup.http_init import ensure_http_cert, http_cert_paths
from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for


def _https(home, **http):
    """server.yaml's http: a certificate from the cluster CA for localhost, and ``http``."""

    def configure(cfg):
        from llmgw.paths import Paths

        paths = Paths.under(home)
        ensure_http_cert(paths, ["localhost"])
        crt, key = http_cert_paths(paths)
        cfg.http = HttpConfig(tls_cert=str(crt), tls_key=str(key), **http)

    return configure


async def test_the_openai_sdk_gets_an_answer_over_https_and_plain_http_is_refused(tmp_path):
    async with running_cluster(tmp_path, configure=_https(tmp_path / "home")) as cluster:
        port = cluster.server.ports["http"]
        # What ctl status and the console show is the https URL.
        assert cluster.server.info["gateway_url"] == f"https://127.0.0.1:{port}/v1"
        await cluster.start_agent("cpu-node")
        spec = ModelSpec(
            name="chat",
            source="/models/none.gguf",
            replicas_min=1,
            replicas_max=1,
            slots=2,
            profiles=[ModelProfile(name="default", engine="sim", startup_timeout_s=60)],
        )
        async with cluster.admin() as admin:
            await admin.put_model(spec)
            await admin.create_tenant("project", "acme/ml/search", parents=True)
            key = await admin.create_key("acme/ml/search", name="tests")

            async def ready():
                rs = (await admin.list_replicas("chat")).replicas
                return rs and rs[0].state == "ready"

            await wait_for(ready, attempts=400)

        verify = ssl.create_default_context(cafile=str(cluster.paths.ca_cert))
        async with httpx.AsyncClient(verify=verify) as http:
            client = openai.AsyncOpenAI(
                base_url=f"https://localhost:{port}/v1",
                api_key=key.secret,
                max_retries=0,
                http_client=http,
            )
            answer = await client.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "hello"}], max_tokens=3
            )
            assert answer.choices[0].message.content
            assert (await http.get(f"https://127.0.0.1:{port}/health")).status_code == 200

        # Plain HTTP to the port gets no answer: it serves HTTPS only.
        async with httpx.AsyncClient(timeout=5) as plain:
            try:
                got = await plain.get(f"http://127.0.0.1:{port}/health")
            except httpx.HTTPError:
                got = None
            assert got is None or got.status_code != 200


async def test_handshakes_on_the_https_port_are_counted_per_client_and_timed(tmp_path):
    # Guards uvicorn's own TLS: a handshake was counted against no bound for 60 s.
    import asyncio

    from llmgw.config import ConnectionsConfig

    https = _https(tmp_path / "home")

    def tls(cfg):
        https(cfg)
        cfg.connections = ConnectionsConfig(max_per_address=2, tls_handshake_timeout=0.5)

    async with running_cluster(tmp_path, configure=tls) as cluster:
        port = cluster.server.ports["http"]
        guard = cluster.server.guards["http"]

        async def ended(reader: asyncio.StreamReader) -> bool:
            """The server closed or reset the connection (the test's loop is the server's:
            nothing here may block it)."""
            try:
                return await asyncio.wait_for(reader.read(1), 5) == b""
            except ConnectionResetError:
                return True

        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        try:
            # A third connection of the same client, its two handshakes not done: reset.
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except ConnectionResetError:
                pass  # reset before the connect call returned
            else:
                assert await ended(reader)
                writer.close()
            await wait_for(lambda: guard.refused["per_address"] >= 1)
            # The two that never finish their handshake are closed at its deadline.
            for reader, _ in held:
                assert await ended(reader)
            await wait_for(lambda: guard.refused["tls_handshake_timeout"] == 2)
            assert guard.open == 0
        finally:
            for _, writer in held:
                writer.close()
        # A client that does its handshake is served.
        verify = ssl.create_default_context(cafile=str(cluster.paths.ca_cert))
        async with httpx.AsyncClient(verify=verify) as http:
            assert (await http.get(f"https://localhost:{port}/health")).status_code == 200


async def test_a_trusted_proxys_handshakes_are_not_held_to_one_clients_bound(tmp_path):
    # The proxy carries every client's connections: three at once from it, past a bound of
    # two, are all let into their handshakes (each is counted as its client afterwards).
    import asyncio

    from llmgw.config import ConnectionsConfig

    https = _https(tmp_path / "home", trusted_proxies=["127.0.0.1"])

    def tls(cfg):
        https(cfg)
        cfg.connections = ConnectionsConfig(max_per_address=2, tls_handshake_timeout=1.0)

    async with running_cluster(tmp_path, configure=tls) as cluster:
        port = cluster.server.ports["http"]
        guard = cluster.server.guards["http"]
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        try:
            await wait_for(lambda: guard.open == 3)
            assert guard.refused["per_address"] == 0
            await wait_for(lambda: guard.refused["tls_handshake_timeout"] == 3, attempts=400)
        finally:
            for _, writer in held:
                writer.close()
