"""TLS contexts for the agent stream: mutual TLS, both sides pinned to the cluster CA.

gatewayd serves the agent gRPC port with ``server_context``; agentd dials it
with ``client_context``. Both offer only ``h2`` over ALPN, since grpclib speaks
nothing else, and refuse anything older than TLS 1.2.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llmgw.errors import PkiError

SERVER_HINT = "create them with: llmgw server init"
NODE_HINT = (
    "issue them on the control plane with: llmgw node cert NODE_ID, "
    "then copy node.crt, node.key and ca.crt to this node"
)


def server_context(ca_cert: Path, cert: Path, key: Path) -> ssl.SSLContext:
    """The control plane's side: its own certificate, and client certificates required."""
    _check_files(
        [(ca_cert, "CA certificate"), (cert, "certificate"), (key, "private key")], hint=SERVER_HINT
    )
    ctx = _context(ssl.Purpose.CLIENT_AUTH, ca_cert, cert, key, hint=SERVER_HINT)
    # An agent without a certificate signed by the cluster CA never gets as far
    # as the gRPC layer.
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(ca_cert: Path, cert: Path, key: Path) -> ssl.SSLContext:
    """A node's side: its own certificate, and the server's checked against the CA and name."""
    _check_files(
        [(ca_cert, "CA certificate"), (cert, "certificate"), (key, "private key")], hint=NODE_HINT
    )
    ctx = _context(ssl.Purpose.SERVER_AUTH, ca_cert, cert, key, hint=NODE_HINT)
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def peer_common_name(peercert: dict[str, Any] | None) -> str | None:
    """The CN of a peer certificate as ``SSLSocket.getpeercert()`` gives it, or None.

    grpclib hands the same dict out as ``stream.peer.cert()``; its subject is
    a tuple of RDNs, each a tuple of ``(name, value)`` pairs.
    """
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for pair in _pairs(rdn):
            if pair[0] == "commonName":
                return str(pair[1])
    return None


def _pairs(rdn: Iterable[Any]) -> Iterable[tuple[Any, Any]]:
    for item in rdn:
        if isinstance(item, tuple) and len(item) == 2:
            yield item


def _context(
    purpose: ssl.Purpose, ca_cert: Path, cert: Path, key: Path, *, hint: str
) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(purpose, cafile=str(ca_cert))
    except (ssl.SSLError, OSError) as e:
        raise PkiError(f"CA certificate {ca_cert} cannot be loaded: {_reason(e)}", hint=hint) from e
    try:
        ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
    except (ssl.SSLError, OSError) as e:
        raise PkiError(
            f"certificate {cert} with key {key} cannot be loaded: {_reason(e)}", hint=hint
        ) from e
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # Python 3.13 verifies strictly by default; doing so everywhere means a
    # certificate accepted here is accepted on every Python a node may run.
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    ctx.set_alpn_protocols(["h2"])
    return ctx


def _check_files(files: list[tuple[Path, str]], *, hint: str) -> None:
    for path, what in files:
        p = Path(path)
        if not p.is_file():
            raise PkiError(f"{what} {p} does not exist", hint=hint)
        try:
            with p.open("rb"):
                pass
        except OSError as e:
            raise PkiError(f"{what} {p} cannot be read: {e.strerror}", hint=hint) from e


def _reason(e: BaseException) -> str:
    if isinstance(e, ssl.SSLError):
        # "[X509: KEY_VALUES_MISMATCH] key values mismatch (_ssl.c:3900)" → the words.
        reason = (e.reason or "").replace("_", " ").lower()
        if reason == "key values mismatch":
            return "the key does not belong to the certificate"
        if reason in ("pem lib", "no start line", "no certificate or crl found"):
            return "not a PEM file of the expected kind"
        return reason or str(e)
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e)
