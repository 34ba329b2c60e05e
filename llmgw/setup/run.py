"""Running a setup plan, and the facts about this machine it is checked against.

``this_machine`` reads memory, ports and groups; ``check_postgres`` connects to
a PostgreSQL store and says why it failed; ``PlanRun`` performs a plan's steps
(``llmgw.setup.plan.steps``): it runs the plan's own ``llmgw server init``
command, starts ``llmgw up`` in the background, and follows the cluster until
its node and starter model are ready, saying each step's progress as it goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import json
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from llmgw.admin_client import AdminClient
from llmgw.aio import within
from llmgw.config import (
    DEFAULT_ADMIN_PORT,
    DEFAULT_AGENT_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    load_agent_config,
    load_server_config,
    split_host_port,
)
from llmgw.errors import ConflictError, LlmgwError
from llmgw.paths import ENV_HOME, Paths
from llmgw.setup import starter
from llmgw.setup.plan import (
    STORE_DSN_ENV,
    Machine,
    SetupPlan,
    StoreCheck,
    check,
    command_env,
    dsn_place,
    masked_dsn,
    plan_ports,
    steps,
    to_command,
)
from proto.llmgw.v1 import LimitsView

log = logging.getLogger(__name__)

# 2 s: a store on the local network answers in milliseconds; one that takes
# longer is as good as absent for a control plane that writes to it all day.
STORE_CHECK_TIMEOUT_S = 2.0
# server init makes two keys and a certificate: seconds, even on a slow machine.
INIT_TIMEOUT_S = 120.0
# `llmgw up` itself waits 30 s for gatewayd; a little more for its own start.
API_WAIT_S = 60.0
# An agent registers within a heartbeat or two of its start.
NODE_WAIT_S = 120.0
# The starter's engine may be installed first (from the wheel: seconds; a
# release archive over a slow network: minutes), as `llmgw up` allows.
STARTER_WAIT_S = 300.0
# How long `llmgw up` has to put the starter model in the catalog.
STARTER_APPEAR_S = 60.0
POLL_S = 0.5

StepState = Literal["running", "done", "failed", "skipped"]

_ITEM_WORDS = {
    "ca": "CA",
    "server_cert": "server certificate",
    "admin_token": "admin token",
    "server_yaml": "server.yaml",
    "store_dsn": "store DSN",
}


# -- this machine -----------------------------------------------------------------


def _meminfo() -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes from /proc/meminfo; psutil where there is none."""
    try:
        fields = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            fields[name] = int(rest.split()[0]) * 1024
        return fields["MemTotal"], fields.get("MemAvailable", fields.get("MemFree", 0))
    except (OSError, KeyError, ValueError, IndexError):
        import psutil

        vm = psutil.virtual_memory()
        return vm.total, vm.available


def port_free(port: int) -> bool:
    """Whether this machine could listen on ``port`` (as the servers will, reusing the address)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _any_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def choose_ports() -> dict[str, int]:
    """The default ports, or free ones where a default is taken."""
    defaults = {
        "agent": DEFAULT_AGENT_PORT,
        "admin": DEFAULT_ADMIN_PORT,
        "http": DEFAULT_HTTP_PORT,
        "metrics": DEFAULT_METRICS_PORT,
    }
    return {n: p if port_free(p) else _any_free_port() for n, p in defaults.items()}


def gateway_running(paths: Paths, timeout_s: float = 0.5) -> bool:
    """Whether a gatewayd answers on the admin address of this machine's server.yaml."""
    if not paths.server_yaml.exists():
        return False
    try:
        host, port = split_host_port(load_server_config(paths.server_yaml).listen.admin)
    except (LlmgwError, ValueError):
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def this_machine(paths: Paths, *, ports: tuple[int, ...] = ()) -> Machine:
    """The facts a plan is checked against; ``ports`` are tested for being in use."""
    total, available = _meminfo()
    running = gateway_running(paths)
    return Machine(
        hostname=socket.gethostname(),
        memory_total_bytes=total,
        memory_available_bytes=available,
        starter_installed=starter.available(),
        gateway_running=running,
        configured=paths.server_yaml.exists(),
        ports_in_use=() if running else tuple(p for p in ports if not port_free(p)),
        groups=tuple(sorted({g.gr_name for g in grp.getgrall()})),
    )


