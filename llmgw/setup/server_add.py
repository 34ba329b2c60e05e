"""``llmgw server add HOST`` as one async generator of step events: another machine made a control plane.

Run on a control plane of a cluster whose store is PostgreSQL. Over SSH, with
node add's pieces (llmgw/onboard): connect, check the machine (doctor),
install llmgw the way node add does, carry the cluster's files to it
(the CA, a server certificate of its own, every secret, the store's DSN in a
0600 file, its server.yaml — each over SFTP into a private staging folder,
then put in place by ``install``, never on a command line), run
llmgw-server.service (or, without systemd, gatewayd detached), and wait
until it has joined the cluster, standing by. The last event is ``result``.
Running it again repairs what is missing and changes nothing else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from llmgw.config import ServerConfig, StoreConfig, dump_yaml, load_server_config, split_host_port
from llmgw.errors import ConfigError, ExitCode, LlmgwError, PkiError, UsageError
from llmgw.fsutil import write_atomic
from llmgw.onboard.checks import doctor_events
from llmgw.onboard.daemon import detached_alive, run_unit, start_detached, stop_detached
from llmgw.onboard.events import Clock, OnboardError, StepEvent, result_event
from llmgw.onboard.install import install_llmgw
from llmgw.onboard.mirror_source import choose_mirror
from llmgw.onboard.remote_files import install_file, make_dir, remote_sha256
from llmgw.onboard.remote_probe import probe_node
from llmgw.onboard.ssh import NodeShell, SshTarget, connect
from llmgw.onboard.wheel import self_wheel
from llmgw.paths import Paths
from llmgw.setup.cluster_init import _default_control_planes, load_ca
from llmgw.setup.http_init import http_cert_paths
from llmgw.setup.server_add_checks import server_checks, store_address
from llmgw.setup.server_add_files import (
    ID_RE,
    Carried,
    ServerLayout,
    ensure_shared_secrets,
    new_control_plane_id,
    remote_server_config,
    secret_files,
    sound_server_cert,
)
from llmgw.setup.server_add_wait import wait_standing
from llmgw.setup.server_unit import server_unit_text
from llmgw.tls import pki

STEPS = ("connect", "doctor", "install", "files", "service", "ready")
NEXT_STEP = "Check it: llmgw ctl status"
READY_TIMEOUT_S = 120.0
_POSTGRES = ("postgresql://", "postgres://")


@dataclass
class ServerAddPlan:
    """Everything ``server add`` needs; ``server add`` and ``server init --standbys`` fill it."""

    target: SshTarget
    paths: Paths  # this control plane's
    # The name or address agents and clients reach it by (default: HOST).
    advertise: str = ""
    # The DSN the new machine reaches the store by (default: this one's).
    store_dsn: str = ""
    install_root: str = ""
    wheelhouse: str = ""
    python: str = "python3"
    ready_timeout_s: float = READY_TIMEOUT_S
    # This control plane runs and is asked for the cluster's control planes
    # (server add); server init --standbys runs before it is started.
    expect_running: bool = True


@dataclass
class ControlPlaneRecord:
    """How server add reached a control plane, kept beside node add's records."""

    control_plane_id: str
    host: str
    port: int = 0
    user: str = ""
    identity: str = ""
    known_hosts: str = ""
    install_root: str = ""
    advertise: str = ""
    python: str = "python3"


@dataclass(frozen=True)
class _Decided:
    """What is settled before logging in: refused here, nothing is touched there."""

    cfg: ServerConfig
    dsn: str
    store_address: str
    advertise: str
    cert_hosts: list[str]
    this_plane: str


def cluster_store_dsn(paths: Paths) -> tuple[ServerConfig, str]:
    """This control plane's server.yaml and the store DSN in force ("" for SQLite)."""
    cfg = load_server_config(paths.server_yaml)
    if not cfg.store.dsn_file:
        return cfg, cfg.store.dsn
    path = paths.config_dir / Path(cfg.store.dsn_file).expanduser()
    try:
        return cfg, path.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ConfigError(
            f"store.dsn_file {path} cannot be read: {e.strerror}",
            hint="run server add as the user that runs the control plane (sudo)",
        ) from e


