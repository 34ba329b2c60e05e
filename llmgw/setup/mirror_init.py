"""Setting a model mirror up on this machine: ``server init --mirror`` and ``llmgw up --mirror``.

What a mirror needs beside its daemon: mirror.yaml, the read token nodes and
peers present and an admin token of its own (0600 secrets; never the
cluster's admin token), a server certificate from the cluster CA (HTTPS is
the default; ``--mirror-plain-http`` is the way out, for a mirror behind a
TLS proxy), server.yaml's ``mirror.urls`` naming it so the cluster uses it,
and a systemd unit (llmgw-mirror.service) to run it. As with ``server
init``, what exists and is sound is kept: a token is never replaced (every
node holds the read one), a mirror.yaml already there is not rewritten, a
certificate is issued again only when it is missing, not the CA's, near its
end or short of a name the cluster dials. ``issue_mirror_bundle`` is ``llmgw
mirror cert``: a certificate for a mirror on another machine. Pure of
daemons: ``llmgw mirror serve`` runs what this writes.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import socket
import sys
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ValidationError

from llmgw.config import dump_yaml, load_server_config, split_host_port
from llmgw.errors import PkiError, UsageError
from llmgw.fsutil import write_atomic, write_secret
from llmgw.mirror.config import (
    DEFAULT_MIRROR_PORT,
    MirrorServeConfig,
    load_mirror_config,
    with_machine_tls,
)
from llmgw.paths import ENV_HOME, Paths
from llmgw.setup.cluster_init import ensure_named_leaf, load_ca
from llmgw.tls import pki

MIRROR_UNIT_NAME = "llmgw-mirror.service"
SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
DEFAULT_MIRROR_LISTEN = f"0.0.0.0:{DEFAULT_MIRROR_PORT}"
_ANY_HOSTS = ("0.0.0.0", "::", "")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGTP]?)(i?B?)", re.IGNORECASE)

MirrorItem = Literal["mirror_yaml", "read_token", "admin_token", "tls_cert", "mirror_urls", "unit"]
MirrorAction = Literal["created", "kept", "rewritten", "reissued", "added"]


class MirrorStep(BaseModel):
    """One thing ``--mirror`` looked after, and what it did with it."""

    item: MirrorItem
    path: str
    action: MirrorAction
    reason: str = ""


class MirrorInit(BaseModel):
    """What setting the mirror up did, for people and for ``--json``."""

    listen: str
    url: str
    mirror_yaml: str
    read_token_file: str
    admin_token_file: str
    # The certificate it serves HTTPS with; "" for a plain_http mirror.
    tls_cert: str
    unit_file: str
    data_dir: str
    steps: list[MirrorStep]


class MirrorBundle(BaseModel):
    """What ``llmgw mirror cert`` issued for a mirror on another machine."""

    dir: str
    cert: str
    key: str
    ca_cert: str
    hosts: list[str]
    fingerprint_sha256: str
    not_after: dt.datetime


def parse_bytes(text: str | int) -> int:
    """``100G``, ``1.5T``, ``500MiB`` or a plain number of bytes; UsageError otherwise.

    K, M, G, T are powers of 1000; with an ``i`` (GiB) powers of 1024, as disks say.
    """
    if isinstance(text, int):
        return text
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise UsageError(
            f"{text!r} is not a size", hint="give bytes, or a number with K, M, G or T: 100G"
        )
    number, unit, suffix = m.groups()
    binary = suffix.lower().startswith("i")
    if binary and not unit:
        raise UsageError(f"{text!r} is not a size", hint="say KiB, MiB, GiB or TiB, or 100G")
    factor = (1024 if binary else 1000) ** " KMGTP".index(unit.upper() or " ")
    return int(float(number) * factor)


def bytes_text(n: int) -> str:
    """Bytes in the decimal units ``parse_bytes`` reads: 100000000000 → "100 GB"."""
    for unit, size in (("PB", 10**15), ("TB", 10**12), ("GB", 10**9), ("MB", 10**6)):
        if n >= size:
            return f"{n / size:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} bytes"


def mirror_url(listen: str, paths: Paths, *, scheme: str = "https") -> str:
    """The URL the cluster reaches a mirror listening on ``listen`` at.

    A mirror on every interface is reached at the name nodes dial the control
    plane by (the server certificate's first name that is not loopback), else
    at this machine's host name.
    """
    host, port = split_host_port(listen)
    if host in _ANY_HOSTS:
        host = _outside_name(paths) or socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def _outside_name(paths: Paths) -> str:
    try:
        hosts = pki.cert_hosts(paths.server_cert.read_bytes())
    except (OSError, ValueError, PkiError):  # init reports a broken certificate itself
        return ""
    outside = [h for h in hosts if h not in pki.LOOPBACK_HOSTS]
    return outside[0] if outside else ""


def ensure_read_token(paths: Paths, token_file: Path | None = None) -> MirrorStep:
    """The mirror's read token: kept when present (every node and peer holds it), else made."""
    f = token_file or paths.mirror_read_token_file
    return MirrorStep(item="read_token", path=str(f), action=_ensure_token(f))


def ensure_admin_token(paths: Paths, token_file: Path | None = None) -> MirrorStep:
    """The mirror's admin token, its own: kept when present (the control plane holds it), else made.

    Guards: mirrors took the cluster's admin token, which opens the whole
    admin API, so anyone who read a mirror's config could run the cluster.
    """
    f = token_file or paths.mirror_admin_token_file
    return MirrorStep(item="admin_token", path=str(f), action=_ensure_token(f))


def _ensure_token(f: Path) -> MirrorAction:
    try:
        present = bool(f.read_text().strip())
    except FileNotFoundError:
        present = False
    if present:
        return "kept"
    # 32 bytes from the OS's generator, URL-safe: it travels in a header and in pip's index URL.
    write_secret(f, secrets.token_urlsafe(32))
    return "created"


def mirror_cert_hosts(paths: Paths, listen: str, url: str = "") -> list[str]:
    """The names the mirror's certificate must carry: the address it listens on, the one the
    cluster dials it at, and every name of the control plane's certificate (a mirror on
    every interface of this machine is reached by the names nodes reach this machine by)."""
    hosts: list[str] = []
    host, _ = split_host_port(listen)
    if host not in _ANY_HOSTS:
        hosts.append(host)
    if url:
        hosts.append(urlsplit(url).hostname or "")
    try:
        hosts += pki.cert_hosts(paths.server_cert.read_bytes())
    except (OSError, ValueError, PkiError):
        pass
    return pki.server_hosts([h for h in hosts if h])


def ensure_mirror_cert(paths: Paths, hosts: list[str]) -> MirrorStep:
    """<pki>/mirror.crt and mirror.key from the cluster CA, kept while sound and naming ``hosts``."""
    crt, key = paths.mirror_cert, paths.mirror_key
    action, reason = ensure_named_leaf(crt, key, load_ca(paths), hosts, pki.issue_mirror_cert)
    return MirrorStep(item="tls_cert", path=str(crt), action=action, reason=reason)


def issue_mirror_bundle(paths: Paths, hosts: list[str]) -> MirrorBundle:
    """A certificate for a mirror on another machine, in ``mirror_certs_dir/<host>/`` with the
    CA beside it (``llmgw mirror cert``). Running it again issues a fresh one."""
    if not hosts:
        raise UsageError(
            "say which names the mirror is reached by",
            hint="give --host NAME (repeat for each name or address nodes dial it at)",
        )
    ca = load_ca(paths)
    issued = pki.issue_mirror_cert(ca, hosts)
    names = pki.cert_hosts(issued.cert_pem)
    folder = paths.mirror_certs_dir / names[0]
    cert, key, ca_path = folder / "mirror.crt", folder / "mirror.key", folder / "ca.crt"
    for d in (paths.mirror_certs_dir, folder):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_secret(key, issued.key_pem)
    write_atomic(cert, issued.cert_pem, mode=0o644)
    write_atomic(ca_path, ca.cert_pem, mode=0o644)
    return MirrorBundle(
        dir=str(folder),
        cert=str(cert),
        key=str(key),
        ca_cert=str(ca_path),
        hosts=names,
        fingerprint_sha256=pki.fingerprint_sha256(issued.cert_pem),
        not_after=pki.cert_not_after(issued.cert_pem),
    )


def llmgw_program() -> list[str]:
    """How a unit starts this very llmgw: its script beside the interpreter, else ``-m``."""
    script = Path(sys.executable).parent / "llmgw"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "llmgw"]


