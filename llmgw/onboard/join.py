"""The join step: the node's certificate, agent.yaml with every control plane, and the running agent.

What is on the node and sound is kept: a certificate the control plane
issued the node (same bytes, signed by the CA, far from expiry) is not
issued again, an unchanged agent.yaml or unit is not rewritten, and a
running agent is restarted only when something it reads changed. Under
systemd the agent is llmgw-agent.service (Restart=always, UMask=0077),
enabled and started; without systemd it is started detached with a pidfile.
"""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import yaml
from cryptography.x509.oid import ExtendedKeyUsageOID

from llmgw.config import AgentConfig, AgentPki, dump_yaml
from llmgw.errors import PkiError
from llmgw.labels import check_labels
from llmgw.onboard.daemon import detached_alive, run_unit, start_detached
from llmgw.onboard.events import Clock, OnboardError, StepEvent
from llmgw.onboard.layout import UNIT_NAME, NodeLayout
from llmgw.onboard.remote_files import install_file, make_dir, remote_sha256
from llmgw.onboard.ssh import NodeShell, sha256_hex
from llmgw.paths import Paths
from llmgw.setup.cluster_init import RENEW_BEFORE, issue_node_bundle, load_ca
from llmgw.tls import pki

STEP = "join"


def unit_text(layout: NodeLayout, description: str = "llmgw node agent") -> str:
    return agent_unit_text(
        [layout.llmgw], layout.paths.agent_yaml, layout.agent_env, description=description
    )


def agent_unit_text(
    program: list[str],
    agent_yaml: Path | str,
    env: dict[str, str],
    *,
    description: str = "llmgw node agent",
    after: str = "",
) -> str:
    """llmgw-agent.service: ``program`` (the llmgw to start) as the agent of ``agent_yaml``;
    ``after``: a unit of this machine it dials (the local control plane's)."""
    lines = "".join(f"Environment={k}={v}\n" for k, v in env.items())
    argv = " ".join([*program, "agent", "--config", str(agent_yaml)])
    return (
        "[Unit]\n"
        f"Description={description}\n"
        f"After=network-online.target{' ' + after if after else ''}\n"
        "Wants=network-online.target\n\n"
        "[Service]\n"
        f"ExecStart={argv}\n"
        f"{lines}"
        # Always: the agent keeps engines running across its own restarts.
        "Restart=always\n"
        "RestartSec=5\n"
        # Files it writes (weights, state, logs) are the node's, not everybody's.
        "UMask=0077\n"
        "KillMode=process\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def agent_yaml(
    layout: NodeLayout,
    node_id: str,
    control_planes: list[str],
    labels: dict[str, str] | None = None,
) -> str:
    cfg = AgentConfig(
        node_id=node_id,
        control_planes=control_planes,
        pki=AgentPki(ca_cert=layout.ca_crt, cert=layout.node_crt, key=layout.node_key),
        labels=dict(labels or {}),
    )
    return dump_yaml(cfg)


async def labels_there(shell: NodeShell, layout: NodeLayout) -> dict[str, str]:
    """The labels the node's agent.yaml has now ({} when none, or when it does not load)."""
    ran = await shell.run(["cat", str(layout.paths.agent_yaml)], timeout_s=30)
    if not ran.ok:
        return {}
    try:
        labels = (yaml.safe_load(ran.stdout) or {}).get("labels") or {}
        return check_labels(labels) if isinstance(labels, dict) else {}
    except (yaml.YAMLError, AttributeError, ValueError):
        return {}  # a file node add does not understand is written anew


def _sound_local_bundle(paths: Paths, node_id: str, ca: pki.CertKey) -> tuple[bytes, bytes] | None:
    d = paths.node_certs_dir / node_id
    try:
        pair = pki.load_cert_key(d / "node.crt", d / "node.key")
    except (PkiError, OSError):
        return None
    if not pki.issued_by(pair.cert_pem, ca.cert_pem):
        return None
    if pki.cert_common_name(pair.cert_pem) != node_id:
        return None
    if pki.cert_not_after(pair.cert_pem) - dt.datetime.now(dt.UTC) < RENEW_BEFORE:
        return None
    if not pki.has_usage(pair.cert_pem, ExtendedKeyUsageOID.SERVER_AUTH):
        return None  # issued before engine doors: it cannot serve the node's doors
    return pair.cert_pem, pair.key_pem


