"""PostgreSQL under Patroni for the fault suite: deploy/patroni/patroni.yml, N members on loopback.

Each member is the deploy file with its name, addresses, data folder and
pg_hba swapped for loopback ones (trust: the suite is not testing passwords),
and faster timings than production's so a cluster is made and fails over in
seconds. Patroni runs as the ``postgres`` user (initdb refuses root), its
PostgreSQL in a session of Patroni's own: stopping Patroni cleanly stops
PostgreSQL and hands the leader key over at once; killing both is a lost
machine, replaced once the key's ttl runs out. Killing PostgreSQL alone only
makes Patroni start it again in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import yaml

from tests.faults.harness.deploy_files import load_yaml, write_yaml
from tests.faults.harness.etcd import Etcd
from tests.faults.harness.procs import (
    HarnessError,
    Proc,
    free_port,
    kill_pid_file,
    pid_alive,
    require_binaries,
    wait_until,
)

PATRONI = "/usr/bin/patroni"
PATRONICTL = "/usr/bin/patronictl"
PG_USER = "postgres"
# The role and database gatewayd uses, made as docs/ha.md makes them. Trust auth on
# loopback ignores the password; it is in the DSN as an operator's would be.
STORE_USER = "llmgw"
STORE_PASSWORD = "llmgw-store-pw"
# The deploy file's timings are production's (ttl 20, loop_wait 5, retry_timeout 5).
# Tests keep Patroni's rule (loop_wait + 2 x retry_timeout <= ttl) at a tenth of the wait.
TEST_TTL_S = 10
TEST_LOOP_WAIT_S = 1
TEST_RETRY_TIMEOUT_S = 3
# initdb, then a base backup for each replica: seconds here; generous for a busy machine.
CLUSTER_UP_TIMEOUT_S = 90.0
API_TIMEOUT_S = 3.0


def _pg_bin_dir(wanted: str) -> str:
    """The deploy file's bin_dir where it exists, else the newest installed PostgreSQL's."""
    if Path(wanted, "postgres").exists():
        return wanted
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not found:
        raise HarnessError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres)")
    return str(Path(found[-1]).parent)


@dataclass
class Member:
    """One Patroni member: its REST API, its PostgreSQL port, its folder and its process."""

    name: str
    root: Path
    api_port: int
    pg_port: int
    config_path: Path
    proc: Proc | None = None

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def host_port(self) -> str:
        return f"127.0.0.1:{self.pg_port}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{PG_USER}@{self.host_port}/{database}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.running


def render_member_config(
    root: Path,
    name: str,
    api_port: int,
    pg_port: int,
    etcd_hosts: str,
    *,
    dcs: dict[str, Any] | None = None,
) -> Path:
    """deploy/patroni/patroni.yml for one member on loopback, its data under ``root``."""
    doc = load_yaml("patroni/patroni.yml")
    doc["name"] = name
    doc["restapi"] |= {
        "listen": f"127.0.0.1:{api_port}",
        "connect_address": f"127.0.0.1:{api_port}",
    }
    doc["etcd3"] = {"hosts": etcd_hosts}
    doc["bootstrap"]["dcs"] |= {
        "ttl": TEST_TTL_S,
        "loop_wait": TEST_LOOP_WAIT_S,
        "retry_timeout": TEST_RETRY_TIMEOUT_S,
        **(dcs or {}),
    }
    # Loopback and the member's own socket folder only, no passwords asked.
    pg_hba = [
        "local all all trust",
        "host replication all 127.0.0.1/32 trust",
        "host all all 127.0.0.1/32 trust",
    ]
    doc["bootstrap"]["pg_hba"] = pg_hba
    pg = doc["postgresql"]
    pg |= {
        "listen": f"127.0.0.1:{pg_port}",
        "connect_address": f"127.0.0.1:{pg_port}",
        "data_dir": str(root / "data"),
        "bin_dir": _pg_bin_dir(pg["bin_dir"]),
        "pgpass": str(root / "pgpass"),
        "pg_hba": pg_hba,
    }
    pg["parameters"] |= {
        "unix_socket_directories": str(root),
        # Thrown away after the test: no need to wait for the disk. (synchronous_commit
        # stays on: a commit must still wait for the synchronous standby; and
        # full_page_writes too: pg_rewind refuses a source without them, so a killed
        # primary could never rejoin.)
        "fsync": "off",
    }
    return write_yaml(root / "patroni.yml", doc)


@dataclass
class PatroniCluster:
    """A running Patroni cluster; members by name, and the faults the suite applies to it."""

    etcd: Etcd
    members: dict[str, Member]
    database: str = "postgres"
    # (time.monotonic(), member name) each time wait_primary saw a new primary.
    primaries_seen: list[tuple[float, str]] = field(default_factory=list)

    # --- where to connect

    def dsn(self, database: str | None = None, *, first: str | None = None) -> str:
        """The multi-member DSN a Patroni user writes: every member (``first`` listed first),
        the writable one wanted."""
        members = sorted(self.members.values(), key=lambda m: m.name != first)
        hosts = ",".join(m.host_port for m in members)
        db = database or self.database
        user = f"{STORE_USER}:{STORE_PASSWORD}"
        return f"postgresql://{user}@{hosts}/{db}?target_session_attrs=read-write"

    def member_dsns(self, database: str | None = None) -> dict[str, str]:
        db = database or self.database
        return {name: m.dsn(db) for name, m in self.members.items()}

    # --- what Patroni says

    async def cluster_state(self) -> list[dict[str, Any]]:
        """GET /cluster from the first member whose API answers."""
        last: Exception | None = None
        async with httpx.AsyncClient(timeout=API_TIMEOUT_S) as client:
            for m in self.members.values():
                if not m.running:
                    continue
                try:
                    r = await client.get(f"{m.api_url}/cluster")
                    r.raise_for_status()
                    return r.json().get("members", [])
                except httpx.HTTPError as e:
                    last = e
        raise HarnessError(f"no Patroni member's API answers: {last}")

    async def primary_name(self) -> str | None:
        """The member Patroni calls leader with PostgreSQL running, or None."""
        for m in await self.cluster_state():
            if m.get("role") == "leader" and m.get("state") == "running":
                return m["name"]
        return None

    async def is_writable(self, name: str) -> bool:
        """Whether the member's PostgreSQL takes writes now (promoted, not in recovery)."""
        conn = await asyncpg.connect(self.members[name].dsn(), timeout=API_TIMEOUT_S)
        try:
            return not await conn.fetchval("SELECT pg_is_in_recovery()")
        finally:
            await conn.close()

    async def wait_primary(self, *, not_name: str | None = None, timeout_s: float = 60.0) -> str:
        """Wait for a primary that takes writes (another than ``not_name`` if given); its name."""

        async def found() -> str | None:
            name = await self.primary_name()
            if name is None or name == not_name or not await self.is_writable(name):
                return None
            return name

        what = "a primary" + (f" other than {not_name}" if not_name else "")
        name = await wait_until(found, timeout_s=timeout_s, interval_s=0.2, what=what)
        if not self.primaries_seen or self.primaries_seen[-1][1] != name:
            self.primaries_seen.append((time.monotonic(), name))
        return name

    async def replication(self) -> list[dict[str, Any]]:
        """The primary's pg_stat_replication: who streams from it, and which synchronously."""
        primary = await self.wait_primary()
        conn = await asyncpg.connect(self.members[primary].dsn(), timeout=API_TIMEOUT_S)
        try:
            rows = await conn.fetch(
                "SELECT application_name, state, sync_state FROM pg_stat_replication"
            )
        finally:
            await conn.close()
        return [dict(r) for r in rows]

    async def wait_replicas_streaming(self, timeout_s: float = CLUSTER_UP_TIMEOUT_S) -> None:
        """Wait until every running member but the primary streams from it, one of them
        synchronously. Patroni's "running" alone is not that: a member that just rejoined
        runs before it receives WAL, and promoting it then loses what it never got."""

        async def streaming() -> bool:
            primary = await self.wait_primary()
            want = {n for n, m in self.members.items() if m.running and n != primary}
            rows = await self.replication()
            got = {r["application_name"] for r in rows if r["state"] == "streaming"}
            sync = any(r["sync_state"] == "sync" for r in rows)
            # Patroni records its synchronous standby a moment later; a switchover needs it.
            roles = {m["name"]: m.get("role") for m in await self.cluster_state()}
            named = "sync_standby" in roles.values()
            return want <= got and ((sync and named) or not want)

        await wait_until(streaming, timeout_s=timeout_s, interval_s=0.2, what="replicas streaming")

    # --- faults

    async def patronictl(self, *args: str, timeout_s: float = 60.0) -> str:
        """``patronictl -c <a running member's config> ARGS``, as docs/ha.md runs it; its output."""
        running = [m for m in self.members.values() if m.running]
        if not running:
            raise HarnessError("no Patroni member runs: patronictl has nobody to ask")
        return await _run([PATRONICTL, "-c", str(running[0].config_path), *args], timeout_s)

    async def switchover(self, candidate: str | None = None, timeout_s: float = 60.0) -> str:
        """A planned change of primary (``patronictl switchover``); the new primary's name."""
        old = await self.wait_primary(timeout_s=timeout_s)
        args = ["switchover", "--leader", old, "--force"]
        if candidate:
            args += ["--candidate", candidate]
        await self.patronictl(*args, timeout_s=timeout_s)
        return await self.wait_primary(not_name=old, timeout_s=timeout_s)

    async def stop_member(self, name: str, *, kill: bool = False) -> None:
        """Stop a member: cleanly (Patroni stops PostgreSQL and gives up the leader key), or
        ``kill``: SIGKILL Patroni and its PostgreSQL, as a machine that lost power."""
        m = self.members[name]
        if m.proc is None:
            return
        if kill:
            await m.proc.kill()
            kill_pid_file(m.data_dir / "postmaster.pid", signal.SIGKILL)
        else:
            await m.proc.stop()
        await self._wait_postgres_gone(m)

    async def stop_primary(self, *, kill: bool = False) -> str:
        """Stop (or ``kill``) the primary's member so the leader moves; the stopped one's name."""
        name = await self.wait_primary()
        await self.stop_member(name, kill=kill)
        return name

    async def start_member(self, name: str) -> None:
        """Start a stopped member again: it rejoins as a replica (pg_rewind where needed)."""
        m = self.members[name]
        if m.running:
            return
        m.proc = await _start_patroni(m)

    async def _wait_postgres_gone(self, m: Member) -> None:
        async def gone() -> bool:
            try:
                pid = int((m.data_dir / "postmaster.pid").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                return True
            return not pid_alive(pid)

        await wait_until(gone, timeout_s=30.0, what=f"{m.name}'s PostgreSQL ending")

    # --- databases

    async def psql(self, *sql: str) -> str:
        """``psql -c SQL…`` on the primary as the superuser, as docs/ha.md runs it."""
        primary = self.members[await self.wait_primary()]
        bin_dir = yaml.safe_load(primary.config_path.read_text())["postgresql"]["bin_dir"]
        argv = [f"{bin_dir}/psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"]
        argv += ["-p", str(primary.pg_port), "-U", PG_USER, "-d", "postgres"]
        for statement in sql:
            argv += ["-c", statement]
        return await _run(argv, 30.0)

    async def create_database(self, name: str) -> str:
        """Create a database owned by the store's role on the primary (the replicas follow);
        the multi-member DSN to it."""
        await self.psql(f"CREATE DATABASE {name} OWNER {STORE_USER}")
        return self.dsn(name)

    async def close(self) -> None:
        """Kill every member and its PostgreSQL: the data is thrown away, and a clean stop
        of a primary waits on its standby (seconds the suite need not spend)."""
        for m in self.members.values():
            if m.proc is not None:
                await m.proc.kill()
            kill_pid_file(m.data_dir / "postmaster.pid", signal.SIGKILL)
        for m in self.members.values():
            await self._wait_postgres_gone(m)


async def _run(argv: list[str], timeout_s: float) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise HarnessError(f"{' '.join(argv[:3])}… did not end within {timeout_s:.0f} s") from None
    text = out.decode(errors="replace")
    if proc.returncode != 0:
        raise HarnessError(f"{' '.join(argv)} failed ({proc.returncode}):\n{text}")
    return text


def _patroni_env(m: Member) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(m.root),
        "LC_ALL": "C.UTF-8",
        "LANG": "C.UTF-8",
    }