def unit_path(paths: Paths) -> Path:
    """/etc/systemd/system/llmgw-mirror.service; under LLMGW_HOME, beside its config
    (outside systemd's search path: ``systemctl link`` makes it known)."""
    if paths.home is None:
        return SYSTEM_UNIT_DIR / MIRROR_UNIT_NAME
    return paths.config_dir / "systemd" / MIRROR_UNIT_NAME


def unit_text(paths: Paths) -> str:
    env = f"Environment={ENV_HOME}={paths.home}\n" if paths.home is not None else ""
    argv = " ".join([*llmgw_program(), "mirror", "serve", "--config", str(paths.mirror_yaml)])
    return (
        "[Unit]\n"
        "Description=llmgw model mirror\n"
        "After=network-online.target\n"
        "Wants=network-online.target\n\n"
        "[Service]\n"
        f"ExecStart={argv}\n"
        f"{env}"
        "Restart=always\n"
        "RestartSec=5\n"
        # Blobs and tokens are the mirror's own; nothing it writes is for others.
        "UMask=0077\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def init_mirror(
    paths: Paths,
    *,
    listen: str = "",
    max_bytes: int | None = None,
    url: str = "",
    write_unit: bool = True,
    plain_http: bool = False,
    name_it: bool = True,
) -> MirrorInit:
    """mirror.yaml, its tokens and certificate, server.yaml's mirror.urls and the unit; each
    kept when sound.

    ``listen``, ``max_bytes`` and ``plain_http`` apply to a new mirror.yaml; on
    an existing one they are refused rather than silently dropped, unless they
    say what it says. ``url`` is what the cluster dials (default from ``listen``);
    ``name_it``: put it in server.yaml's mirror.urls (a mirror set up before is
    left where the operator named it).
    """
    steps: list[MirrorStep] = []
    cfg, step = _ensure_mirror_yaml(paths, listen, max_bytes, plain_http)
    steps.append(step)
    read_file = Path(cfg.read_token_file) if cfg.read_token_file else None
    admin_file = Path(cfg.admin_token_file) if cfg.admin_token_file else None
    steps.append(ensure_read_token(paths, read_file))
    steps.append(ensure_admin_token(paths, admin_file))
    url = url or mirror_url(cfg.listen, paths, scheme=cfg.scheme)
    tls = with_machine_tls(cfg, paths).tls
    if not cfg.plain_http and not cfg.tls.cert:
        # Ours to issue; a certificate mirror.yaml names is the operator's own.
        steps.append(ensure_mirror_cert(paths, mirror_cert_hosts(paths, cfg.listen, url)))
    if name_it and paths.server_yaml.exists():
        steps.append(_ensure_mirror_url(paths, url))
    unit = unit_path(paths)
    if write_unit:
        text = unit_text(paths)
        have = unit.read_text() if unit.exists() else None
        if have != text:
            write_atomic(unit, text, mode=0o644)
        action = "kept" if have == text else ("rewritten" if have is not None else "created")
        steps.append(MirrorStep(item="unit", path=str(unit), action=action))
    return MirrorInit(
        listen=cfg.listen,
        url=url,
        mirror_yaml=str(paths.mirror_yaml),
        read_token_file=str(read_file or paths.mirror_read_token_file),
        admin_token_file=str(admin_file or paths.mirror_admin_token_file),
        tls_cert=tls.cert,
        unit_file=str(unit) if write_unit else "",
        data_dir=cfg.data_dir or str(paths.mirror_data_dir),
        steps=steps,
    )