def decide(plan: ServerAddPlan) -> _Decided:
    """The checks made on this machine; UsageError (and the next step) when one fails."""
    cfg, dsn = cluster_store_dsn(plan.paths)
    if not dsn.startswith(_POSTGRES):
        raise UsageError(
            "this cluster keeps its state in SQLite on this machine, which no other machine "
            "can share: another control plane needs a PostgreSQL store both reach",
            hint="point this control plane at one (server.yaml store.dsn_file, or store.dsn: "
            "postgresql://…), restart it, then run server add again; a new cluster: "
            "llmgw server init --store-dsn postgresql://… --standbys HOST",
        )
    if plan.store_dsn:
        if not plan.store_dsn.startswith(_POSTGRES):
            raise UsageError("--store-dsn must be a postgresql://… address")
        dsn = plan.store_dsn
    address = store_address(dsn)
    if not address:
        raise UsageError(
            "this control plane reaches the store on this machine (loopback or a unix "
            "socket), an address another machine cannot use",
            hint="give the address the new control plane reaches it by: --store-dsn "
            "postgresql://USER@DB-HOST:5432/DB (or LLMGW_STORE_DSN, when it holds a password)",
        )
    advertise = plan.advertise or plan.target.host
    try:
        hosts = list(dict.fromkeys(pki.normalise_host(h) for h in (plan.target.host, advertise)))
    except ValueError as e:
        raise UsageError(
            f"{e}: the new control plane's certificate must name it",
            hint="give the name or address agents reach it by: --advertise ADDR",
        ) from e
    if plan.install_root and not PurePosixPath(plan.install_root).is_absolute():
        raise UsageError(f"--install-root {plan.install_root!r} must be an absolute path")
    try:
        this_plane = _default_control_planes(plan.paths)[0]
    except UsageError:
        this_plane = ""
    return _Decided(cfg, dsn, address, advertise, hosts, this_plane)


async def add_server(plan: ServerAddPlan) -> AsyncIterator[StepEvent]:
    """Make ``plan.target`` a control plane of this cluster; the last event is ``result``."""
    total, clock = Clock(), Clock()
    state: dict = {"warnings": []}
    step = "connect"
    shell: NodeShell | None = None
    target = dataclasses.replace(plan.target, command="server add")
    layout = ServerLayout.for_root(plan.install_root)
    try:
        decided = decide(plan)
        yield StepEvent(step=step, status="running", detail=f"connecting to {target.where()}")
        shell = await connect(target)
        how = "as root" if shell.is_root else "with passwordless sudo"
        if shell.host_key_recorded:
            how += f"; recorded its new host key {shell.host_key_recorded}"
        await _refuse_this_machine(shell, plan, layout)
        yield StepEvent(
            step=step, status="ok", detail=f"logged in {how}", elapsed_s=clock.elapsed()
        )

        step, clock = "doctor", Clock()
        facts = await probe_node(
            shell,
            python=plan.python,
            data_dir=str(layout.paths.server_data_dir),
            control_planes=[decided.store_address],
        )
        checks = server_checks(facts)
        for ev in doctor_events(checks, host=target.host, warnings=state["warnings"], clock=clock):
            yield ev

        step, clock = "install", Clock()
        wheel = await asyncio.to_thread(self_wheel, plan.paths.server_data_dir / "self-wheels")
        chosen = (
            None
            if plan.wheelhouse
            else await choose_mirror(plan.paths, control_plane=decided.this_plane)
        )
        async for ev in install_llmgw(
            shell,
            layout.node,
            wheel,
            python=plan.python,
            wheelhouse=plan.wheelhouse,
            state=state,
            mirror=chosen[0] if chosen else None,
            mirror_wheels=chosen[1] if chosen else None,
            cpu_flags=facts.cpu_flags,
            ca_cert=str(plan.paths.ca_cert),
        ):
            yield ev

        step, clock = "files", Clock()
        files, cfg = await _files(shell, plan, layout, decided, facts.hostname, state)
        have = await remote_sha256(shell, [f.dest for f in files] + [layout.unit_file])
        for folder, mode in (
            (layout.paths.config_dir, 0o755),
            (layout.paths.pki_dir, 0o700),
            (layout.paths.secrets_dir, 0o700),
            (layout.paths.server_data_dir, 0o700),
        ):
            await make_dir(shell, str(folder), mode=mode)
        changed = [
            f.name
            for f in files
            if await install_file(shell, f.data, f.dest, mode=f.mode, have=have)
        ]
        state["files"] = [{"path": f.dest, "mode": f"{f.mode:04o}"} for f in files]
        yield StepEvent(
            step=step,
            status="ok" if changed else "kept",
            detail=(f"wrote {', '.join(changed)}" if changed else "every file in place")
            + f" (control plane {state['control_plane_id']}, store {decided.store_address})",
            elapsed_s=clock.elapsed(),
        )

        step, clock = "service", Clock()
        restart = bool(changed) or state.get("llmgw_changed", False)
        async for ev in _service(shell, layout, cfg, decided, facts.systemd, have, restart, state):
            if ev.status == "warn":
                state["warnings"].append({"check": "systemd", "detail": ev.detail, "fix": ev.fix})
            yield ev
        _save_record(plan, target, decided, state["control_plane_id"])
        await shell.close()
        shell = None

        step, clock = "ready", Clock()
        host = decided.advertise
        host = f"[{host}]" if ":" in host else host
        http_port = split_host_port(cfg.listen.http)[1]
        async for ev in wait_standing(
            plan.paths,
            control_plane_id=state["control_plane_id"],
            health_url=f"{cfg.http.scheme}://{host}:{http_port}/health",
            log_hint=(
                "journalctl -u llmgw-server -n 50"
                if facts.systemd
                else f"tail -n 50 {layout.log_file}"
            )
            + f" on {target.host}",
            timeout_s=plan.ready_timeout_s,
            expect_running=plan.expect_running,
            state=state,
        ):
            if ev.status == "warn":
                state["warnings"].append({"check": "cluster", "detail": ev.detail, "fix": ev.fix})
            yield ev
    except LlmgwError as e:
        code = e.exit_code if e.exit_code != ExitCode.OK else ExitCode.ERROR
        yield StepEvent(
            step=step, status="fail", detail=e.message, fix=e.hint, elapsed_s=clock.elapsed()
        )
        yield _result(plan, "fail", e.message, e.hint, total, state, code)
        return
    finally:
        if shell is not None:
            await shell.close()
    cp_id = state["control_plane_id"]
    role = state.get("role", "")
    words = {"standby": "stands by", "leader": "leads the cluster"}.get(role, "runs")
    yield _result(
        plan, "ok", f"{target.host} is a control plane: {cp_id} {words}", NEXT_STEP, total, state
    )


