"""The cluster's certificates: a private CA, the server certificate, node certificates.

Pure functions over PEM bytes (reading files is left to ``load_cert_key``), so
the rules are tested without touching a disk. Keys are EC P-256: every OpenSSL
and every gRPC implementation a node may run speaks it, and keys are small.

Certificates satisfy ``VERIFY_X509_STRICT`` (which Python 3.13 turns on by
default): key identifiers on both sides, critical basicConstraints and keyUsage.
A certificate that works here must keep working on a newer Python.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmgw.errors import PkiError

CA_VALID_DAYS = 3650
# 825 days: the longest lifetime Apple platforms accept for a TLS server
# certificate, private CA or not; nodes get the same so both renew together.
LEAF_VALID_DAYS = 825
# Backdated so a machine whose clock runs a little behind still accepts a
# certificate issued a moment ago.
CLOCK_SKEW = dt.timedelta(minutes=5)
# Names every server certificate carries: local agents and `llmgw up` dial these.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

_DNS_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_DNS_NAME = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*\.?")


@dataclass(frozen=True)
class CertKey:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


def create_ca(cluster_name: str, *, valid_days: int = CA_VALID_DAYS) -> CertKey:
    """A new self-signed CA that signs the server's and every node's certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "llmgw"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{cluster_name} CA"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    builder = (
        _base(name, name, key.public_key(), valid_days)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            _key_usage(key_cert_sign=True, crl_sign=True, digital_signature=True), critical=True
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    )
    cert = builder.sign(key, hashes.SHA256())
    return CertKey(_cert_pem(cert), _key_pem(key))


def issue_server_cert(
    ca: CertKey, hosts: list[str], *, valid_days: int = LEAF_VALID_DAYS
) -> CertKey:
    """The control plane's certificate, valid for ``hosts`` and the loopback names.

    Each host becomes an IP address entry when it parses as one, a DNS name
    otherwise; agents verify the address they dial against these.
    """
    try:
        names = server_hosts(hosts)
    except ValueError as e:
        raise PkiError(str(e), hint="give each host as a DNS name or an IP address") from e
    cn = next((h for h in names if h not in LOOPBACK_HOSTS), "localhost")
    return _issue_leaf(
        ca,
        cn,
        [ExtendedKeyUsageOID.SERVER_AUTH],
        sans=_sans(names),
        valid_days=valid_days,
    )


# The CN of a mirror's certificate: ':' is in no node id, so it passes for no node.
MIRROR_CN_PREFIX = "mirror:"


def issue_mirror_cert(
    ca: CertKey, hosts: list[str], *, valid_days: int = LEAF_VALID_DAYS
) -> CertKey:
    """A model mirror's certificate, valid for ``hosts`` and the loopback names.

    A server's, checked by agents, ``node add`` and the control plane against
    the cluster CA; and a client's, which the mirror shows its https peers so
    they let it read (a peer reads what a node reads).
    """
    try:
        names = server_hosts(hosts)
    except ValueError as e:
        raise PkiError(str(e), hint="give each host as a DNS name or an IP address") from e
    cn = next((h for h in names if h not in LOOPBACK_HOSTS), "localhost")
    return _issue_leaf(
        ca,
        MIRROR_CN_PREFIX + cn,
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        sans=_sans(names),
        valid_days=valid_days,
    )


def _sans(names: list[str]) -> list[x509.GeneralName]:
    sans: list[x509.GeneralName] = []
    for h in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    return sans


def issue_node_cert(ca: CertKey, node_id: str, *, valid_days: int = LEAF_VALID_DAYS) -> CertKey:
    """A node's certificate: its CN is the node id the control plane trusts.

    A client's when the agent dials the control plane, and a server's for the
    node's engine doors (agentd/door), where the gateway checks the CN.
    """
    # No SAN: the control plane identifies a node by its CN alone, and a node
    # id may hold '_', which is no valid DNS name.
    return _issue_leaf(
        ca,
        node_id,
        [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH],
        sans=[],
        valid_days=valid_days,
    )


# The CN of a control plane's certificate at the nodes' engine doors: ':' is in
# no node id (check_name), so no node's certificate can pass for one.
CONTROL_PLANE_CN_PREFIX = "control-plane:"


def issue_control_plane_client_cert(
    ca: CertKey, control_plane_id: str, *, valid_days: int = LEAF_VALID_DAYS
) -> CertKey:
    """What a control plane's gateway presents at the nodes' engine doors."""
    return _issue_leaf(
        ca,
        CONTROL_PLANE_CN_PREFIX + control_plane_id,
        [ExtendedKeyUsageOID.CLIENT_AUTH],
        sans=[],
        valid_days=valid_days,
    )


def has_usage(cert_pem: bytes, usage: x509.ObjectIdentifier) -> bool:
    """Whether a certificate may be used for ``usage`` (an extended key usage)."""
    cert = _parse_cert(cert_pem)
    try:
        ekus = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    return usage in ekus


