"""The gateway port serving HTTPS itself (server.yaml http.tls_*), with the openai SDK."""

from __future__ import annotations

import ssl

import httpx
import openai

from llmgw.config import HttpConfig
from llmgw.setup.http_init import ensure_http_cert, http_cert_paths
from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for


async def test_the_openai_sdk_gets_an_answer_over_https_and_plain_http_is_refused(tmp_path):
    home = tmp_path / "home"

    def tls(cfg):
        from llmgw.paths import Paths

        paths = Paths.under(home)
        ensure_http_cert(paths, ["localhost"])
        crt, key = http_cert_paths(paths)
        cfg.http = HttpConfig(tls_cert=str(crt), tls_key=str(key))

    async with running_cluster(tmp_path, configure=tls) as cluster:
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
