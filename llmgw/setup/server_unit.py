"""The control plane's service unit: llmgw-server.service, written and enabled by ``server init``.

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
from llmgw.paths import ENV_HOME, Paths
from llmgw.setup.mirror_init import SYSTEM_UNIT_DIR, llmgw_program
from llmgw.setup.systemd import Systemd

SERVER_UNIT_NAME = "llmgw-server.service"
_LOCAL_HOSTS = ("", "localhost", "127.0.0.1", "::1")


class ServerUnitStep(BaseModel):
    """What ``server init`` did with the control plane's unit, for people and ``--json``."""

    item: Literal["server_unit"] = "server_unit"
    path: str
    action: Literal["created", "kept", "rewritten"]
    enabled: bool
    # Said when it was not enabled here: the commands that would do it.
    to_run: str = ""
    reason: str = ""


def server_unit_path(paths: Paths, unit_dir: Path = SYSTEM_UNIT_DIR) -> Path:
    if paths.home is None:
        return unit_dir / SERVER_UNIT_NAME
    return paths.config_dir / "systemd" / SERVER_UNIT_NAME


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
    """Write the unit when it differs, then enable it where that is this command's to do."""
    unit = server_unit_path(paths, unit_dir)
    text = server_unit_text(paths, cfg)
    have = unit.read_text() if unit.exists() else None
    if have != text:
        write_atomic(unit, text, mode=0o644)
    action = "kept" if have == text else ("rewritten" if have is not None else "created")
    step = ServerUnitStep(path=str(unit), action=action, enabled=False)
    enable = f"systemctl enable {SERVER_UNIT_NAME}"
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
    ran = systemd.run("enable", SERVER_UNIT_NAME)
    if ran.ok:
        step.enabled = True
    else:
        step.to_run = enable
        step.reason = f"systemctl enable failed: {ran.output[-300:]}"
    return step
