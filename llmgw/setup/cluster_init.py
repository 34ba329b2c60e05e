"""Setting a control plane up (``llmgw server init``) and issuing node bundles (``llmgw node cert``).

Everything here may be run again: what exists and is sound is kept, and the
result says so. The CA is never replaced: every node trusts it, and a new one
would cut them all off, so a CA in any doubtful state is refused with the way out.
"""

from __future__ import annotations

import datetime as dt
import getpass
import logging
import os
import secrets
import socket
import stat
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError, computed_field

from llmgw.config import (
    DEFAULT_AGENT_PORT,
    AgentConfig,
    AgentPki,
    ListenConfig,
    ServerConfig,
    StoreConfig,
    check_name,
    dump_yaml,
    load_agent_config,
    load_server_config,
    split_host_port,
)
from llmgw.errors import LlmgwError, PkiError, UsageError
from llmgw.fsutil import write_atomic, write_secret
from llmgw.paths import Paths
from llmgw.tls import pki

log = logging.getLogger(__name__)

# A certificate this close to its end is issued again on the next run rather
# than left to expire between two runs.
RENEW_BEFORE = dt.timedelta(days=30)
# The PostgreSQL DSN may carry a password: it goes to a 0600 file, never into server.yaml.
STORE_DSN_FILE = "store-dsn"
PORT_KEYS = ("agent", "admin", "http", "metrics")
_LISTEN_HOSTS = {"agent": "0.0.0.0", "admin": "127.0.0.1", "http": "0.0.0.0", "metrics": "0.0.0.0"}

Item = Literal["ca", "server_cert", "admin_token", "server_yaml", "store_dsn"]
Action = Literal["created", "kept", "reissued", "rewritten"]


class InitStep(BaseModel):
    """One file ``server init`` looked after, and what it did with it."""

    item: Item
    path: str
    action: Action
    reason: str = ""


class InitResult(BaseModel):
    """What ``llmgw server init`` did, for people and for ``--json``."""

    cluster_name: str
    config_dir: str
    ca_cert: str
    ca_fingerprint_sha256: str
    server_cert: str
    server_key: str
    server_hosts: list[str]
    admin_token_file: str
    server_yaml: str
    steps: list[InitStep]
    # Things worth knowing that changed nothing, e.g. flags not applied.
    notes: list[str] = []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def created(self) -> list[str]:
        return [s.item for s in self.steps if s.action != "kept"]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def kept(self) -> list[str]:
        return [s.item for s in self.steps if s.action == "kept"]


class NodeBundle(BaseModel):
    """A node's certificate, key and the cluster CA, and the agent.yaml that uses them."""

    node_id: str
    dir: str
    cert: str
    key: str
    ca_cert: str
    fingerprint_sha256: str
    not_after: dt.datetime
    agent_config: AgentConfig
    notes: list[str] = []


def init_server(
    paths: Paths,
    *,
    hosts: list[str],
    cluster_name: str = "llmgw",
    ports: dict[str, int] | None = None,
    store_dsn: str = "",
    force_config: bool = False,
) -> InitResult:
    """Create (or check and keep) the CA, server certificate, admin token and server.yaml."""
    _usage(check_name, cluster_name, what="cluster name")
    if hosts:
        _usage(pki.server_hosts, hosts)
    listen = _listen(ports or {})
    store = _usage(StoreConfig, dsn=store_dsn)

    paths.config_dir.mkdir(parents=True, exist_ok=True)
    _private_dir(paths.pki_dir)
    _private_dir(paths.secrets_dir)

    steps: list[InitStep] = []
    notes: list[str] = []
    ca, step = _ensure_ca(paths, cluster_name)
    steps.append(step)
    server, step = _ensure_server_cert(paths, ca, hosts)
    steps.append(step)
    if step.action == "reissued":
        notes.append("the server certificate changed: restart llmgw server if it runs")
    steps.append(_ensure_admin_token(paths))
    steps.extend(
        _ensure_server_yaml(
            paths,
            cluster_name,
            listen,
            store,
            force_config,
            notes,
            flags_given=bool(ports) or bool(store_dsn),
        )
    )
    return InitResult(
        cluster_name=cluster_name,
        config_dir=str(paths.config_dir),
        ca_cert=str(paths.ca_cert),
        ca_fingerprint_sha256=pki.fingerprint_sha256(ca.cert_pem),
        server_cert=str(paths.server_cert),
        server_key=str(paths.server_key),
        server_hosts=pki.cert_hosts(server.cert_pem),
        admin_token_file=str(paths.admin_token_file),
        server_yaml=str(paths.server_yaml),
        steps=steps,
        notes=notes,
    )


