"""Mirrors over HTTPS: each checks its peer against the cluster CA; a certificate reads as a token does."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from llmgw.tls import pki
from tests.mirrord.peer_helpers import Link, PeerMirror

REPO = "org/tiny"


def client_and_server_cert(ca: pki.CertKey) -> pki.CertKey:
    """A mirror certificate for 127.0.0.1 that may also be a TLS client's (both usages)."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mirror-b")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pki.CertKey(cert.public_bytes(serialization.Encoding.PEM), key_pem)


def tls_files(tmp_path, name: str, ca: pki.CertKey, leaf: pki.CertKey) -> dict:
    d = tmp_path / f"tls-{name}"
    d.mkdir()
    (d / "ca.crt").write_bytes(ca.cert_pem)
    (d / "m.crt").write_bytes(leaf.cert_pem)
    (d / "m.key").write_bytes(leaf.key_pem)
    return {"cert": str(d / "m.crt"), "key": str(d / "m.key"), "client_ca": str(d / "ca.crt")}


@pytest.fixture
def ca():
    return pki.create_ca("test")


async def test_https_mirrors_check_each_other_against_the_cluster_ca_and_keep_in_step(tmp_path, ca):
    # Server-only certificates (what `llmgw server init` issues): the guarded failure is
    # one shown as a client certificate, which ends every handshake with the peer.
    token = secrets.token_urlsafe(16)
    a = PeerMirror(
        tmp_path / "a",
        token,
        tls_files(tmp_path, "a", ca, pki.issue_server_cert(ca, ["127.0.0.1"])),
    )
    b = PeerMirror(
        tmp_path / "b",
        token,
        tls_files(tmp_path, "b", ca, pki.issue_server_cert(ca, ["127.0.0.1"])),
    )
    await a.start()
    await b.start()
    link = await Link(a.port).start()
    try:
        assert a.url.startswith("https://")
        await b.add_peer(link.url.replace("http://", "https://"))
        rev = await a.add(REPO, {"config.json": b"{}", "model.gguf": os.urandom(200_000)})
        await b.peers.sync_once()
        assert b.store.get("model", REPO, rev.commit) is not None
        assert b.peers.peers()[0].state == "in_step"
    finally:
        # B (the one reading) first: its connections to A go with it.
        await b.stop()
        await a.stop()
        await link.close()


async def test_a_peer_whose_certificate_is_not_the_clusters_is_down_saying_why(tmp_path, ca):
    other_ca = pki.create_ca("another cluster")
    token = secrets.token_urlsafe(16)
    a = PeerMirror(
        tmp_path / "a",
        token,
        tls_files(tmp_path, "a", other_ca, pki.issue_server_cert(other_ca, ["127.0.0.1"])),
    )
    b = PeerMirror(
        tmp_path / "b",
        token,
        tls_files(tmp_path, "b", ca, pki.issue_server_cert(ca, ["127.0.0.1"])),
    )
    await a.start()
    await b.start()
    try:
        await b.add_peer(a.url)
        await b.peers.sync_once()
        [peer] = b.peers.peers()
        assert peer.state == "down" and "CERTIFICATE_VERIFY_FAILED" in peer.reason
    finally:
        # B (the one reading) first: its connections to A go with it.
        await b.stop()
        await a.stop()


async def test_a_mirror_with_a_client_certificate_of_the_cluster_reads_its_peer_without_its_token(
    tmp_path, ca
):
    a = PeerMirror(
        tmp_path / "a",
        "a-read-token",
        tls_files(tmp_path, "a", ca, pki.issue_server_cert(ca, ["127.0.0.1"])),
    )
    b = PeerMirror(
        tmp_path / "b", "b-read-token", tls_files(tmp_path, "b", ca, client_and_server_cert(ca))
    )
    await a.start()
    await b.start()
    try:
        await b.add_peer(a.url)
        rev = await a.add(REPO, {"config.json": b"{}", "model.gguf": os.urandom(200_000)})
        await b.peers.sync_once()
        assert b.store.get("model", REPO, rev.commit) is not None
        assert b.peers.peers()[0].state == "in_step"
    finally:
        # B (the one reading) first: its connections to A go with it.
        await b.stop()
        await a.stop()