def invoking_group() -> str:
    """The primary group of whoever ran this (through sudo: the user who typed it)."""
    gid = os.environ.get("SUDO_GID", "")
    try:
        return grp.getgrgid(int(gid) if gid.isdigit() else os.getgid()).gr_name
    except KeyError:
        return ""


async def check_postgres(dsn: str, timeout_s: float = STORE_CHECK_TIMEOUT_S) -> StoreCheck:
    """Connect to the PostgreSQL store at ``dsn``; ok with its version, or why not."""
    import asyncpg

    where = f"PostgreSQL at {_place(dsn)}"
    try:
        conn = await within(asyncpg.connect(dsn, timeout=timeout_s), timeout_s + 0.5)
    except TimeoutError:
        return StoreCheck(ok=False, message=f"{where} did not answer within {timeout_s:g} s")
    except asyncpg.InvalidPasswordError:
        return StoreCheck(ok=False, message=f"{where} refused the password")
    except asyncpg.InvalidCatalogNameError as e:
        return StoreCheck(ok=False, message=f"{where}: {e} (make it there: createdb)")
    except asyncpg.InvalidAuthorizationSpecificationError as e:
        return StoreCheck(ok=False, message=f"{where} refused the user: {e}")
    except asyncpg.PostgresError as e:
        return StoreCheck(ok=False, message=f"{where} refused the connection: {e}")
    except (asyncpg.ClientConfigurationError, ValueError) as e:
        return StoreCheck(ok=False, message=f"{masked_dsn(dsn)} is not a usable address: {e}")
    except OSError as e:
        reason = e.strerror or str(e) or type(e).__name__
        return StoreCheck(ok=False, message=f"nothing answers as {where} ({reason})")
    except asyncpg.InterfaceError as e:
        return StoreCheck(ok=False, message=f"{where} could not be spoken to: {e}")
    try:
        version = await conn.fetchval("SHOW server_version")
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as e:
        return StoreCheck(ok=False, message=f"{where} answered, then failed: {e}")
    finally:
        with contextlib.suppress(Exception):
            await within(conn.close(), timeout_s)
    return StoreCheck(ok=True, message=f"{where} answers (PostgreSQL {version})")


def _place(dsn: str) -> str:
    return dsn_place(dsn) or masked_dsn(dsn)


# -- a run ---------------------------------------------------------------------------


class StepUpdate(BaseModel):
    """A step began, moved on, ended or was skipped; ``detail`` says where it stands."""

    key: str
    state: StepState
    detail: str = ""
    hint: str = ""


class _StepFailed(Exception):
    def __init__(self, detail: str, hint: str = "") -> None:
        super().__init__(detail)
        self.detail, self.hint = detail, hint