def server_hosts(hosts: list[str]) -> list[str]:
    """``hosts`` checked and normalised, then the loopback names, without repeats."""
    out: list[str] = []
    for raw in [*hosts, *LOOPBACK_HOSTS]:
        h = normalise_host(raw)
        if h not in out:
            out.append(h)
    return out


def normalise_host(raw: str) -> str:
    """One host name or IP address as it goes into a certificate; ValueError if neither."""
    h = raw.strip()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    try:
        return str(ipaddress.ip_address(h))
    except ValueError:
        pass
    if len(h) > 253 or not _DNS_NAME.fullmatch(h):
        raise ValueError(f"{raw!r} is neither a DNS name nor an IP address")
    return h.rstrip(".").lower()


def load_cert_key(cert_path: Path, key_path: Path) -> CertKey:
    """A certificate and key read from disk, checked to belong together."""
    pair = CertKey(_read(Path(cert_path), "certificate"), _read(Path(key_path), "private key"))
    cert = _parse_cert(pair.cert_pem, where=str(cert_path))
    key = _parse_key(pair.key_pem, where=str(key_path))
    if not _same_public_key(cert, key):
        raise PkiError(
            f"{key_path} is not the private key of {cert_path}",
            hint="restore the matching key from a backup; the two files must come from one issue",
        )
    return pair


def cert_common_name(cert: bytes | x509.Certificate) -> str:
    """The subject's CN (a node id, for node certificates); PkiError if it has none."""
    c = _parse_cert(cert) if isinstance(cert, bytes) else cert
    attrs = c.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not attrs:
        raise PkiError("the certificate has no common name (CN) in its subject")
    value = attrs[0].value
    return value if isinstance(value, str) else value.decode()


def cert_hosts(cert_pem: bytes) -> list[str]:
    """The DNS names and IP addresses a certificate is valid for, as strings."""
    cert = _parse_cert(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    out: list[str] = []
    for name in san:
        if isinstance(name, x509.DNSName):
            out.append(name.value)
        elif isinstance(name, x509.IPAddress):
            out.append(str(name.value))
    return out


def cert_not_after(cert_pem: bytes) -> dt.datetime:
    """When the certificate stops being valid (UTC, aware)."""
    return _parse_cert(cert_pem).not_valid_after_utc


def fingerprint_sha256(cert_pem: bytes) -> str:
    """SHA-256 of the DER certificate as ``AB:CD:…``.

    The same form ``openssl x509 -noout -fingerprint -sha256`` prints, so an
    operator can compare the two by eye.
    """
    digest = _parse_cert(cert_pem).fingerprint(hashes.SHA256())
    return ":".join(f"{b:02X}" for b in digest)


def issued_by(cert_pem: bytes, ca_cert_pem: bytes) -> bool:
    """Whether ``ca_cert_pem`` signed ``cert_pem`` (signature and issuer name)."""
    cert = _parse_cert(cert_pem)
    ca = _parse_cert(ca_cert_pem)
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def keys_match(pair: CertKey) -> bool:
    """Whether the key in ``pair`` is the private half of its certificate's public key."""
    return _same_public_key(_parse_cert(pair.cert_pem), _parse_key(pair.key_pem))


# --- internals -------------------------------------------------------------


def _issue_leaf(
    ca: CertKey,
    common_name: str,
    usages: list[x509.ObjectIdentifier],
    *,
    sans: list[x509.GeneralName],
    valid_days: int,
) -> CertKey:
    ca_cert = _parse_cert(ca.cert_pem, where="the CA certificate")
    ca_key = _parse_key(ca.key_pem, where="the CA key")
    if not _same_public_key(ca_cert, ca_key):
        raise PkiError("the CA key does not belong to the CA certificate")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    try:
        ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski)
    except x509.ExtensionNotFound:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    builder = (
        _base(subject, ca_cert.subject, key.public_key(), valid_days)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(aki, critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    try:
        cert = builder.sign(ca_key, hashes.SHA256())
    except (ValueError, TypeError) as e:
        raise PkiError(f"could not sign a certificate for {common_name!r}: {e}") from e
    return CertKey(_cert_pem(cert), _key_pem(key))


def _base(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
    )


def _key_usage(
    *, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    # Unencrypted: the daemons start unattended; the file's 0600 mode is the protection.
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as e:
        raise PkiError(f"{what} {path} does not exist") from e
    except OSError as e:
        raise PkiError(f"{what} {path} cannot be read: {e.strerror}") from e


def _parse_cert(pem: bytes, *, where: str = "the certificate") -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as e:
        raise PkiError(f"{where} is not a PEM certificate") from e


def _parse_key(pem: bytes, *, where: str = "the key") -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError as e:
        # Only an encrypted key ends up here: we never write one.
        raise PkiError(f"{where} is encrypted with a passphrase; llmgw needs it unencrypted") from e
    except ValueError as e:
        raise PkiError(f"{where} is not a PEM private key") from e
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"{where} is not an EC key (llmgw issues EC P-256 keys)")
    return key


def _same_public_key(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    der = serialization.Encoding.DER
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)
