"""The gateway port's part of ``server init``: its TLS certificate and the proxies it trusts.

``--http-tls`` issues :8080 a certificate from the cluster CA for this
machine's names (<pki>/http.crt, http.key; kept while sound and naming them);
``--http-cert/--http-key`` take the operator's own. ``--trusted-proxy`` and
``--proxy-protocol`` name the proxies in front of it (gatewayd/http/proxied.py).
All of it lands in server.yaml's ``http:`` section.
"""

from __future__ import annotations

import socket
from pathlib import Path

from pydantic import BaseModel, ValidationError

from llmgw.config import HttpConfig, dump_yaml, load_server_config
from llmgw.errors import UsageError
from llmgw.fsutil import write_atomic
from llmgw.paths import Paths
from llmgw.setup.cluster_init import ensure_named_leaf, load_ca
from llmgw.tls import pki


class HttpStep(BaseModel):
    """One thing ``server init`` did for the gateway port."""

    item: str  # "http_cert" | "http_yaml"
    path: str
    action: str  # created | reissued | kept | set
    reason: str = ""


def http_cert_paths(paths: Paths) -> tuple[Path, Path]:
    return paths.pki_dir / "http.crt", paths.pki_dir / "http.key"


def this_machines_hosts(paths: Paths) -> list[str]:
    """The names :8080 is reached by: the server certificate's (``--host``) and the hostname."""
    hosts: list[str] = []
    if paths.server_cert.exists():
        hosts += pki.cert_hosts(paths.server_cert.read_bytes())
    for name in (socket.gethostname(), socket.getfqdn()):
        try:
            hosts.append(pki.normalise_host(name))
        except ValueError:
            continue  # a hostname no certificate can name
    return list(dict.fromkeys(hosts))


def ensure_http_cert(paths: Paths, hosts: list[str]) -> HttpStep:
    """<pki>/http.crt and http.key from the cluster CA, kept while sound and naming ``hosts``."""
    crt, key = http_cert_paths(paths)
    action, reason = ensure_named_leaf(crt, key, load_ca(paths), hosts, pki.issue_server_cert)
    return HttpStep(item="http_cert", path=str(crt), action=action, reason=reason)


def check_http_flags(
    *,
    tls: bool,
    cert: str,
    key: str,
    trusted_proxies: list[str],
    proxy_protocol: bool,
) -> HttpConfig | None:
    """The ``http:`` section the flags ask for (None: no flag given), refused before anything
    is written where the flags do not go together or an entry is bad."""
    if tls and (cert or key):
        raise UsageError(
            "--http-tls issues a certificate; --http-cert/--http-key bring one: give one of them"
        )
    if bool(cert) != bool(key):
        raise UsageError("--http-cert and --http-key go together: give both")
    for f, flag in ((cert, "--http-cert"), (key, "--http-key")):
        if f and not Path(f).is_file():
            raise UsageError(f"{flag} {f}: no such file")
    if not (tls or cert or trusted_proxies or proxy_protocol):
        return None
    try:
        return HttpConfig(
            # A stand-in while the certificate is issued: checked for the pairing rules.
            tls_cert=str(Path(cert).resolve()) if cert else ("-" if tls else ""),
            tls_key=str(Path(key).resolve()) if key else ("-" if tls else ""),
            trusted_proxies=trusted_proxies,
            proxy_protocol=proxy_protocol,
        )
    except ValidationError as e:
        words = "; ".join(err["msg"].removeprefix("Value error, ") for err in e.errors())
        raise UsageError(
            words.replace("http.proxy_protocol", "--proxy-protocol")
            .replace("http.trusted_proxies", "--trusted-proxy")
            .replace("trusted_proxies:", "--trusted-proxy")
            .replace("http.tls_cert", "--http-tls/--http-cert")
        ) from e


def init_http(paths: Paths, wanted: HttpConfig, *, issue: bool) -> list[HttpStep]:
    """Write ``wanted`` into server.yaml's ``http:``, issuing the certificate first if asked."""
    steps: list[HttpStep] = []
    http = wanted.model_copy()
    if issue:
        step = ensure_http_cert(paths, this_machines_hosts(paths))
        steps.append(step)
        crt, key = http_cert_paths(paths)
        http = HttpConfig(
            tls_cert=str(crt),
            tls_key=str(key),
            trusted_proxies=wanted.trusted_proxies,
            proxy_protocol=wanted.proxy_protocol,
        )
    cfg = load_server_config(paths.server_yaml)
    if cfg.http != http:
        cfg.http = http
        write_atomic(paths.server_yaml, dump_yaml(cfg), mode=0o644)
        steps.append(HttpStep(item="http_yaml", path=str(paths.server_yaml), action="set"))
    else:
        steps.append(HttpStep(item="http_yaml", path=str(paths.server_yaml), action="kept"))
    return steps
