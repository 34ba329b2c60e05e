"""The PostgreSQL store over TLS checks whom it talks to whenever the DSN asks for TLS.

A real PostgreSQL of the test's own serves TLS with a certificate of one CA.
``sslmode=require`` used to encrypt without checking: a server with any
certificate at all (an impostor's) was taken. Now the store checks it against
the system's authorities, the DSN's ``sslrootcert`` and the cluster CA.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from gatewayd.store import connect_store
from gatewayd.store.postgres.tls import tls_context
from llmgw.config import StoreConfig
from llmgw.errors import StoreError
from llmgw.paths import Paths
from llmgw.tls.pki import create_ca, issue_server_cert
from tests.pg_fixture import PG_USER, PostgresCluster, _as_postgres, _pg_bin, _run
from tests.ports import free_port

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def tls_postgres():
    """A PostgreSQL serving TLS (only) with a certificate of its CA; (cluster, CA cert PEM)."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL is not installed; CI must run the store's TLS test")
        pytest.skip("PostgreSQL is not installed")
    root = Path(tempfile.mkdtemp(prefix="llmgw-pgtls-", dir="/tmp"))
    root.chmod(0o755)
    data = root / "pg"
    data.mkdir(mode=0o700)
    ca = create_ca("store-tls")
    leaf = issue_server_cert(ca, ["127.0.0.1"])
    cert, key = root / "server.crt", root / "server.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(leaf.key_pem)
    key.chmod(0o600)
    if os.geteuid() == 0:
        for p in (data, cert, key):
            shutil.chown(p, PG_USER, PG_USER)
    _run(_as_postgres([str(bin_dir / "initdb"), "-D", str(data), "-U", PG_USER,
                       "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8"]), "initdb")  # fmt: skip
    # TLS only on TCP: a plain connection is refused (hostssl, no host line).
    (data / "pg_hba.conf").write_text(
        "local all all trust\nhostssl all all 127.0.0.1/32 trust\n"
    )
    port = free_port()
    options = (f"-p {port} -c listen_addresses=127.0.0.1 -k {data} -c fsync=off -c ssl=on"
               f" -c ssl_cert_file={cert} -c ssl_key_file={key}")  # fmt: skip
    proc = subprocess.run(
        _as_postgres([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(data / "log"), "-w",
                      "-o", options, "start"]),
        check=False, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if proc.returncode != 0:
        log = (data / "log").read_text(errors="replace") if (data / "log").exists() else ""
        pytest.fail(f"pg_ctl start failed:\n{proc.stdout}\n{proc.stderr}\n{log}")
    cluster = PostgresCluster(bin_dir, data, port)
    try:
        yield cluster, ca.cert_pem
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def _paths(tmp_path: Path, ca_pem: bytes | None) -> Paths:
    paths = Paths.under(tmp_path / "home")
    if ca_pem is not None:
        paths.ca_cert.parent.mkdir(parents=True, exist_ok=True)
        paths.ca_cert.write_bytes(ca_pem)
    return paths


async def _uses_tls(dsn: str, paths: Paths) -> bool:
    store = await connect_store(StoreConfig(dsn=dsn), paths)
    try:
        async with store._pool.acquire() as conn:
            return await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
    finally:
        await store.close()


async def test_sslmode_require_is_taken_only_from_a_server_the_cluster_ca_vouches_for(
    tls_postgres, tmp_path: Path
):
    cluster, ca_pem = tls_postgres
    dsn = cluster.dsn("postgres") + "?sslmode=require"
    # The cluster CA signed the server's certificate: the store opens, over TLS.
    assert await _uses_tls(dsn, _paths(tmp_path / "ours", ca_pem)) is True
    # An impostor's certificate (another CA) is refused, though require alone never checked.
    other = create_ca("impostor").cert_pem
    with pytest.raises(StoreError) as e:
        await _uses_tls(dsn, _paths(tmp_path / "theirs", other))
    assert "certificate verify failed" in str(e.value) + str(e.value.__cause__)
    # No CA that vouches for it at all: refused as well.
    with pytest.raises(StoreError):
        await _uses_tls(dsn, _paths(tmp_path / "none", None))


async def test_the_dsns_sslrootcert_is_trusted_and_verify_full_checks_the_name(
    tls_postgres, tmp_path: Path
):
    cluster, ca_pem = tls_postgres
    root = tmp_path / "root.crt"
    root.write_bytes(ca_pem)
    dsn = cluster.dsn("postgres") + f"?sslmode=verify-full&sslrootcert={root}"
    assert await _uses_tls(dsn, _paths(tmp_path / "home-a", None)) is True
    assert tls_context(dsn).check_hostname is True
    assert tls_context(cluster.dsn("postgres") + "?sslmode=verify-ca").check_hostname is False
    # A DSN that does not ask for TLS is left as asyncpg reads it.
    for mode in ("", "?sslmode=prefer", "?sslmode=disable"):
        assert tls_context(cluster.dsn("postgres") + mode) is None
