"""Sealing the company MCP servers' credentials: AES-256-GCM under a key in the secrets dir."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from gatewayd.mcp.seal import Sealer, SealError, new_ref
from llmgw.paths import Paths

HR = "https://hr.internal:443"  # the origin of the server the values are sealed for


def test_a_sealed_value_opens_again_under_its_own_ref(tmp_path: Path):
    sealer = Sealer(tmp_path / "secrets" / "mcp-seal.key")

    blob = sealer.seal("Bearer s3cret-tøken", "mcp/hr/00000000000000a1", HR)

    assert b"s3cret" not in blob
    assert sealer.open(blob, "mcp/hr/00000000000000a1", HR) == "Bearer s3cret-tøken"


def test_the_key_is_made_on_first_use_0600_in_the_secrets_dir(tmp_path: Path):
    paths = Paths.under(tmp_path / "home")
    sealer = Sealer.for_paths(paths)
    key_file = paths.secrets_dir / "mcp-seal.key"
    assert not key_file.exists()

    sealer.seal("x", "mcp/hr/1", HR)

    assert sealer.key_path == key_file
    assert len(key_file.read_bytes()) == 32
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700


def test_a_second_sealer_on_the_same_key_file_opens_what_the_first_sealed(tmp_path: Path):
    # Guards against a restart (or a second gatewayd) making a new key and
    # orphaning every credential sealed before.
    key = tmp_path / "mcp-seal.key"
    blob = Sealer(key).seal("token", "mcp/hr/1", HR)
    made = key.read_bytes()

    assert Sealer(key).open(blob, "mcp/hr/1", HR) == "token"
    assert key.read_bytes() == made


def test_each_seal_of_the_same_value_differs(tmp_path: Path):
    sealer = Sealer(tmp_path / "k")

    assert sealer.seal("token", "mcp/hr/1", HR) != sealer.seal("token", "mcp/hr/1", HR)


def test_a_blob_sealed_under_one_ref_does_not_open_under_another(tmp_path: Path):
    # Guards against a sealed credential being copied to another server's ref
    # (a store row edited by hand) and sent to that server.
    sealer = Sealer(tmp_path / "k")
    blob = sealer.seal("token", "mcp/hr/1", HR)

    with pytest.raises(SealError, match="mcp/wiki/1 does not open"):
        sealer.open(blob, "mcp/wiki/1", HR)


def test_a_wrong_key_fails_in_plain_words(tmp_path: Path):
    blob = Sealer(tmp_path / "a.key").seal("token", "mcp/hr/1", HR)
    other = Sealer(tmp_path / "b.key")

    with pytest.raises(SealError) as caught:
        other.open(blob, "mcp/hr/1", HR)

    err = caught.value
    assert f"the sealed credential mcp/hr/1 does not open for {HR} with the key in" in err.message
    assert "b.key" in err.message and "replaced" in err.message
    assert "llmgw ctl mcp change" in err.hint


def test_a_truncated_blob_is_refused_in_plain_words(tmp_path: Path):
    with pytest.raises(SealError, match="too short"):
        Sealer(tmp_path / "k").open(b"\x00" * 5, "mcp/hr/1", HR)


def test_a_key_file_of_the_wrong_size_is_refused_saying_so(tmp_path: Path):
    key = tmp_path / "mcp-seal.key"
    key.write_bytes(b"short")

    with pytest.raises(SealError, match="holds 5 bytes, not the 32"):
        Sealer(key).seal("token", "mcp/hr/1", HR)


def test_new_refs_name_their_server_and_never_repeat():
    refs = {new_ref("hr") for _ in range(1000)}

    assert len(refs) == 1000
    assert all(re.fullmatch(r"mcp/hr/[0-9a-f]{16}", r) for r in refs)
    assert Sealer.new_ref("wiki").startswith("mcp/wiki/")


def test_a_value_sealed_for_one_origin_does_not_open_for_another(tmp_path: Path):
    # Guards: only the ref was bound in, so a server whose address was moved in the store
    # (another host, port or scheme) opened its old credentials and sent them there.
    sealer = Sealer(tmp_path / "k")
    blob = sealer.seal("Bearer token", "mcp/hr/1", HR)

    for elsewhere in (
        "https://evil.example:443",
        "http://hr.internal:443",
        "https://hr.internal:8443",
    ):
        with pytest.raises(SealError, match=f"does not open for {re.escape(elsewhere)}"):
            sealer.open(blob, "mcp/hr/1", elsewhere)
    assert sealer.open(blob, "mcp/hr/1", HR) == "Bearer token"


def test_a_value_sealed_before_origins_were_bound_opens_only_as_such(tmp_path: Path):
    sealer = Sealer(tmp_path / "k")
    nonce = b"\x01" * 12
    legacy = nonce + sealer._cipher().encrypt(nonce, b"Bearer old", b"mcp/hr/1")

    assert sealer.open_unbound(legacy, "mcp/hr/1") == "Bearer old"
    with pytest.raises(SealError):
        sealer.open(legacy, "mcp/hr/1", HR)
    with pytest.raises(SealError):
        sealer.open_unbound(sealer.seal("Bearer new", "mcp/hr/1", HR), "mcp/hr/1")