async def join_node(
    shell: NodeShell,
    layout: NodeLayout,
    *,
    paths: Paths,
    node_id: str,
    control_planes: list[str],
    systemd: bool,
    state: dict,
    labels: dict[str, str] | None = None,
) -> AsyncIterator[StepEvent]:
    clock = Clock()
    # A second node add keeps the labels agent.yaml has and adds those given.
    labels = {**await labels_there(shell, layout), **(labels or {})}
    try:
        ca = load_ca(paths)
    except PkiError as e:
        raise OnboardError(e.message, hint=e.hint) from e
    files = [layout.ca_crt, layout.node_crt, layout.node_key, str(layout.paths.agent_yaml)]
    if systemd:
        files.append(layout.unit_file)
    have = await remote_sha256(shell, files)

    local = _sound_local_bundle(paths, node_id, ca)
    reuse = (
        local is not None
        and have.get(layout.node_crt) == sha256_hex(local[0])
        and have.get(layout.node_key) == sha256_hex(local[1])
    )
    if reuse:
        cert_pem, key_pem = local  # type: ignore[misc]
    else:
        try:
            bundle = issue_node_bundle(paths, node_id, control_planes=control_planes)
        except PkiError as e:
            raise OnboardError(e.message, hint=e.hint) from e
        cert_pem, key_pem = Path(bundle.cert).read_bytes(), Path(bundle.key).read_bytes()
    state["cert_serial"] = format(_serial(cert_pem), "X")
    state["cert_fingerprint_sha256"] = pki.fingerprint_sha256(cert_pem)

    changed: list[str] = []
    await make_dir(shell, str(layout.paths.config_dir))
    await make_dir(shell, str(layout.paths.pki_dir), mode=0o700)
    for data, dest, mode in (
        (ca.cert_pem, layout.ca_crt, 0o644),
        (cert_pem, layout.node_crt, 0o644),
        (key_pem, layout.node_key, 0o600),
        (
            agent_yaml(layout, node_id, control_planes, labels).encode(),
            str(layout.paths.agent_yaml),
            0o644,
        ),
    ):
        if await install_file(shell, data, dest, mode=mode, have=have):
            changed.append(Path(dest).name)
    yield StepEvent(
        step=STEP,
        status="running",
        detail=(f"wrote {', '.join(changed)}" if changed else "certificate and agent.yaml in place")
        + f" (certificate {state['cert_fingerprint_sha256'][:23]}…)",
        elapsed_s=clock.elapsed(),
    )
    restart = bool(changed) or state.get("llmgw_changed", False)
    if systemd:
        async for ev in _systemd(shell, layout, have, restart, clock):
            yield ev
    else:
        async for ev in _detached(shell, layout, restart, clock):
            yield ev


async def _systemd(
    shell: NodeShell, layout: NodeLayout, have: dict[str, str], restart: bool, clock: Clock
) -> AsyncIterator[StepEvent]:
    status, detail = await run_unit(
        shell,
        unit_name=UNIT_NAME,
        unit_file=layout.unit_file,
        text=unit_text(layout),
        link=bool(layout.install_root),
        have=have,
        restart=restart,
        hint=_HINT,
    )
    yield StepEvent(step=STEP, status=status, detail=detail, elapsed_s=clock.elapsed())


async def _detached(
    shell: NodeShell, layout: NodeLayout, restart: bool, clock: Clock
) -> AsyncIterator[StepEvent]:
    pidfile = shlex.quote(layout.pidfile)
    alive = await detached_alive(shell, layout.pidfile)
    if alive and not restart:
        yield StepEvent(
            step=STEP,
            status="kept",
            detail=f"no systemd here: the agent runs detached (pidfile {layout.pidfile}); "
            "nothing changed",
            elapsed_s=clock.elapsed(),
        )
        return
    if alive:
        await shell.run(["sh", "-c", f'kill "$(cat {pidfile})"; sleep 1'])
    await start_detached(
        shell,
        [layout.llmgw, "agent", "--config", str(layout.paths.agent_yaml)],
        pidfile=layout.pidfile,
        log_file=layout.log_file,
        env=layout.agent_env,
        hint=_HINT,
    )
    yield StepEvent(
        step=STEP,
        status="warn",
        detail=f"no systemd on this machine (no /run/systemd/system): started the agent "
        f"detached, pidfile {layout.pidfile}, log {layout.log_file}",
        fix="nothing restarts it after a crash or reboot: start it from the node's init "
        f"system ({layout.llmgw} agent), or run node add again",
        elapsed_s=clock.elapsed(),
    )


_HINT = "look at the agent's log there (journalctl -u llmgw-agent), then run node add again"


def _serial(cert_pem: bytes) -> int:
    from cryptography import x509

    return x509.load_pem_x509_certificate(cert_pem).serial_number
