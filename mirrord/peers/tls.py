"""How a mirror dials its https peers: their certificates checked against the cluster CA.

A mirror's ``tls.client_ca`` is the cluster CA, which also signs the
cluster's mirrors' own certificates, so it is what an https peer is checked
against (with no client_ca, the system's CAs). The mirror's certificate is
shown to peers as a client certificate only when it may be one (its
extended key usage names clientAuth, or names nothing): a server-only
certificate shown would end the handshake, since a peer checking client
certificates refuses one it cannot use. The read token travels either way.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from llmgw.errors import ConfigError
from llmgw.mirror.config import MirrorTls


def may_be_client_cert(cert_path: Path) -> bool:
    """Whether the certificate at ``cert_path`` may authenticate a TLS client."""
    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return ExtendedKeyUsageOID.CLIENT_AUTH in eku


def peer_ssl_context(tls: MirrorTls) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(cafile=tls.client_ca or None)
        if tls.cert and tls.key and may_be_client_cert(Path(tls.cert)):
            ctx.load_cert_chain(tls.cert, tls.key)
    except (OSError, ssl.SSLError, ValueError) as e:
        raise ConfigError(
            f"the mirror's TLS files cannot be used to reach its peers: {e}",
            hint="check mirror.yaml's tls: cert, key and client_ca (the cluster CA)",
        ) from e
    return ctx


def peer_client(tls: MirrorTls | None, timeout: httpx.Timeout) -> httpx.AsyncClient:
    verify: ssl.SSLContext | bool = (
        peer_ssl_context(tls) if tls and (tls.client_ca or tls.cert) else True
    )
    return httpx.AsyncClient(timeout=timeout, verify=verify)
