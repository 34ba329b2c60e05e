"""Sealed credentials bound to their server's origin, in a real store of each backend.

The origin is in the seal's associated data: a credential whose server was pointed
elsewhere in the store does not open. Credentials sealed before that (their ref alone
bound in) are sealed again for their server's origin when gatewayd starts, and nothing
is lost.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gatewayd.mcp.rebind import bind_origins
from gatewayd.mcp.registry import McpRegistry
from gatewayd.mcp.seal import Sealer, SealError
from gatewayd.store import McpServerRecord, SqliteStore
from llmgw.mcp.config import McpConfig
from llmgw.mcp.names import origin_of
from proto.llmgw.v1 import PutMcpServerRequest
from tests.cluster_fixture import running_cluster

HR_URL, ELSEWHERE = "https://hr.internal/mcp", "https://collector.example:8443/mcp"


def _legacy(sealer: Sealer, value: str, ref: str) -> bytes:
    """A value sealed as gatewayd sealed it before origins were bound: the ref alone."""
    nonce = b"\x07" * 12
    return nonce + sealer._cipher().encrypt(nonce, value.encode(), ref.encode())


async def _mark_unbound(store) -> None:
    """What migration 0016 does to the rows there before it."""
    false = "0" if store.backend == "sqlite" else "false"
    await store._conn.execute(f"UPDATE mcp_secrets SET origin_bound = {false}")


@pytest.fixture
def sealer(tmp_path) -> Sealer:
    return Sealer(tmp_path / "secrets" / "mcp-seal.key")


async def test_a_server_pointed_elsewhere_in_the_store_does_not_open_its_credential(store, sealer):
    # Guards: the ref alone was bound in, so an address edited in the store (by hand, or
    # by a control plane from before origins were bound) took the credential along.
    ref = sealer.new_ref("hr")
    rec = McpServerRecord("hr", HR_URL, "streamable_http", secret_refs={"Authorization": ref})
    await store.put_mcp_server(rec, {ref: sealer.seal("Bearer t0ken", ref, origin_of(HR_URL))})
    registry = McpRegistry(store, sealer, McpConfig())
    await registry.refresh()
    assert (await registry.headers_for("hr"))["Authorization"] == "Bearer t0ken"

    await store.put_mcp_server(replace(rec, url=ELSEWHERE), {})
    await registry.refresh()

    # Opened a moment ago for its old address: not for the new one, not even from memory.
    with pytest.raises(SealError, match="does not open for https://collector.example:8443"):
        await registry.headers_for("hr")


async def test_credentials_sealed_before_origins_were_bound_are_sealed_for_theirs(store, sealer):
    refs = {name: sealer.new_ref(name) for name in ("hr", "wiki")}
    for name, url in (("hr", HR_URL), ("wiki", "http://wiki.internal:9000/sse")):
        rec = McpServerRecord(
            name, url, "streamable_http", secret_refs={"Authorization": refs[name]}
        )
        sealed = _legacy(sealer, f"Bearer {name}-token", refs[name])
        await store.put_mcp_server(rec, {refs[name]: sealed})
    await _mark_unbound(store)

    assert await bind_origins(store, sealer) == 2
    assert await bind_origins(store, sealer) == 0  # once: a second start has nothing to do

    registry = McpRegistry(store, sealer, McpConfig())
    await registry.refresh()
    assert (await registry.headers_for("hr"))["Authorization"] == "Bearer hr-token"
    assert (await registry.headers_for("wiki"))["Authorization"] == "Bearer wiki-token"
    sealed = await store.get_sealed_secrets([refs["hr"]])
    assert (
        sealer.open(sealed[refs["hr"]], refs["hr"], "https://hr.internal:443") == "Bearer hr-token"
    )


async def test_an_unbound_credential_that_does_not_open_is_kept_as_it_was(
    store, sealer, tmp_path, caplog
):
    ref = sealer.new_ref("hr")
    other_key = Sealer(tmp_path / "another.key")
    blob = _legacy(other_key, "Bearer t0ken", ref)
    rec = McpServerRecord("hr", HR_URL, "streamable_http", secret_refs={"Authorization": ref})
    await store.put_mcp_server(rec, {ref: blob})
    await _mark_unbound(store)

    assert await bind_origins(store, sealer) == 0
    assert (await store.get_sealed_secrets([ref]))[ref] == blob
    assert await store.list_unbound_sealed_secrets() == {ref: blob}  # tried again next start
    assert "stays as it was" in caplog.text


async def test_gatewayd_seals_old_credentials_for_their_origin_when_it_starts(tmp_path):
    # Guards: a store from before origins were bound would lose every MCP credential at
    # the upgrade (none opens under the new associated data) unless sealed again.
    async with running_cluster(tmp_path) as cluster, cluster.admin() as admin:
        request = PutMcpServerRequest(
            name="hr",
            create=True,
            url=HR_URL,
            set=["url", "secret_headers", "enabled"],
            secret_headers={"Authorization": "Bearer t0ken"},
            enabled=True,
        )
        await admin.put_mcp_server(request)
        sealer = cluster.server.mcp.sealer
        db = cluster.paths.sqlite_file
    # As a gatewayd from before left it: sealed under the ref alone, and so marked.
    store = SqliteStore(db)
    await store.open()
    try:
        (ref,) = await store.list_sealed_secret_refs()
        rec = await store.get_mcp_server("hr")
        await store.put_mcp_server(rec, {ref: _legacy(sealer, "Bearer t0ken", ref)})
        await _mark_unbound(store)
    finally:
        await store.close()

    async with running_cluster(tmp_path) as cluster:
        headers = await cluster.server.mcp.registry.headers_for("hr")
        assert headers["Authorization"] == "Bearer t0ken"
        assert await cluster.server.store.list_unbound_sealed_secrets() == {}