async def _start_patroni(m: Member) -> Proc:
    proc = Proc(
        f"patroni {m.name}",
        [PATRONI, str(m.config_path)],
        m.root / "patroni.log",
        user=PG_USER,
        env=_patroni_env(m),
        cwd=m.root,
    )
    return await proc.start()


def _member_dir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(path, PG_USER, PG_USER)
    return path


@contextlib.asynccontextmanager
async def patroni_cluster(
    root: Path, etcd: Etcd, *, members: int = 2, database: str = "llmgw"
) -> AsyncIterator[PatroniCluster]:
    """Start ``members`` Patroni members on ``etcd``; yield once a primary takes writes and
    every replica streams, with ``database`` created. Everything is stopped afterwards.

    ``root`` must be traversable by the postgres user (a folder under /tmp, mode 0755).
    """
    require_binaries(PATRONI)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    cluster = PatroniCluster(etcd, {}, database="postgres")
    try:
        for i in range(1, members + 1):
            name = f"pg{i}"
            mroot = _member_dir(root, name)
            api_port, pg_port = free_port(), free_port()
            config = render_member_config(mroot, name, api_port, pg_port, etcd.hosts)
            if os.geteuid() == 0:
                shutil.chown(config, PG_USER, PG_USER)
            cluster.members[name] = Member(name, mroot, api_port, pg_port, config)
        # The first bootstraps alone; the others then clone it, so two do not race to initdb.
        first, *rest = cluster.members.values()
        first.proc = await _start_patroni(first)
        await _wait_started(cluster, first.name)
        await cluster.wait_primary(timeout_s=CLUSTER_UP_TIMEOUT_S)
        for m in rest:
            m.proc = await _start_patroni(m)
        await cluster.wait_replicas_streaming()
        await cluster.psql(f"CREATE ROLE {STORE_USER} LOGIN PASSWORD '{STORE_PASSWORD}'")
        await cluster.create_database(database)
        cluster.database = database
        yield cluster
    finally:
        await cluster.close()


async def _wait_started(cluster: PatroniCluster, name: str) -> None:
    m = cluster.members[name]

    async def up() -> bool:
        if not m.running:
            raise HarnessError(f"Patroni {name} exited:\n{m.proc.log_tail() if m.proc else ''}")
        async with httpx.AsyncClient(timeout=API_TIMEOUT_S) as client:
            r = await client.get(f"{m.api_url}/cluster")
        return r.status_code == 200

    await wait_until(up, timeout_s=CLUSTER_UP_TIMEOUT_S, what=f"Patroni {name}'s API")
