"""How the gateway gets into a replica's engine: the replica's own key, and TLS to its node's door.

Each replica has a key of its own, derived by every control plane alike
from the cluster's engine secret (``secrets/engine-key``, which stays on the
control planes), the replica's id, how often it was started and the key
epoch; agents are given the keys of their replicas and never the secret. A
restarted replica gets a new key, and a rotation (``ctl engines rotate-key``)
a new epoch. A replica on another machine is reached through its node's
engine door (agentd/door) over TLS: the node's certificate checked against
the cluster CA and its CN against the node the replica runs on; the gateway
shows a control plane's client certificate (issued here from the CA).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import ipaddress
import logging
import ssl
from pathlib import Path

from llmgw.errors import PkiError
from llmgw.fsutil import write_atomic, write_secret
from llmgw.paths import Paths
from llmgw.tls import pki

log = logging.getLogger(__name__)

CLIENT_CERT = "control-plane-client.crt"
CLIENT_KEY = "control-plane-client.key"
# Issued again once it has less than this left.
RENEW_BEFORE = dt.timedelta(days=30)


def replica_key(secret: str, replica_id: str, starts: int, epoch: int) -> str:
    """The key of one start of one replica at a key epoch (43 URL-safe characters)."""
    mac = hmac.new(secret.encode(), f"llmgw engine key/{epoch}/{replica_id}/{starts}".encode(),
                   hashlib.sha256)  # fmt: skip
    return base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()


def is_loopback_host(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def client_context(paths: Paths, ca_cert: Path, control_plane_id: str) -> ssl.SSLContext | None:
    """The TLS the gateway speaks to engine doors; None where this control plane holds no CA key.

    Its certificate is issued from the cluster CA into the pki folder when
    missing, not the CA's, expiring, or of another control plane.
    """
    crt, key = paths.pki_dir / CLIENT_CERT, paths.pki_dir / CLIENT_KEY
    try:
        _ensure_cert(paths, crt, key, control_plane_id)
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_cert))
        ctx.load_cert_chain(certfile=str(crt), keyfile=str(key))
    except (PkiError, OSError, ssl.SSLError) as e:
        log.error("no TLS to the nodes' engine doors: replicas off this machine cannot be "
                  "reached: %s", getattr(e, "message", e))  # fmt: skip
        return None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    # A door's certificate is its node's: no host names, its CN the node id,
    # which the client checks against the node the replica runs on.
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _ensure_cert(paths: Paths, crt: Path, key: Path, control_plane_id: str) -> None:
    from llmgw.setup.cluster_init import load_ca

    ca = load_ca(paths)
    want = pki.CONTROL_PLANE_CN_PREFIX + control_plane_id
    try:
        pair = pki.load_cert_key(crt, key)
        sound = (
            pki.issued_by(pair.cert_pem, ca.cert_pem)
            and pki.cert_common_name(pair.cert_pem) == want
            and pki.cert_not_after(pair.cert_pem) - dt.datetime.now(dt.UTC) > RENEW_BEFORE
        )
    except (PkiError, OSError):
        sound = False
    if sound:
        return
    pair = pki.issue_control_plane_client_cert(ca, control_plane_id)
    write_secret(key, pair.key_pem)
    write_atomic(crt, pair.cert_pem, mode=0o644)
    log.info("issued %s for the nodes' engine doors", crt)


class EngineAccess:
    """The keys and TLS of one control plane's way into the replicas.

    A replica's key epoch is its own (``Replica.key_epoch``, in its record,
    which every control plane reads): a rotation moves it on replica by
    replica (gatewayd/controller/key_rotation.py). ``tls`` is the client
    context for doors (None: only loopback replicas can be reached).
    """

    def __init__(self, secret: str, *, tls: ssl.SSLContext | None = None):
        self.secret = secret
        self.tls = tls
        self._headers: dict[tuple[str, int, int], str] = {}

    def key(self, replica_id: str, starts: int, epoch: int = 0) -> str:
        """A replica's key for one start at one epoch ("" without a secret)."""
        return replica_key(self.secret, replica_id, starts, epoch) if self.secret else ""

    def authorization(self, replica_id: str, starts: int, epoch: int = 0) -> str:
        """The header value for a replica's key (asked at every request: made once)."""
        found = self._headers.get((replica_id, starts, epoch))
        if found is None:
            if len(self._headers) > 4096:
                self._headers.clear()
            key = self.key(replica_id, starts, epoch)
            found = self._headers[(replica_id, starts, epoch)] = f"Bearer {key}" if key else ""
        return found

    @staticmethod
    def scheme(host: str) -> str:
        """http on loopback (the door takes plain HTTP there), https through any other."""
        return "http" if is_loopback_host(host) else "https"