def issue_node_bundle(paths: Paths, node_id: str, *, control_planes: list[str]) -> NodeBundle:
    """Sign a certificate for ``node_id`` into ``node_certs_dir/<node_id>/`` with the CA beside it.

    Running it again issues a fresh certificate (that is how a node's is renewed).
    """
    _usage(check_name, node_id, what="node id")
    ca = load_ca(paths)
    planes = control_planes or _default_control_planes(paths)
    bundle_dir = paths.node_certs_dir / node_id
    cert_path, key_path = bundle_dir / "node.crt", bundle_dir / "node.key"
    ca_path = bundle_dir / "ca.crt"
    cfg = _usage(
        AgentConfig,
        node_id=node_id,
        control_planes=planes,
        pki=AgentPki(ca_cert=str(ca_path), cert=str(cert_path), key=str(key_path)),
    )
    node = pki.issue_node_cert(ca, node_id)
    _private_dir(paths.node_certs_dir)
    _private_dir(bundle_dir)
    write_secret(key_path, node.key_pem)
    write_atomic(cert_path, node.cert_pem, mode=0o644)
    write_atomic(ca_path, ca.cert_pem, mode=0o644)
    return NodeBundle(
        node_id=node_id,
        dir=str(bundle_dir),
        cert=str(cert_path),
        key=str(key_path),
        ca_cert=str(ca_path),
        fingerprint_sha256=pki.fingerprint_sha256(node.cert_pem),
        not_after=pki.cert_not_after(node.cert_pem),
        agent_config=cfg,
        notes=_unnamed_planes(paths, cfg.control_planes),
    )


def local_engine_user(euid: int | None = None, user: str | None = None) -> str:
    """Who the local node's engines run as: whoever runs `llmgw up`, never root.

    Under `sudo llmgw server init --node` that would be root: left empty
    instead, so the agent runs its engines as llmgw-engine.
    """
    euid = os.geteuid() if euid is None else euid
    return "" if euid == 0 else (user or getpass.getuser())


def write_local_agent(paths: Paths, node_id: str, control_planes: list[str]) -> Path:
    """agent.yaml and a node certificate in pki_dir for the agent ``llmgw up`` runs here.

    An existing agent.yaml is kept as it is (its node id and paths win); only
    a certificate it names that is missing or no longer sound is issued again.
    """
    ca = load_ca(paths)
    if paths.agent_yaml.exists():
        cfg = load_agent_config(paths.agent_yaml)
    else:
        _usage(check_name, node_id, what="node id")
        cfg = _usage(
            AgentConfig,
            node_id=node_id,
            control_planes=control_planes,
            pki=AgentPki(
                ca_cert=str(paths.ca_cert),
                cert=str(paths.pki_dir / "node.crt"),
                key=str(paths.pki_dir / "node.key"),
            ),
            engine_user=local_engine_user(),
        )
    cert_path = Path(cfg.pki.cert or paths.pki_dir / "node.crt")
    key_path = Path(cfg.pki.key or paths.pki_dir / "node.key")
    if _leaf_problem(cert_path, key_path, ca, common_name=cfg.node_id):
        node = pki.issue_node_cert(ca, cfg.node_id)
        write_secret(key_path, node.key_pem)
        write_atomic(cert_path, node.cert_pem, mode=0o644)
    if not paths.agent_yaml.exists():
        write_atomic(paths.agent_yaml, dump_yaml(cfg), mode=0o644)
    return paths.agent_yaml


def load_ca(paths: Paths) -> pki.CertKey:
    """The cluster CA, checked: both halves present and belonging together."""
    crt, key = paths.ca_cert, paths.ca_key
    if not crt.exists() and not key.exists():
        raise PkiError(
            f"there is no cluster CA at {crt}",
            hint="create it on the control plane with: llmgw server init",
        )
    if not key.exists():
        raise PkiError(
            f"{crt} exists but its key {key} is missing",
            hint=(
                f"restore {key.name} from a backup. A new CA cuts off every node: only if that "
                f"is meant, move {crt.name} away and run llmgw server init, then issue every "
                "node's certificate again"
            ),
        )
    if not crt.exists():
        raise PkiError(
            f"{key} exists but the CA certificate {crt} is missing",
            hint=f"restore {crt.name} from a backup, or from any node's ca.crt",
        )
    return pki.load_cert_key(crt, key)


