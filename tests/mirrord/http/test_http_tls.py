"""The mirror over HTTPS: a node's certificate (the cluster CA's) reads; files still come whole."""

from __future__ import annotations

import os
import ssl

import httpx
import pytest

from llmgw.tls.pki import create_ca, issue_node_cert, issue_server_cert

DATA = os.urandom(1 << 20)


@pytest.fixture
def pki(tmp_path):
    ca = create_ca("test")
    other_ca = create_ca("elsewhere")
    files = {}
    for name, pair in {
        "server": issue_server_cert(ca, ["127.0.0.1"]),
        "node": issue_node_cert(ca, "node-1"),
        "stranger": issue_node_cert(other_ca, "node-x"),
    }.items():
        (tmp_path / f"{name}.crt").write_bytes(pair.cert_pem)
        (tmp_path / f"{name}.key").write_bytes(pair.key_pem)
        files[name] = (str(tmp_path / f"{name}.crt"), str(tmp_path / f"{name}.key"))
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    files["ca"] = str(tmp_path / "ca.crt")
    return files


@pytest.fixture
async def https_mirror(start_mirror, pki):
    cert, key = pki["server"]
    m = await start_mirror(tls={"cert": cert, "key": key, "client_ca": pki["ca"]})
    m.put_model("org/tiny", {"model.safetensors": DATA})
    return m


def _client_ctx(pki, who: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki["ca"])
    if who:
        ctx.load_cert_chain(*pki[who])
    return ctx


async def test_a_node_certificate_reads_without_a_token(https_mirror, pki):
    assert https_mirror.url.startswith("https://")
    async with httpx.AsyncClient(base_url=https_mirror.url, verify=_client_ctx(pki, "node")) as c:
        whole = await c.get("/org/tiny/resolve/main/model.safetensors")
        part = await c.get(
            "/org/tiny/resolve/main/model.safetensors", headers={"Range": "bytes=1000-"}
        )
        # A certificate reads; it never writes.
        write = await c.delete("/v1/repos/org/tiny")
    # Sent by asyncio's read/write fallback: sendfile cannot go through TLS.
    assert whole.status_code == 200 and whole.content == DATA
    assert part.status_code == 206 and part.content == DATA[1000:]
    assert write.status_code == 403


async def test_over_https_without_a_certificate_the_token_still_reads(https_mirror, pki):
    ctx = _client_ctx(pki, None)
    async with httpx.AsyncClient(base_url=https_mirror.url, verify=ctx) as c:
        bare = await c.get("/org/tiny/resolve/main/model.safetensors")
        token = await c.get(
            "/org/tiny/resolve/main/model.safetensors", headers=https_mirror.headers()
        )
    assert bare.status_code == 401
    assert token.status_code == 200 and token.content == DATA


async def test_a_certificate_another_ca_signed_is_refused_at_the_handshake(https_mirror, pki):
    ctx = _client_ctx(pki, "stranger")
    async with httpx.AsyncClient(base_url=https_mirror.url, verify=ctx) as c:
        with pytest.raises(httpx.HTTPError):
            r = await c.get("/org/tiny/resolve/main/model.safetensors")
            # TLS 1.3 may report the refusal only at the first read.
            r.raise_for_status()
