"""``llmgw up``: gatewayd and a local agentd on one machine, root or not.

As root, engines still never run as root: they run as llmgw-engine, and the
home is chosen (``/var/lib/llmgw-up``) or checked to be within its reach.

With ``--mirror`` (or once a mirror.yaml is in the home) a model mirror runs
beside them (``llmgw mirror serve``), set up at its first start: mirror.yaml,
its read and admin tokens, its certificate from the cluster CA (it serves
HTTPS) and server.yaml's ``mirror.urls`` naming it.

It supervises both as child processes the way the systemd units would on a
real install: a child that exits unexpectedly is restarted (and said so),
Ctrl-C or SIGTERM stops both, agent first, and nothing is left behind.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import signal
import socket
import ssl
import sys
import time
from pathlib import Path

from llmgw import parent_death
from llmgw.admin_client import AdminClient
from llmgw.aio import within
from llmgw.config import (
    DEFAULT_ADMIN_PORT,
    DEFAULT_AGENT_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    ServerConfig,
    load_server_config,
    split_host_port,
)
from llmgw.errors import AdminError, LlmgwError
from llmgw.mirror.config import DEFAULT_MIRROR_PORT, load_mirror_config
from llmgw.paths import ENV_HOME, Paths, user_home
from llmgw.present.output import stdout as console
from llmgw.setup.cluster_init import init_server, write_local_agent
from llmgw.setup.mirror_init import init_mirror
from llmgw.setup.run import _any_free_port, port_free
from llmgw.setup.run import choose_ports as setup_ports
from proto.llmgw.v1 import LimitsView

STOP_TIMEOUT_S = 10.0
READY_TIMEOUT_S = 30.0
RESTART_DELAY_MAX_S = 30.0
# How long `llmgw up` watches the starter model come up before leaving it be.
STARTER_WAIT_S = 300


def choose_ports() -> dict[str, int]:
    """The default ports, or free ones where a default is taken (said aloud)."""
    ports = setup_ports()
    defaults = {"agent": DEFAULT_AGENT_PORT, "admin": DEFAULT_ADMIN_PORT}
    defaults |= {"http": DEFAULT_HTTP_PORT, "metrics": DEFAULT_METRICS_PORT}
    for name, port in defaults.items():
        if ports[name] != port:
            console.print(f"port {port} ({name}) is taken; using {ports[name]}")
    return ports


def local_node_id() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).lstrip(".-_") or "local"
    return name[:63]


class Child:
    def __init__(self, name: str, args: list[str], log_file: Path, env: dict[str, str]):
        self.name, self.args, self.log_file, self.env = name, args, log_file, env
        self.proc: asyncio.subprocess.Process | None = None
        self.restarts = 0

    async def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={**self.env, parent_death.ENV: str(os.getpid())},
            )

    async def stop(self) -> None:
        p = self.proc
        if p is None or p.returncode is not None:
            return
        p.terminate()
        try:
            await within(p.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            console.print(f"{self.name} did not stop within {STOP_TIMEOUT_S:g} s; killing it")
            p.kill()
            await p.wait()


async def _wait_ready(paths: Paths, gatewayd: Child) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if gatewayd.proc and gatewayd.proc.returncode is not None:
            tail = gatewayd.log_file.read_text(errors="replace").strip().splitlines()[-5:]
            raise LlmgwError(
                "gatewayd exited while starting:\n  " + "\n  ".join(tail),
                hint=f"full log: {gatewayd.log_file}",
            )
        try:
            async with AdminClient.from_paths(paths, timeout_s=2) as c:
                await c.status()
                return
        except AdminError as e:
            last = e
        await asyncio.sleep(0.3)
    raise LlmgwError(
        f"gatewayd did not answer within {READY_TIMEOUT_S:g} s ({last})",
        hint=f"see {gatewayd.log_file}",
    )


def _supervise_delay(restarts: int) -> float:
    return min(2 ** min(restarts, 5), RESTART_DELAY_MAX_S)


def local_mirror(paths: Paths) -> str:
    """Set the home's mirror up (at its first start; later, what it lacks); the URL this
    machine reaches it at.

    It listens on every interface, as the agent port does, at 7080 or a free
    port where that is taken, with HTTPS from the cluster CA; the cluster (the
    local agent) reaches it on loopback, which its certificate names.
    """
    listen, first = "", not paths.mirror_yaml.exists()
    if not first:
        cfg = load_mirror_config(paths.mirror_yaml)
        scheme, (_, port) = cfg.scheme, split_host_port(cfg.listen)
    else:
        port = DEFAULT_MIRROR_PORT if port_free(DEFAULT_MIRROR_PORT) else _any_free_port()
        if port != DEFAULT_MIRROR_PORT:
            console.print(f"port {DEFAULT_MIRROR_PORT} (mirror) is taken; using {port}")
        scheme, listen = "https", f"0.0.0.0:{port}"
    url = f"{scheme}://127.0.0.1:{port}"
    # A home set up before mirrors had an admin token and a certificate of their own gets them.
    init_mirror(paths, listen=listen, url=url, write_unit=False, name_it=first)
    return url


async def _wait_mirror(paths: Paths, url: str, mirror: Child) -> None:
    import httpx

    deadline = time.monotonic() + READY_TIMEOUT_S
    last = ""
    # Its certificate is checked as every client of it checks it: against the cluster CA.
    verify = ssl.create_default_context(cafile=str(paths.ca_cert))
    async with httpx.AsyncClient(timeout=2, verify=verify) as http:
        while time.monotonic() < deadline:
            if mirror.proc and mirror.proc.returncode is not None:
                tail = mirror.log_file.read_text(errors="replace").strip().splitlines()[-5:]
                raise LlmgwError(
                    "the mirror exited while starting:\n  " + "\n  ".join(tail),
                    hint=f"full log: {mirror.log_file}",
                )
            try:
                if (await http.get(f"{url}/health")).status_code == 200:
                    return
            except httpx.HTTPError as e:
                last = str(e) or type(e).__name__
            await asyncio.sleep(0.3)
    raise LlmgwError(
        f"the mirror did not answer at {url} within {READY_TIMEOUT_S:g} s ({last})",
        hint=f"see {mirror.log_file}",
    )


def check_engine_reach(paths: Paths) -> None:
    """As root, refuse a home the engine user could never enter (``~/.llmgw`` under /root).

    Engines then run as llmgw-engine, and their program, weights and home all
    lie in this home: a directory above it closed to that user (/root is
    0700) would leave the replica failing and restarting, said only in
    ``ctl replicas``. The home itself and what is below it the agent lets
    the user through.
    """
    from agentd.supervisor.access import closed_on_the_way
    from agentd.supervisor.users import ENGINE_USER, root_engines_allowed

    if os.geteuid() != 0 or root_engines_allowed():
        return
    try:
        pw = pwd.getpwnam(ENGINE_USER)
        uid, gids = pw.pw_uid, set(os.getgrouplist(ENGINE_USER, pw.pw_gid))
    except KeyError:
        # Not made yet: a system user in a group of its own, so others' rights.
        uid, gids = -1, set()
    why = closed_on_the_way(str(paths.home), uid, gids)
    if why is not None:
        raise LlmgwError(
            f"engines run as {ENGINE_USER}, which cannot reach the home {paths.home}: {why}",
            hint=f"unset {ENV_HOME} (root's home is then {user_home(0)}), or set it to a "
            f"directory outside; the agent lets {ENGINE_USER} into the home itself",
        )


async def _up(paths: Paths, hosts: list[str], mirror: bool = False) -> None:
    if not paths.server_yaml.exists() or load_server_config(paths.server_yaml).setup.node:
        check_engine_reach(paths)
    if not paths.server_yaml.exists():
        console.print(f"Setting up a new cluster in {paths.home} …")
        res = init_server(paths, hosts=hosts or [socket.gethostname()], ports=choose_ports())
        del res
    mirror_url = local_mirror(paths) if mirror or paths.mirror_yaml.exists() else ""
    cfg = load_server_config(paths.server_yaml)
    _, agent_port = split_host_port(cfg.listen.agent)
    # `server init --no-node`: a control plane only; its nodes join from elsewhere.
    local_node = cfg.setup.node
    if local_node and not paths.agent_yaml.exists():
        write_local_agent(paths, local_node_id(), [f"127.0.0.1:{agent_port}"])

    env = dict(os.environ)
    env[ENV_HOME] = str(paths.home)
    exe = [sys.executable, "-m", "llmgw"]
    gatewayd = Child("gatewayd", exe + ["server"], paths.log_dir / "gatewayd.log", env)
    agentd = Child("agentd", exe + ["agent"], paths.log_dir / "agentd.log", env)
    mirrord = Child("mirror", exe + ["mirror", "serve"], paths.log_dir / "mirror.log", env)
    children = [gatewayd, agentd] if local_node else [gatewayd]
    if mirror_url:
        children.append(mirrord)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    try:
        if mirror_url:
            # First: gatewayd pins and plans hf: models through it from its start.
            await mirrord.start()
            await _wait_mirror(paths, mirror_url, mirrord)
        await gatewayd.start()
        await _wait_ready(paths, gatewayd)
        if local_node:
            await agentd.start()
        _, http_port = split_host_port(cfg.listen.http)
        scheme = cfg.http.scheme
        home_note = "" if paths.home == user_home().resolve() else f"LLMGW_HOME={paths.home} "
        console.print(
            f"[bold green]llmgw is up[/bold green] (cluster {cfg.cluster_name!r}, home {paths.home})\n"
            f"  API        {scheme}://127.0.0.1:{http_port}/v1  (health: /health, /ready"
            + (f"; CA {paths.ca_cert}" if scheme == "https" else "")
            + ")\n"
            + (
                f"  MCP        {scheme}://127.0.0.1:{http_port}/mcp  (tools by grant: llmgw ctl mcp)\n"
                if cfg.mcp.enabled
                else ""
            )
            + f"  agents     {cfg.listen.agent} (mutual TLS)\n"
            f"  admin      {cfg.listen.admin} (token in {paths.admin_token_file})\n"
            + (
                f"  mirror     {mirror_url}  (read token in {paths.mirror_read_token_file})\n"
                if mirror_url
                else ""
            )
            + f"  logs       {paths.log_dir}\n"
            f"Check it: {home_note}llmgw ctl nodes   ·   Stop: Ctrl-C"
        )
        if cfg.setup.project:
            console.print(
                f"An API key for the endpoint: {home_note}llmgw ctl keys create --project "
                f"{cfg.setup.project}"
            )
        starter_task = asyncio.create_task(_serve_starter(paths, cfg, home_note))
        try:
            await _supervise(stop, children)
        finally:
            starter_task.cancel()
    finally:
        console.print("Stopping …")
        if local_node:
            await agentd.stop()
            await _stop_engines(paths)
        await gatewayd.stop()
        await mirrord.stop()
        console.print("Stopped.")


async def _supervise(stop: asyncio.Event, children: list[Child]) -> None:
    while not stop.is_set():
        waits = {asyncio.create_task(c.proc.wait()): c for c in children if c.proc}
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({stopper, *waits}, return_when=asyncio.FIRST_COMPLETED)
        for t in waits:
            t.cancel()
        stopper.cancel()
        if stop.is_set():
            return
        for t in done:
            if t is stopper:
                continue
            child = waits[t]
            code = child.proc.returncode if child.proc else None
            delay = _supervise_delay(child.restarts)
            child.restarts += 1
            console.print(
                f"[yellow]{child.name} exited unexpectedly (code {code}); restarting it in "
                f"{delay:g} s, as its service would be[/yellow] — log: {child.log_file}"
            )
            try:
                await within(stop.wait(), delay)
                return
            except TimeoutError:
                pass
            try:
                await child.start()
            except OSError as e:
                # Its old process stays the one waited on: the next round tries again, later.
                console.print(f"[red]{child.name} could not be started again: {e}[/red]")


async def _serve_starter(paths: Paths, cfg: ServerConfig, home_note: str) -> None:
    """At the first start: the project server init recorded, and the starter model on an
    empty cluster (unless --no-starter); says where the starter answers once it does."""
    from llmgw.present.modelfmt import to_spec
    from llmgw.setup import starter

    try:
        async with AdminClient.from_paths(paths) as admin:
            setup = cfg.setup
            if setup.project and not (await admin.list_tenants("project")).tenants:
                # The project the printed key command names, so it works as printed.
                await admin.create_tenant("project", setup.project, parents=True)
                limits = LimitsView(
                    scope=setup.project,
                    rpm=setup.rpm,
                    tpm=setup.tpm,
                    budget_month_micros=setup.budget_month_micros,
                )
                if any(v is not None for v in (setup.rpm, setup.tpm, setup.budget_month_micros)):
                    await admin.set_limits(limits)
            if not setup.starter or not starter.available():
                return
            if (await admin.list_models()).models:
                return
            # Not in the control plane's data dir: the engine, maybe another user, reads it.
            path = await asyncio.to_thread(starter.assemble, paths.models_dir)
            model = starter.model(path)
            await admin.put_model(to_spec(model))
            console.print(
                f"Serving the starter model {model.name}: {starter.DESCRIPTION}.\n"
                f"Follow it: {home_note}llmgw ctl replicas"
            )
            for _ in range(STARTER_WAIT_S):
                replicas = (await admin.list_replicas(model.name)).replicas
                ready = [r for r in replicas if r.state == "ready" and r.endpoint]
                if ready:
                    console.print(
                        f"[bold green]{model.name} is ready[/bold green] (its engine "
                        f"behind {ready[0].endpoint}, which takes the gateway alone): ask it "
                        f"through the API above with a key from {home_note}llmgw ctl keys create"
                    )
                    return
                await asyncio.sleep(1)
            console.print(f"{model.name} is not ready yet; see: {home_note}llmgw ctl replicas")
    except LlmgwError as e:
        console.print(f"[yellow]the starter model was not served: {e.message}[/yellow]")


async def _stop_engines(paths: Paths) -> None:
    from agentd.main import stop_engines

    try:
        stopped = await stop_engines(paths)
    except LlmgwError as e:
        console.print(f"[yellow]engines may still run: {e.message}[/yellow]")
        return
    if stopped:
        console.print(f"Stopped {stopped} engine(s).")


def run_up(hosts: list[str], mirror: bool = False) -> None:
    home = os.environ.get(ENV_HOME)
    paths = Paths.under(Path(home) if home else user_home())
    try:
        asyncio.run(_up(paths, hosts, mirror))
    except KeyboardInterrupt:
        pass
    except LlmgwError:
        raise
