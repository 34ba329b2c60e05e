"""TLS to PostgreSQL that checks the server, whenever the DSN asks for TLS at all.

libpq's ``sslmode=require`` (and asyncpg's reading of it) encrypts without
checking whom it talks to: anyone on the path can present a certificate of
their own and read every key hash, prompt-free usage row and setting that
crosses. Here a DSN that asks for TLS — ``require``, ``verify-ca`` or
``verify-full``, in the DSN or ``PGSSLMODE`` — gets a context that checks the
server's certificate against the system's authorities, the DSN's
``sslrootcert`` and the cluster CA, and its name against the host dialled
(``verify-ca`` alone skips the name, as libpq's does). ``disable``, ``allow``
and ``prefer`` are left to asyncpg as they were: they never promised TLS.
A client certificate (``sslcert``/``sslkey``) is presented as libpq would.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from llmgw.errors import ConfigError

TLS_MODES = ("require", "verify-ca", "verify-full")


def sslmode_of(dsn: str) -> str:
    """The DSN's sslmode (its query, else PGSSLMODE); '' when neither says."""
    query = parse_qs(urlsplit(dsn).query)
    if query.get("sslmode"):
        return query["sslmode"][-1]
    return os.environ.get("PGSSLMODE", "")


def tls_context(dsn: str, cluster_ca: Path | None = None) -> ssl.SSLContext | None:
    """The checking context for a DSN that asks for TLS; None for one that does not."""
    mode = sslmode_of(dsn)
    if mode not in TLS_MODES:
        return None
    query = parse_qs(urlsplit(dsn).query)

    def param(name: str, env: str) -> str:
        return query[name][-1] if query.get(name) else os.environ.get(env, "")

    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = mode != "verify-ca"
    root = param("sslrootcert", "PGSSLROOTCERT")
    try:
        if root:
            ctx.load_verify_locations(cafile=root)
        if cluster_ca is not None and cluster_ca.exists():
            ctx.load_verify_locations(cafile=str(cluster_ca))
        cert = param("sslcert", "PGSSLCERT")
        if cert:
            ctx.load_cert_chain(cert, keyfile=param("sslkey", "PGSSLKEY") or None)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(
            f"the store's TLS files could not be read: {e}",
            hint="check sslrootcert, sslcert and sslkey in store.dsn",
        ) from e
    return ctx
