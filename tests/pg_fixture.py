"""A throwaway PostgreSQL for tests, and a ``store`` fixture over both backends.

The cluster is started once per session as TESTING.md describes: initdb as
the ``postgres`` user (initdb refuses root), trust auth, listening on a free
port on 127.0.0.1 only, fsync off. Each test that wants isolation gets its
own empty database (``fresh_postgres_dsn``). Without PostgreSQL installed the
PostgreSQL tests are skipped, except under CI=true where that is a failure:
a CI that silently skips half the store tests proves nothing.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from gatewayd.store import Store, connect_store
from llmgw.config import StoreConfig
from llmgw.paths import Paths
from tests.ports import free_port as _free_port

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
PG_USER = "postgres"
# A port taken between our probe and pg_ctl's bind makes start fail; retry.
START_ATTEMPTS = 3

_database_names = itertools.count(1)


def _pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder, or None."""
    found = [Path(p) for p in glob.glob(PG_BIN_GLOB) if (Path(p) / "initdb").exists()]
    if not found:
        return None
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)


def _as_postgres(cmd: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root.
    return ["runuser", "-u", PG_USER, "--", *cmd] if os.geteuid() == 0 else cmd


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        pytest.fail(f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


class PostgresCluster:
    """One running throwaway cluster."""

    def __init__(self, bin_dir: Path, data_dir: Path, port: int) -> None:
        self.bin_dir = bin_dir
        self.data_dir = data_dir
        self.port = port

    def dsn(self, database: str) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create an empty database and return its DSN."""
        _run(
            [
                str(self.bin_dir / "psql"),
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                PG_USER,
                "-d",
                "postgres",
                "-c",
                f'CREATE DATABASE "{name}"',
            ],
            f"CREATE DATABASE {name}",
        )
        return self.dsn(name)

    def stop(self) -> None:
        # immediate: the data is thrown away, no need for a clean checkpoint.
        subprocess.run(
            _as_postgres(
                [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate", "stop"]
            ),
            check=False,
            capture_output=True,
            timeout=60,
        )


def _start_cluster(bin_dir: Path, root: Path) -> PostgresCluster:
    data_dir = root / "pg"
    data_dir.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(data_dir, PG_USER, PG_USER)
    _run(
        _as_postgres(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir),
                "-U",
                PG_USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ]
        ),
        "initdb",
    )
    log = data_dir / "log"
    for attempt in range(1, START_ATTEMPTS + 1):
        port = _free_port()
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {data_dir} -c fsync=off"
        proc = subprocess.run(
            _as_postgres(
                [str(bin_dir / "pg_ctl"), "-D", str(data_dir), "-l", str(log), "-w"]
                + ["-o", options, "start"]
            ),
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode == 0:
            return PostgresCluster(bin_dir, data_dir, port)
        if attempt == START_ATTEMPTS:
            server_log = log.read_text(errors="replace") if log.exists() else ""
            pytest.fail(f"pg_ctl start failed:\n{proc.stdout}\n{proc.stderr}\n{server_log}")
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster for the whole session; skipped (failed under CI) when not installed."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        message = f"PostgreSQL is not installed (no {PG_BIN_GLOB}/initdb)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; CI must run the PostgreSQL store tests")
        pytest.skip(message)
    # Under /tmp, not pytest's tmp_path: user postgres must traverse every
    # parent, and pytest's basetemp is private to root.
    root = Path(tempfile.mkdtemp(prefix="llmgw-pg-", dir="/tmp"))
    root.chmod(0o755)
    cluster = None
    try:
        cluster = _start_cluster(bin_dir, root)
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_dsn(postgres_cluster: PostgresCluster) -> str:
    """A DSN to one database shared by the whole session."""
    return postgres_cluster.create_database("llmgw_test")


@pytest.fixture
def fresh_postgres_dsn(postgres_cluster: PostgresCluster) -> str:
    """A DSN to a new, empty database of this test's own."""
    return postgres_cluster.create_database(f"llmgw_t{os.getpid()}_{next(_database_names)}")


@pytest.fixture
def store_paths(tmp_path: Path) -> Paths:
    """A machine layout under this test's temporary folder."""
    return Paths.under(tmp_path / "home")


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def store_config(request: pytest.FixtureRequest, tmp_path: Path) -> StoreConfig:
    """The settings of an empty store of each backend; open it as often as you like."""
    if request.param == "sqlite":
        return StoreConfig(dsn=f"sqlite://{tmp_path / 'store' / 'llmgw.db'}")
    return StoreConfig(dsn=request.getfixturevalue("fresh_postgres_dsn"))


@pytest_asyncio.fixture
async def store(store_config: StoreConfig, store_paths: Paths) -> AsyncIterator[Store]:
    """An opened, empty store of each backend, closed after the test."""
    opened = await connect_store(store_config, store_paths)
    try:
        yield opened
    finally:
        await opened.close()