def _ensure_mirror_yaml(
    paths: Paths, listen: str, max_bytes: int | None, plain_http: bool = False
) -> tuple[MirrorServeConfig, MirrorStep]:
    f = paths.mirror_yaml
    if f.exists():
        cfg = load_mirror_config(f)  # a broken file is said now, not when the mirror starts
        differs = [
            flag
            for flag, given, have in (
                ("--mirror-listen", listen, cfg.listen),
                ("--mirror-max-bytes", max_bytes, cfg.max_bytes),
                ("--mirror-plain-http", plain_http or None, cfg.plain_http),
            )
            if given not in (None, "") and given != have
        ]
        reason = f"{', '.join(differs)} not applied: edit it" if differs else ""
        return cfg, MirrorStep(item="mirror_yaml", path=str(f), action="kept", reason=reason)
    fields: dict = {"listen": listen or DEFAULT_MIRROR_LISTEN}
    if max_bytes:
        fields["max_bytes"] = max_bytes
    if plain_http:
        fields["plain_http"] = True
    try:
        cfg = MirrorServeConfig(**fields)
    except ValidationError as e:
        msg = "; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors())
        raise UsageError(msg, hint="--mirror-listen takes HOST:PORT, e.g. 0.0.0.0:7080") from e
    # Only what differs from the defaults: a default that moves (data_dir under
    # LLMGW_HOME, the token files, the certificate) follows the machine's layout.
    data = cfg.model_dump(mode="json", exclude_defaults=True)
    data.setdefault("listen", cfg.listen)
    write_atomic(f, yaml.safe_dump(data, sort_keys=False), mode=0o644)
    return cfg, MirrorStep(item="mirror_yaml", path=str(f), action="created")


def _ensure_mirror_url(paths: Paths, url: str) -> MirrorStep:
    cfg = load_server_config(paths.server_yaml)
    if url in cfg.mirror.urls:
        return MirrorStep(item="mirror_urls", path=str(paths.server_yaml), action="kept")
    # Last: mirrors named before this one were put first on purpose.
    cfg.mirror.urls = [*cfg.mirror.urls, url]
    write_atomic(paths.server_yaml, dump_yaml(cfg), mode=0o644)
    return MirrorStep(item="mirror_urls", path=str(paths.server_yaml), action="added", reason=url)
