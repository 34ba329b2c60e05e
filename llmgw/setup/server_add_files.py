"""What ``llmgw server add`` carries to a new control plane, and where it goes there.

Every control plane of a cluster holds the same CA (it issues node
certificates), the same admin token, engine key, MCP seal key and mirror
tokens — anything under the secrets dir — and reaches the same PostgreSQL
store. Each has its own server certificate, for the names agents and
clients reach it by, and its own server.yaml: this one's, with the store read
from a 0600 file (``store.dsn_file``, never inline: a DSN may hold a
password), the machine's advertised name, and the setup section emptied (the
cluster is set up already). Pure apart from reading this machine's files.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from llmgw.config import ServerConfig, ServerPki, SetupConfig, StoreConfig, split_host_port
from llmgw.errors import PkiError
from llmgw.onboard.layout import NodeLayout
from llmgw.onboard.mirror_source import for_node
from llmgw.paths import ENV_HOME, Paths
from llmgw.setup.cluster_init import RENEW_BEFORE, STORE_DSN_FILE
from llmgw.setup.server_unit import SERVER_UNIT_NAME, server_unit_path
from llmgw.tls import pki

# gatewayd's own names for the secrets it makes on first use (gatewayd/server.py,
# gatewayd/mcp/seal.py) and for the id it keeps (gatewayd/cluster/identity.py):
# llmgw's core may not import the daemon, so they are named again here.
ENGINE_KEY_FILE = "engine-key"
SEAL_KEY_FILE = "mcp-seal.key"
SEAL_KEY_BYTES = 32
CONTROL_PLANE_ID_FILE = "control-plane-id"
# A control plane id, as gatewayd makes them: its host's name and a random suffix.
ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


@dataclass(frozen=True)
class ServerLayout:
    """Every path ``server add`` writes on the new control plane.

    The node layout's venv and paths (the system layout, or all of it under
    an install root), with the control plane's unit, pidfile and log.
    """

    node: NodeLayout

    @classmethod
    def for_root(cls, install_root: str = "") -> ServerLayout:
        return cls(NodeLayout.for_root(install_root))

    @property
    def paths(self) -> Paths:
        return self.node.paths

    @property
    def llmgw(self) -> str:
        return self.node.llmgw

    @property
    def unit_file(self) -> str:
        return str(server_unit_path(self.paths))

    @property
    def unit_name(self) -> str:
        return SERVER_UNIT_NAME

    @property
    def pidfile(self) -> str:
        # The one `llmgw server` writes itself, so `llmgw stop` there finds it.
        return str(self.paths.server_pid_file)

    @property
    def log_file(self) -> str:
        # The one `llmgw start` there appends to without systemd (llmgw/setup/services.py).
        return str(self.paths.log_dir / "gatewayd.log")

    @property
    def dsn_file(self) -> str:
        return str(self.paths.secrets_dir / STORE_DSN_FILE)

    @property
    def id_file(self) -> str:
        return str(self.paths.server_data_dir / CONTROL_PLANE_ID_FILE)

    @property
    def env(self) -> dict[str, str]:
        root = self.node.install_root
        return {ENV_HOME: root} if root else {}


@dataclass(frozen=True)
class Carried:
    """One file for the new control plane: its bytes, where it goes, its mode."""

    data: bytes
    dest: str
    mode: int

    @property
    def name(self) -> str:
        return PurePosixPath(self.dest).name


def ensure_shared_secrets(paths: Paths) -> list[str]:
    """Make here the secrets gatewayd makes on first use, when missing; their names.

    A control plane that made its own engine key or seal key would hold one
    the others do not: engines started by one would refuse the others' calls,
    and credentials one sealed would not open on the others. Made the way
    gatewayd makes them (a link, never a rename, so a key another process
    wrote a moment ago is never replaced).
    """
    made = []
    for name, data in (
        (ENGINE_KEY_FILE, (secrets.token_urlsafe(32) + "\n").encode()),
        (SEAL_KEY_FILE, os.urandom(SEAL_KEY_BYTES)),
    ):
        path = paths.secrets_dir / name
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=path.parent)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
                made.append(name)
            except FileExistsError:
                pass
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return made


def secret_files(paths: Paths) -> dict[str, bytes]:
    """Every secret in this control plane's secrets dir by name, the store DSN aside.

    The DSN is written for the new machine on its own (it may reach the store
    by another address). Hidden files are a write in progress, never a secret.
    """
    out: dict[str, bytes] = {}
    for f in sorted(paths.secrets_dir.iterdir()):
        if f.name.startswith(".") or f.name == STORE_DSN_FILE or not f.is_file():
            continue
        out[f.name] = f.read_bytes()
    return out


def remote_server_config(
    cfg: ServerConfig, layout: ServerLayout, *, advertise: str, this_plane: str
) -> tuple[ServerConfig, dict[str, bytes]]:
    """The new control plane's server.yaml, and the files it names beyond the secrets dir.

    ``this_plane``: HOST:PORT the new machine reaches this one at, so a mirror
    this machine serves on loopback is named by an address it reaches.
    """
    listen = cfg.listen.model_copy(
        update={
            name: f"{host}:{split_host_port(getattr(cfg.listen, name))[1]}"
            for name, host in (("agent", "0.0.0.0"), ("http", "0.0.0.0"), ("metrics", "0.0.0.0"))
        }
    )
    extra: dict[str, bytes] = {}
    mirror = cfg.mirror.model_copy(
        update={"urls": [for_node(u, this_plane) for u in cfg.mirror.urls]}
    )
    for field in ("read_token_file", "admin_token_file"):
        local = getattr(mirror, field)
        if local:
            name = Path(local).name
            extra[name] = Path(local).read_bytes()
            mirror = mirror.model_copy(update={field: str(layout.paths.secrets_dir / name)})
    new = cfg.model_copy(
        update={
            "listen": listen,
            "store": StoreConfig(dsn_file=layout.dsn_file),
            # Empty: the layout's defaults, which follow the install root.
            "pki": ServerPki(),
            "cluster": cfg.cluster.model_copy(update={"advertise_host": advertise}),
            # The cluster is set up: no agent beside it, no starter, no first project.
            "setup": SetupConfig(node=False, starter=False, project=""),
            "mirror": mirror,
        }
    )
    return ServerConfig.model_validate(new.model_dump()), extra


def sound_server_cert(cert_pem: bytes, ca: pki.CertKey, hosts: list[str]) -> str:
    """Why the new machine's server certificate must be issued again, or "" when it is sound."""
    try:
        if not pki.issued_by(cert_pem, ca.cert_pem):
            return "it was signed by another CA"
        if set(pki.cert_hosts(cert_pem)) != set(pki.server_hosts(hosts)):
            return "it names other hosts"
        if pki.cert_not_after(cert_pem) - dt.datetime.now(dt.UTC) < RENEW_BEFORE:
            return "it expires within 30 days"
    except (PkiError, ValueError) as e:
        return str(e)
    return ""


def new_control_plane_id(hostname: str) -> str:
    """An id for the new control plane, shaped as gatewayd makes its own."""
    host = re.sub(r"[^a-z0-9-]+", "-", hostname.lower()).strip("-")[:40] or "cp"
    return f"{host}-{secrets.token_hex(3)}"
