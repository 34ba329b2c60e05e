"""The units ``server init`` writes and enables: the control plane's (llmgw-server.service)
and, with ``--node``, this machine's agent (llmgw-agent.service, after the control plane).

Before it only agents (and mirrors) had a unit, so a control plane that was
rebooted stayed down until someone ran ``llmgw server`` by hand. The unit
follows the mirror's conventions (llmgw/setup/mirror_init.py): in
/etc/systemd/system on a system install, under the config dir with
LLMGW_HOME (outside systemd's search path; ``systemctl link`` makes it known),
kept when already right, rewritten (and said so) when not. ``systemctl`` is
called only on a system install where systemd runs; otherwise the step says
exactly what to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel

from llmgw.config import ServerConfig
from llmgw.fsutil import write_atomic
from llmgw.onboard.join import agent_unit_text as node_agent_unit_text
from llmgw.onboard.layout import UNIT_NAME as AGENT_UNIT_NAME
from llmgw.paths import ENV_HOME, Paths
from llmgw.setup.mirror_init import SYSTEM_UNIT_DIR, llmgw_program
from llmgw.setup.systemd import Systemd

SERVER_UNIT_NAME = "llmgw-server.service"
_LOCAL_HOSTS = ("", "localhost", "127.0.0.1", "::1")


class ServerUnitStep(BaseModel):
    """What ``server init`` did with one of its units, for people and ``--json``."""

    item: Literal["server_unit", "agent_unit"] = "server_unit"
    path: str
    action: Literal["created", "kept", "rewritten"]
    enabled: bool
    # Said when it was not enabled here: the commands that would do it.
    to_run: str = ""
    reason: str = ""


def server_unit_path(
    paths: Paths, unit_dir: Path = SYSTEM_UNIT_DIR, name: str = SERVER_UNIT_NAME
) -> Path:
    if paths.home is None:
        return unit_dir / name
    return paths.config_dir / "systemd" / name


def agent_unit_text(paths: Paths, program: list[str] | None = None) -> str:
    """This machine's agent, as ``server init --node`` made it: started after the control
    plane it dials; its engines outlive its restarts (KillMode=process)."""
    env = {ENV_HOME: str(paths.home)} if paths.home is not None else {}
    return node_agent_unit_text(
        program or llmgw_program(),
        paths.agent_yaml,
        env,
        description="llmgw node agent (this control plane's machine)",
        after=SERVER_UNIT_NAME,
    )


def store_is_local(cfg: ServerConfig) -> bool:
    """A PostgreSQL store on this machine (loopback or its unix socket): start after it."""
    dsn = cfg.store.dsn
    if not dsn and cfg.store.dsn_file:
        try:
            dsn = Path(cfg.store.dsn_file).read_text().strip()
        except OSError:
            return False  # init reports an unreadable DSN file itself
    if not dsn.startswith(("postgresql://", "postgres://")):
        return False
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or ""
    except ValueError:
        return False
    # postgresql:///db?host=/run/postgresql names the socket directory in the query.
    query_host = parse_qs(parts.query).get("host", [""])[0]
    return host in _LOCAL_HOSTS and (not query_host or query_host.startswith("/"))


def server_unit_text(paths: Paths, cfg: ServerConfig, program: list[str] | None = None) -> str:
    """``program``: the llmgw to start (default this one; server add names the new machine's)."""
    env = f"Environment={ENV_HOME}={paths.home}\n" if paths.home is not None else ""
    argv = " ".join([*(program or llmgw_program()), "server", "--config", str(paths.server_yaml)])
    # Ordering only: a local PostgreSQL that is enabled comes up first; a store
    # elsewhere is waited for by gatewayd itself.
    after = "network-online.target" + (" postgresql.service" if store_is_local(cfg) else "")
    return (
        "[Unit]\n"
        "Description=llmgw control plane (gatewayd)\n"
        f"After={after}\n"
        "Wants=network-online.target\n\n"
        "[Service]\n"
        f"ExecStart={argv}\n"
        f"{env}"
        "Restart=always\n"
        "RestartSec=5\n"
        # Every agent holds one TLS stream and every client a socket: systemd's
        # default soft limit of 1024 descriptors is far below a cluster's.
        "LimitNOFILE=65536\n"
        # Its store, keys and logs are the control plane's own.
        "UMask=0077\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def ensure_server_unit(
    paths: Paths,
    cfg: ServerConfig,
    systemd: Systemd | None = None,
    *,
    unit_dir: Path = SYSTEM_UNIT_DIR,
) -> ServerUnitStep:
    """The control plane's unit written when it differs, then enabled where that is ours to do."""
    return _ensure_unit(
        paths, SERVER_UNIT_NAME, server_unit_text(paths, cfg), "server_unit", systemd, unit_dir
    )


def ensure_agent_unit(
    paths: Paths, systemd: Systemd | None = None, *, unit_dir: Path = SYSTEM_UNIT_DIR
) -> ServerUnitStep:
    """This machine's agent's unit (``server init --node``), as the control plane's."""
    return _ensure_unit(
        paths, AGENT_UNIT_NAME, agent_unit_text(paths), "agent_unit", systemd, unit_dir
    )


def _ensure_unit(
    paths: Paths,
    name: str,
    text: str,
    item: Literal["server_unit", "agent_unit"],
    systemd: Systemd | None,
    unit_dir: Path,
) -> ServerUnitStep:
    unit = server_unit_path(paths, unit_dir, name)
    have = unit.read_text() if unit.exists() else None
    if have != text:
        write_atomic(unit, text, mode=0o644)
    action = "kept" if have == text else ("rewritten" if have is not None else "created")
    step = ServerUnitStep(item=item, path=str(unit), action=action, enabled=False)
    enable = f"systemctl enable {name}"
    if paths.home is not None:
        # Not the machine's: a unit under LLMGW_HOME is enabled only if its owner says so.
        step.to_run = f"systemctl link {unit} && {enable}"
        return step
    systemd = systemd or Systemd.here()
    if not systemd.booted:
        step.to_run = f"systemctl daemon-reload && {enable}"
        step.reason = "no systemd running here"
        return step
    if action != "kept":
        reload = systemd.run("daemon-reload")
        if not reload.ok:
            step.to_run = f"systemctl daemon-reload && {enable}"
            step.reason = f"systemctl daemon-reload failed: {reload.output[-300:]}"
            return step
    ran = systemd.run("enable", name)
    if ran.ok:
        step.enabled = True
    else:
        step.to_run = enable
        step.reason = f"systemctl enable failed: {ran.output[-300:]}"
    return step
