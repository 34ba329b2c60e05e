"""A revoked node certificate, as the store keeps it."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


def canonical_serial(serial: str | int) -> str:
    """A certificate serial as upper-case hex without leading zeros.

    OpenSSL (``getpeercert()['serialNumber']``) pads to whole bytes and
    cryptography gives an int: both are brought to one spelling before they
    are compared or stored. ValueError for something that is not hex.
    """
    value = serial if isinstance(serial, int) else int(serial.replace(":", ""), 16)
    return format(value, "X")


class RevokedCert(BaseModel):
    """A node certificate the agent port refuses from now on."""

    # canonical_serial() of the certificate: unique per certificate the CA signs.
    serial: str
    node_id: str
    fingerprint_sha256: str = ""
    reason: str = ""
    revoked_at: datetime
