"""The node's engine doors as the agent opens them: where, and with which certificate."""

from __future__ import annotations

import logging
from pathlib import Path

from cryptography.x509.oid import ExtendedKeyUsageOID

from agentd.door.door import door_context, is_loopback
from agentd.door.keeper import DoorKeeper
from llmgw.tls import pki

log = logging.getLogger(__name__)


def engine_doors(state_dir: Path, host: str, ca: Path, cert: Path, key: Path) -> DoorKeeper:
    """Doors on ``host`` (the node's engine address), TLS with the node's certificate.

    A door on loopback only ever takes this machine's gateway, in plain HTTP.
    Elsewhere it takes TLS alone; a node certificate issued before doors
    existed is no server's (it lacks the serverAuth use), so the gateway would
    refuse it: that is said once here, with what to do.
    """
    tls_files: tuple[Path, Path, Path] | None = None
    if not is_loopback(host):
        door_context(ca, cert, key)  # loads here, so a bad file is said at the agent's start
        tls_files = (ca, cert, key)
        try:
            serves = pki.has_usage(cert.read_bytes(), ExtendedKeyUsageOID.SERVER_AUTH)
        except (OSError, ValueError, pki.PkiError):
            serves = True  # load_cert_chain above took it; the gateway will say more
        if not serves:
            log.error(
                "this node's certificate %s was issued before engine doors and cannot serve TLS: "
                "the gateway will not reach its replicas; issue it again "
                "(`llmgw node add HOST` or `llmgw node cert NODE_ID` on a control plane)",
                cert,
            )
    return DoorKeeper(state_dir, host, tls_files)