async def _refuse_this_machine(shell: NodeShell, plan: ServerAddPlan, layout: ServerLayout) -> None:
    """Refuse to write this control plane's own files: HOST is this machine, same layout."""
    if layout.paths.config_dir != plan.paths.config_dir:
        return
    try:
        here = Path("/etc/machine-id").read_text().strip()
    except OSError:
        return
    there = await shell.run(["cat", "/etc/machine-id"], sudo=False, timeout_s=30)
    if here and there.ok and there.stdout.strip() == here:
        raise UsageError(
            f"{plan.target.host} is this very machine, which is a control plane already",
            hint="name another machine; this one's files would be written over",
        )


async def _files(
    shell: NodeShell,
    plan: ServerAddPlan,
    layout: ServerLayout,
    decided: _Decided,
    hostname: str,
    state: dict,
) -> tuple[list[Carried], ServerConfig]:
    """The files the new control plane gets, and its server.yaml."""
    try:
        ca = load_ca(plan.paths)
    except PkiError as e:
        raise OnboardError(e.message, hint=e.hint) from e
    made = ensure_shared_secrets(plan.paths)
    if made:
        state["made_here"] = made
    paths = layout.paths
    kept_id = await shell.run(["cat", layout.id_file], timeout_s=30)
    cp_id = kept_id.stdout.strip() if kept_id.ok else ""
    if not ID_RE.fullmatch(cp_id):
        cp_id = new_control_plane_id(hostname or plan.target.host)
    state["control_plane_id"] = cp_id

    # A certificate it has already, issued by this CA for the same names, is kept.
    there = await shell.run(["cat", str(paths.server_cert)], timeout_s=30)
    key_there = (await shell.run(["test", "-s", str(paths.server_key)], timeout_s=30)).ok
    keep = (
        there.ok
        and key_there
        and not sound_server_cert(there.stdout.encode(), ca, decided.cert_hosts)
    )
    cfg, extra = remote_server_config(
        decided.cfg, layout, advertise=decided.advertise, this_plane=decided.this_plane
    )
    files = [
        Carried(ca.cert_pem, str(paths.ca_cert), 0o644),
        Carried(ca.key_pem, str(paths.ca_key), 0o600),
    ]
    cfg, http_files = await _http_cert(shell, cfg, plan.paths, paths, ca, decided.cert_hosts)
    files += http_files
    if not keep:
        server = pki.issue_server_cert(ca, decided.cert_hosts)
        files += [
            Carried(server.cert_pem, str(paths.server_cert), 0o644),
            Carried(server.key_pem, str(paths.server_key), 0o600),
        ]
    carried = {**extra, **secret_files(plan.paths)}
    files += [Carried(data, str(paths.secrets_dir / name), 0o600) for name, data in carried.items()]
    files += [
        Carried((decided.dsn + "\n").encode(), layout.dsn_file, 0o600),
        Carried((cp_id + "\n").encode(), layout.id_file, 0o600),
        Carried(dump_yaml(cfg).encode(), str(paths.server_yaml), 0o644),
    ]
    return files, cfg