# --- steps of init_server ----------------------------------------------------


def _ensure_ca(paths: Paths, cluster_name: str) -> tuple[pki.CertKey, InitStep]:
    if paths.ca_cert.exists() or paths.ca_key.exists():
        ca = load_ca(paths)
        _tighten(paths.ca_key)
        cn = pki.cert_common_name(ca.cert_pem)
        return ca, InitStep(
            item="ca",
            path=str(paths.ca_cert),
            action="kept",
            reason=f"{cn}; never replaced, every node trusts it",
        )
    ca = pki.create_ca(cluster_name)
    # Key first: a run cut short leaves a key without a certificate, which
    # load_ca refuses rather than pairing it with a fresh certificate.
    write_secret(paths.ca_key, ca.key_pem)
    write_atomic(paths.ca_cert, ca.cert_pem, mode=0o644)
    return ca, InitStep(item="ca", path=str(paths.ca_cert), action="created")


def _ensure_server_cert(
    paths: Paths, ca: pki.CertKey, hosts: list[str]
) -> tuple[pki.CertKey, InitStep]:
    crt, key = paths.server_cert, paths.server_key
    problem = _leaf_problem(crt, key, ca)
    if not problem and hosts:
        have = pki.cert_hosts(crt.read_bytes())
        want = pki.server_hosts(hosts)
        if set(have) != set(want):
            added = [h for h in want if h not in have]
            removed = [h for h in have if h not in want]
            problem = "hosts changed: " + "; ".join(
                f"{word} {', '.join(hs)}"
                for word, hs in (("added", added), ("removed", removed))
                if hs
            )
    if not problem:
        _tighten(key)
        return pki.load_cert_key(crt, key), InitStep(
            item="server_cert", path=str(crt), action="kept"
        )
    first = not crt.exists()
    # Without --host: the hosts of the certificate being replaced, or on a first
    # run this machine's name, the best guess at what nodes will dial.
    server = pki.issue_server_cert(ca, hosts or _hosts_of(crt) or _this_host())
    write_secret(key, server.key_pem)
    write_atomic(crt, server.cert_pem, mode=0o644)
    return server, InitStep(
        item="server_cert",
        path=str(crt),
        action="created" if first else "reissued",
        reason="" if first else problem,
    )


def _ensure_admin_token(paths: Paths) -> InitStep:
    f = paths.admin_token_file
    try:
        present = bool(f.read_text().strip())
    except FileNotFoundError:
        present = False
    if present:
        _tighten(f)
        return InitStep(item="admin_token", path=str(f), action="kept")
    # 32 bytes (256 bits) from the OS's generator, URL-safe so it travels in a header.
    write_secret(f, secrets.token_urlsafe(32))
    return InitStep(item="admin_token", path=str(f), action="created")


def _ensure_server_yaml(
    paths: Paths,
    cluster_name: str,
    listen: ListenConfig,
    store: StoreConfig,
    force: bool,
    notes: list[str],
    *,
    flags_given: bool,
) -> list[InitStep]:
    f = paths.server_yaml
    existed = f.exists()
    if existed and not force:
        load_server_config(f)  # a broken file is reported now, not when the server starts
        if flags_given:
            notes.append(
                f"{f} exists, so the port and store flags were not applied; "
                "--force-config writes it again from the flags"
            )
        return [InitStep(item="server_yaml", path=str(f), action="kept")]
    steps: list[InitStep] = []
    if store.dsn.startswith(("postgresql://", "postgres://")):
        dsn_file = paths.secrets_dir / STORE_DSN_FILE
        write_secret(dsn_file, store.dsn)
        store = StoreConfig(dsn_file=str(dsn_file))
        steps.append(InitStep(item="store_dsn", path=str(dsn_file), action="created"))
    # pki paths are left empty: the layout's defaults follow LLMGW_HOME if it moves.
    cfg = ServerConfig(cluster_name=cluster_name, listen=listen, store=store)
    write_atomic(f, dump_yaml(cfg), mode=0o644)
    steps.insert(
        0, InitStep(item="server_yaml", path=str(f), action="rewritten" if existed else "created")
    )
    return steps


# --- helpers -------------------------------------------------------------------