class PlanRun:
    """One run of a plan's steps on this machine.

    ``start``: whether the run starts the cluster (``llmgw up``, in the
    background) and waits for it; only a home layout (``LLMGW_HOME`` or
    ``~/.llmgw``) is started so. ``machine`` replaces the probe of this
    machine (tests). After the run, ``ok`` says whether every step went well,
    ``up_pid`` and ``up_log`` where the background cluster is.
    """

    def __init__(
        self,
        plan: SetupPlan,
        paths: Paths,
        *,
        start: bool = True,
        machine: Callable[[], Machine] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.plan = plan
        self.paths = paths
        self.start = start and paths.home is not None
        self._machine = machine or (lambda: this_machine(paths, ports=plan_ports(plan)))
        self._python = python
        self._init: dict = {}
        self._done: dict[str, str] = {}
        self._up: subprocess.Popen | None = None
        self.up_pid: int | None = None
        self.up_log: Path = paths.log_dir / "up.log"
        self.ok = False

    async def updates(self) -> AsyncIterator[StepUpdate]:
        """Run the steps, yielding each one's progress; stops at the first that fails."""
        for step in steps(self.plan, start=self.start):
            yield StepUpdate(key=step.key, state="running")
            try:
                async for detail in self._do(step.key):
                    yield StepUpdate(key=step.key, state="running", detail=detail)
            except _StepFailed as e:
                yield StepUpdate(key=step.key, state="failed", detail=e.detail, hint=e.hint)
                return
            except LlmgwError as e:
                yield StepUpdate(key=step.key, state="failed", detail=e.message, hint=e.hint)
                return
            yield StepUpdate(key=step.key, state="done", detail=self._done.get(step.key, ""))
        self.ok = True

    def _do(self, key: str) -> AsyncIterator[str]:
        """The step's progress lines; its last word goes in ``_done[key]``."""
        return getattr(self, f"_step_{key}")()

    async def _step_check(self) -> AsyncIterator[str]:
        yield "reading this machine's memory, ports and groups"
        machine = await asyncio.to_thread(self._machine)
        store = None
        if self.plan.store.kind == "postgres" and self.plan.store.dsn:
            yield f"connecting to the store at {_place(self.plan.store.dsn)}"
            store = await check_postgres(self.plan.store.dsn)
        refusals = check(self.plan, machine, store=store)
        if refusals:
            raise _StepFailed(
                "; ".join(r.text() for r in refusals),
                hint="nothing was installed; change the plan and run it again",
            )
        self._done["check"] = "the plan fits this machine"

    async def _step_init(self) -> AsyncIterator[str]:
        argv = [self._python, "-m", "llmgw", *to_command(self.plan)[1:], "--json"]
        yield "llmgw " + " ".join(argv[3:-1])
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._env(),
        )
        try:
            out, err = await within(proc.communicate(), INIT_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise _StepFailed(
                f"llmgw server init did not end within {INIT_TIMEOUT_S:g} s"
            ) from None
        if proc.returncode != 0:
            raise _StepFailed(*_cli_error(err.decode(errors="replace"), proc.returncode))
        try:
            self._init = json.loads(out)
        except ValueError:
            raise _StepFailed("llmgw server init printed no result") from None
        done = []
        for word, key in (("written", "created"), ("kept", "kept")):
            if self._init.get(key):
                done.append(f"{word}: {', '.join(_ITEM_WORDS.get(i, i) for i in self._init[key])}")
        self._done["init"] = "; ".join(done + list(self._init.get("notes", [])))

    async def _step_node(self) -> AsyncIterator[str]:
        node = self._init.get("node") or {}
        if not node:
            raise _StepFailed("llmgw server init wrote no agent.yaml")
        self._done["node"] = f"node {node['node_id']}: {node['agent_yaml']}"
        return
        yield

    async def _step_access(self) -> AsyncIterator[str]:
        group = (self._init.get("setup") or {}).get("admin_group", "")
        if not group:
            raise _StepFailed("llmgw server init gave no group the admin token")
        self._done["access"] = f"group {group} reads {self.paths.admin_token_file}"
        return
        yield

    async def _step_mirror(self) -> AsyncIterator[str]:
        mirror = self._init.get("mirror") or {}
        if not mirror:
            raise _StepFailed("llmgw server init set no mirror up")
        self._done["mirror"] = (
            f"the cluster reaches it at {mirror['url']}; read token {mirror['read_token_file']}"
        )
        return
        yield

    async def _step_start(self) -> AsyncIterator[str]:
        if await asyncio.to_thread(gateway_running, self.paths):
            self._done["start"] = "a cluster already runs here; it was left as it is"
            return
        self.up_log.parent.mkdir(parents=True, exist_ok=True)
        yield f"starting llmgw up (log: {self.up_log})"
        with self.up_log.open("ab") as out:
            # Not asyncio's subprocess: its transport kills the child when the
            # loop closes, and this one must outlive the console. A session of
            # its own, too, so a Ctrl-C in this terminal is not sent to it.
            self._up = await asyncio.to_thread(
                subprocess.Popen,
                [self._python, "-m", "llmgw", "up"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(),
                start_new_session=True,
            )
        self.up_pid = self._up.pid
        (self.paths.run_dir / "up.pid").write_text(f"{self.up_pid}\n")
        self._done["start"] = (
            f"llmgw up runs in the background: pid {self.up_pid}, log {self.up_log}"
        )

    async def _step_api(self) -> AsyncIterator[str]:
        deadline = time.monotonic() + API_WAIT_S
        last = ""
        while True:
            self._up_alive()
            try:
                async with AdminClient.from_paths(self.paths, timeout_s=2) as admin:
                    status = await admin.status()
                self._done["api"] = (
                    f"gatewayd {status.version} answers: cluster {status.cluster_name!r}, "
                    f"store {status.store_backend}"
                )
                return
            except LlmgwError as e:
                if e.message != last:
                    last = e.message
                    yield e.message
            if time.monotonic() > deadline:
                raise _StepFailed(
                    f"gatewayd did not answer within {API_WAIT_S:g} s ({last})",
                    hint=f"see {self.up_log}",
                )
            await asyncio.sleep(POLL_S)

    async def _step_node_ready(self) -> AsyncIterator[str]:
        node_id = load_agent_config(self.paths.agent_yaml).node_id
        deadline = time.monotonic() + NODE_WAIT_S
        last = ""
        async with AdminClient.from_paths(self.paths, timeout_s=5) as admin:
            while True:
                self._up_alive()
                nodes = {n.node_id: n for n in (await admin.list_nodes()).nodes}
                n = nodes.get(node_id)
                if n is not None and n.state == "ready":
                    self._done["node_ready"] = f"node {node_id} is ready"
                    return
                now = f"node {node_id}: {n.state} ({n.reason})" if n else "not registered yet"
                if now != last:
                    last = now
                    yield now
                if time.monotonic() > deadline:
                    raise _StepFailed(
                        f"node {node_id} was not ready within {NODE_WAIT_S:g} s: {last}",
                        hint=f"see {self.paths.log_dir / 'agentd.log'}",
                    )
                await asyncio.sleep(POLL_S)

    async def _step_project(self) -> AsyncIterator[str]:
        lim = self.plan.limits
        async with AdminClient.from_paths(self.paths, timeout_s=5) as admin:
            have = {t.path for t in (await admin.list_tenants("project")).tenants}
            if lim.project in have:
                said = "exists"
            else:
                yield f"making {lim.project}"
                with contextlib.suppress(ConflictError):  # `llmgw up` made it meanwhile
                    await admin.create_tenant("project", lim.project, parents=True)
                said = "made"
            limits = LimitsView(
                scope=lim.project,
                rpm=lim.rpm,
                tpm=lim.tpm,
                budget_month_micros=lim.budget_month_micros,
            )
            if any(v is not None for v in (lim.rpm, lim.tpm, lim.budget_month_micros)):
                await admin.set_limits(limits)
        self._done["project"] = f"project {lim.project} {said}"

    async def _step_starter(self) -> AsyncIterator[str]:
        started = time.monotonic()
        last = ""
        async with AdminClient.from_paths(self.paths, timeout_s=5) as admin:
            while True:
                self._up_alive()
                replicas = (await admin.list_replicas(starter.NAME)).replicas
                ready = [r for r in replicas if r.state == "ready" and r.endpoint]
                if ready:
                    self._done["starter"] = f"{starter.NAME} is ready at {ready[0].endpoint}/v1"
                    return
                if replicas:
                    r = replicas[0]
                    now = f"{r.state}: {r.reason}" if r.reason else r.state
                else:
                    now = "waiting for llmgw up to add it"
                    if time.monotonic() - started > STARTER_APPEAR_S:
                        raise _StepFailed(
                            f"llmgw up did not add {starter.NAME}",
                            hint=f"see {self.up_log}",
                        )
                if now != last:
                    last = now
                    yield now
                if time.monotonic() - started > STARTER_WAIT_S:
                    raise _StepFailed(
                        f"{starter.NAME} was not ready within {STARTER_WAIT_S:g} s: {last}",
                        hint="follow it: llmgw ctl replicas",
                    )
                await asyncio.sleep(POLL_S)

    def _up_alive(self) -> None:
        if self._up is None or self._up.poll() is None:
            return
        tail = self.up_log.read_text(errors="replace").strip().splitlines()[-5:]
        raise _StepFailed(
            f"llmgw up exited (code {self._up.returncode}): " + " / ".join(tail),
            hint=f"full log: {self.up_log}",
        )

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Only the plan says where the store is: an operator's variable must not change it.
        env.pop(STORE_DSN_ENV, None)
        if self.paths.home is not None:
            env[ENV_HOME] = str(self.paths.home)
        env.update(command_env(self.plan))
        return env


def _cli_error(stderr: str, code: int | None) -> tuple[str, str]:
    """The ``error:`` and ``hint:`` lines a failed llmgw command printed."""
    message = hint = ""
    for line in stderr.splitlines():
        if line.startswith("error: "):
            message = line.removeprefix("error: ")
        elif line.startswith("hint: "):
            hint = line.removeprefix("hint: ")
    if not message:
        lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        message = lines[-1] if lines else f"llmgw server init failed (code {code})"
    return message, hint
