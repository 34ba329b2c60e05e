"""Who reads the mirror: the read token or a node certificate, never nobody and never the admin token."""

from __future__ import annotations

import httpx
import pytest

from tests.mirrord.api.test_http_files import make_wheel

# Every route that reads, each asked with what it holds.
READS = [
    "/v1/info",
    "/v1/revisions",
    "/v1/state",
    "/v1/repos/org/tiny",
    "/v1/files/wheel/{wheel}",
    "/simple/",
    "/simple/pkg/",
    "/files/wheel/{wheel}",
    "/blobs/sha256/{blob}",
    "/api/models/org/tiny",
    "/api/models/org/tiny/tree/main",
    "/api/whoami-v2",
    "/org/tiny/resolve/main/config.json",
]


@pytest.fixture
def held(mirror):
    mirror.put_model("org/tiny", {"config.json": b"{}"})
    name, data = make_wheel("pkg", "1.0")
    rev = mirror.put_artifact("wheel", name, data)
    return {"wheel": name, "blob": rev.commit}


@pytest.mark.parametrize("route", READS)
async def test_a_read_without_a_token_is_401_and_with_the_read_token_answers(mirror, held, route):
    path = route.format(**held)
    async with httpx.AsyncClient(base_url=mirror.url) as bare, mirror.client() as reader:
        nobody = await bare.get(path)
        read = await reader.get(path)
    assert nobody.status_code == 401, nobody.text
    assert any(v.startswith("Bearer ") for v in nobody.headers.get_list("www-authenticate"))
    assert read.status_code == 200, read.text


@pytest.mark.parametrize("route", READS)
async def test_the_admin_token_reads_nothing(mirror, held, route):
    # Guards: the admin token stood in for a missing read token, so it travelled on reads.
    async with mirror.client(admin=True) as admin:
        r = await admin.get(route.format(**held))
    assert r.status_code == 403, r.text


async def test_the_read_token_writes_nothing(mirror, held):
    name, data = make_wheel("other", "1.0")
    async with mirror.client() as reader:
        put = await reader.put(f"/v1/files/wheel/{name}", content=data)
        rm = await reader.delete(f"/v1/files/wheel/{held['wheel']}")
    assert put.status_code == 403 and rm.status_code == 403
    assert "admin token" in put.json()["error"]["message"]