async def _http_cert(
    shell: NodeShell,
    cfg: ServerConfig,
    here: Paths,
    there: Paths,
    ca: pki.CertKey,
    hosts: list[str],
) -> tuple[ServerConfig, list[Carried]]:
    """The gateway port's certificate of the new control plane, where this one's came from
    the cluster CA (``server init --http-tls``): one of its own for the names it is reached
    by, kept there while sound. An operator's own certificate is the operator's to put there
    (server.yaml names it; the new control plane says so if it is missing)."""
    mine, _ = http_cert_paths(here)
    if not cfg.http.tls_cert or Path(cfg.http.tls_cert) != mine:
        return cfg, []
    crt, key = http_cert_paths(there)
    cfg = cfg.model_copy(
        update={"http": cfg.http.model_copy(update={"tls_cert": str(crt), "tls_key": str(key)})}
    )
    held = await shell.run(["cat", str(crt)], timeout_s=30)
    key_held = (await shell.run(["test", "-s", str(key)], timeout_s=30)).ok
    if held.ok and key_held and not sound_server_cert(held.stdout.encode(), ca, hosts):
        return cfg, []
    issued = pki.issue_server_cert(ca, hosts)
    return cfg, [
        Carried(issued.cert_pem, str(crt), 0o644),
        Carried(issued.key_pem, str(key), 0o600),
    ]


async def _service(
    shell: NodeShell,
    layout: ServerLayout,
    cfg: ServerConfig,
    decided: _Decided,
    systemd: bool,
    have: dict[str, str],
    restart: bool,
    state: dict,
) -> AsyncIterator[StepEvent]:
    clock = Clock()
    if systemd:
        hint = "look at its log there (journalctl -u llmgw-server), then run server add again"
        # The real DSN, not the file's path: the unit waits for a PostgreSQL on that machine.
        for_unit = cfg.model_copy(update={"store": StoreConfig(dsn=decided.dsn)})
        status, detail = await run_unit(
            shell,
            unit_name=layout.unit_name,
            unit_file=layout.unit_file,
            text=server_unit_text(layout.paths, for_unit, program=[layout.llmgw]),
            link=bool(layout.node.install_root),
            have=have,
            restart=restart,
            hint=hint,
        )
        state["service"] = f"{layout.unit_name} enabled"
        yield StepEvent(step="service", status=status, detail=detail, elapsed_s=clock.elapsed())
        return
    state["service"] = f"detached, pidfile {layout.pidfile}"
    alive = await detached_alive(shell, layout.pidfile)
    if alive and not restart:
        yield StepEvent(
            step="service",
            status="kept",
            detail=f"no systemd here: the control plane runs detached (pidfile {layout.pidfile}); "
            "nothing changed",
            elapsed_s=clock.elapsed(),
        )
        return
    if alive:
        await stop_detached(shell, layout.pidfile)
    await start_detached(
        shell,
        [layout.llmgw, "server", "--config", str(layout.paths.server_yaml)],
        pidfile=layout.pidfile,
        log_file=layout.log_file,
        env=layout.env,
        hint=f"look at its log there ({layout.log_file}), then run server add again",
    )
    yield StepEvent(
        step="service",
        status="warn",
        detail="no systemd on this machine (no /run/systemd/system): started the control plane "
        f"detached, pidfile {layout.pidfile}, log {layout.log_file}",
        fix="nothing restarts it after a crash or reboot: start it from the machine's init "
        "system (llmgw start there), or run server add again",
        elapsed_s=clock.elapsed(),
    )


def records_dir(paths: Paths) -> Path:
    return paths.config_dir / "control-planes"


def _save_record(plan: ServerAddPlan, target: SshTarget, decided: _Decided, cp_id: str) -> None:
    rec = ControlPlaneRecord(
        control_plane_id=cp_id,
        host=target.host,
        port=target.port,
        user=target.user,
        identity=target.identity,
        known_hosts=target.known_hosts,
        install_root=plan.install_root,
        advertise=decided.advertise,
        python=plan.python,
    )
    path = records_dir(plan.paths) / f"{cp_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, json.dumps(asdict(rec), indent=2) + "\n", mode=0o600)


def _result(
    plan: ServerAddPlan,
    status: str,
    detail: str,
    fix: str,
    total: Clock,
    state: dict,
    code: ExitCode = ExitCode.OK,
) -> StepEvent:
    return result_event(
        status,
        detail,
        fix,
        total,
        code,
        host=plan.target.host,
        advertise=plan.advertise or plan.target.host,
        control_plane_id=state.get("control_plane_id", ""),
        role=state.get("role", ""),
        install_root=plan.install_root,
        service=state.get("service", ""),
        files=state.get("files", []),
        made_here=state.get("made_here", []),
        warnings=state.get("warnings", []),
        next_step=NEXT_STEP if status == "ok" else "",
    )