def _listen(ports: dict[str, int]) -> ListenConfig:
    unknown = sorted(set(ports) - set(PORT_KEYS))
    if unknown:
        raise UsageError(f"unknown port {', '.join(unknown)}; ports are {', '.join(PORT_KEYS)}")
    fields: dict[str, str] = {}
    for name, port in ports.items():
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise UsageError(f"{name} port {port!r} is not a port number (1-65535)")
        fields[name] = f"{_LISTEN_HOSTS[name]}:{port}"
    return _usage(ListenConfig, **fields)


def _leaf_problem(crt: Path, key: Path, ca: pki.CertKey, *, common_name: str | None = None) -> str:
    """Why the certificate at ``crt`` must be issued again, or "" when it is sound."""
    if not crt.exists():
        return f"{crt.name} is missing"
    if not key.exists():
        return f"{key.name} is missing"
    try:
        pair = pki.load_cert_key(crt, key)
        if not pki.issued_by(pair.cert_pem, ca.cert_pem):
            return "it was signed by another CA"
        if common_name is not None and pki.cert_common_name(pair.cert_pem) != common_name:
            return f"it was issued to another name than {common_name}"
        if pki.cert_not_after(pair.cert_pem) - dt.datetime.now(dt.UTC) < RENEW_BEFORE:
            return "it expires within 30 days"
    except PkiError as e:
        return e.message
    return ""


def ensure_named_leaf(
    crt: Path, key: Path, ca: pki.CertKey, hosts: list[str], issue
) -> tuple[str, str]:
    """A leaf certificate at ``crt``/``key`` from ``ca``, kept while sound and naming
    ``hosts``, else issued again by ``issue(ca, hosts)``; (created | reissued | kept, why)."""
    problem = _leaf_problem(crt, key, ca)
    if not problem:
        lacking = [h for h in pki.server_hosts(hosts) if h not in pki.cert_hosts(crt.read_bytes())]
        if lacking:
            problem = f"it does not name {', '.join(lacking)}"
    if not problem:
        return "kept", ""
    first = not crt.exists()
    issued = issue(ca, hosts)
    write_secret(key, issued.key_pem)
    write_atomic(crt, issued.cert_pem, mode=0o644)
    return ("created", "") if first else ("reissued", problem)


def _default_control_planes(paths: Paths) -> list[str]:
    """``HOST:PORT`` from the server certificate's first outside name and server.yaml's port."""
    port = DEFAULT_AGENT_PORT
    if paths.server_yaml.exists():
        port = split_host_port(load_server_config(paths.server_yaml).listen.agent)[1]
    hosts = pki.cert_hosts(paths.server_cert.read_bytes()) if paths.server_cert.exists() else []
    outside = [h for h in hosts if h not in pki.LOOPBACK_HOSTS]
    if not outside:
        raise UsageError(
            "no address for nodes to dial is known",
            hint="give it: --control-plane HOST:PORT (the server certificate must name HOST)",
        )
    host = outside[0]
    return [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]


def _unnamed_planes(paths: Paths, planes: list[str]) -> list[str]:
    """Warnings for control plane hosts the server certificate does not name."""
    if not paths.server_cert.exists():
        return []
    named = set(pki.cert_hosts(paths.server_cert.read_bytes()))
    notes = []
    for addr in planes:
        host = split_host_port(addr)[0]
        try:
            host = pki.normalise_host(host)
        except ValueError:
            pass
        if host not in named:
            notes.append(
                f"the server certificate does not name {host}, so a node dialing {addr} "
                f"will refuse it; add it with: llmgw server init --host {host} (with the others)"
            )
    return notes


def _hosts_of(crt: Path) -> list[str]:
    try:
        return pki.cert_hosts(crt.read_bytes())
    except (OSError, PkiError):
        return []


def _this_host() -> list[str]:
    try:
        return [pki.normalise_host(socket.gethostname())]
    except ValueError:
        return []


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        os.chmod(path, 0o700)


def _tighten(path: Path) -> None:
    """A secret someone made readable to others is put back to 0600."""
    if path.exists() and stat.S_IMODE(path.stat().st_mode) & 0o077:
        log.warning("%s was readable by others; set to 0600", path)
        os.chmod(path, 0o600)


def _usage(fn, *args, **kwargs):
    """Call ``fn``; a ValueError or a ValidationError from it is bad input → UsageError."""
    try:
        return fn(*args, **kwargs)
    except LlmgwError:
        raise
    except ValidationError as e:
        msg = "; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors())
        raise UsageError(msg) from e
    except ValueError as e:
        raise UsageError(str(e)) from e
