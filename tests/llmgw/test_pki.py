"""The cluster PKI: real certificates, and real TLS handshakes between the contexts."""

import asyncio
import hashlib
import ipaddress
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from grpclib.client import Channel
from grpclib.const import Cardinality, Handler
from grpclib.exceptions import StreamTerminatedError
from grpclib.health.v1.health_grpc import HealthStub
from grpclib.health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse
from grpclib.server import Server

from llmgw.errors import PkiError
from llmgw.tls import pki, tlsconf


def _write(dir_: Path, name: str, pair: pki.CertKey) -> tuple[Path, Path]:
    crt, key = dir_ / f"{name}.crt", dir_ / f"{name}.key"
    crt.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    return crt, key


@pytest.fixture(scope="module")
def ca() -> pki.CertKey:
    return pki.create_ca("test")


@pytest.fixture
def files(tmp_path: Path, ca: pki.CertKey) -> dict[str, Path]:
    """A CA, a server certificate and a node certificate for gpu-1, on disk."""
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    server_crt, server_key = _write(tmp_path, "server", pki.issue_server_cert(ca, ["cp.example"]))
    node_crt, node_key = _write(tmp_path, "node", pki.issue_node_cert(ca, "gpu-1"))
    return {
        "ca": tmp_path / "ca.crt",
        "server_crt": server_crt,
        "server_key": server_key,
        "node_crt": node_crt,
        "node_key": node_key,
    }


def handshake(
    server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, *, server_hostname: str = "localhost"
) -> dict:
    """One TLS handshake over a socketpair, then one byte each way.

    Returns what each side saw: the ALPN protocol, the server's view of the
    client's certificate, and the error each side raised, if any.
    """
    a, b = socket.socketpair()
    a.settimeout(10)
    b.settimeout(10)
    seen: dict = {"server_error": None, "client_error": None}

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                seen["server_alpn"] = s.selected_alpn_protocol()
                seen["peercert"] = s.getpeercert()
                s.sendall(b"s")
                s.recv(1)
        except (ssl.SSLError, OSError) as e:
            seen["server_error"] = e

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=server_hostname) as c:
            seen["client_alpn"] = c.selected_alpn_protocol()
            c.sendall(b"c")
            # With TLS 1.3 the client finishes before the server has judged its
            # certificate: a refusal shows up here, on the first read.
            if not c.recv(1):
                raise ConnectionResetError("the server closed the connection")
    except (ssl.SSLError, OSError) as e:
        seen["client_error"] = e
    finally:
        t.join(10)
        a.close()
        b.close()
    return seen


def test_a_new_ca_may_sign_certificates_and_nothing_else() -> None:
    ca = x509.load_pem_x509_certificate(pki.create_ca("prod").cert_pem)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert pki.cert_common_name(ca) == "prod CA"
    years = (ca.not_valid_after_utc - ca.not_valid_before_utc).days / 365
    assert 9.9 < years < 10.1


def test_the_server_certificate_names_each_host_and_always_the_loopback_names(ca) -> None:
    pair = pki.issue_server_cert(ca, ["cp.example", "10.0.0.5", "[fd00::1]"])
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["cp.example", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.5"),
        ipaddress.ip_address("fd00::1"),
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert pki.issued_by(pair.cert_pem, ca.cert_pem)
    assert pki.keys_match(pair)


def test_a_node_certificate_carries_the_node_id_as_its_common_name(ca) -> None:
    pair = pki.issue_node_cert(ca, "gpu_07")
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    assert pki.cert_common_name(pair.cert_pem) == "gpu_07"
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # A client's when the agent dials in, a server's at the node's engine doors.
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
    assert pki.issued_by(pair.cert_pem, ca.cert_pem)
    assert not pki.issued_by(pair.cert_pem, pki.create_ca("other").cert_pem)


@pytest.mark.parametrize("host", ["", "has space", "-lead.example", "a..b", "x" * 64])
def test_a_host_that_is_neither_a_name_nor_an_address_is_refused(ca, host: str) -> None:
    with pytest.raises(PkiError, match="neither a DNS name nor an IP address"):
        pki.issue_server_cert(ca, [host])


def test_the_fingerprint_is_sha256_of_the_der_in_openssl_form(ca) -> None:
    der = x509.load_pem_x509_certificate(ca.cert_pem).public_bytes(serialization.Encoding.DER)
    want = ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
    assert pki.fingerprint_sha256(ca.cert_pem) == want


def test_load_cert_key_refuses_the_key_of_another_certificate(tmp_path: Path, ca) -> None:
    crt, _ = _write(tmp_path, "a", pki.issue_node_cert(ca, "a"))
    _, other_key = _write(tmp_path, "b", pki.issue_node_cert(ca, "b"))
    with pytest.raises(PkiError, match="is not the private key of"):
        pki.load_cert_key(crt, other_key)


def test_load_cert_key_names_a_missing_or_garbled_file(tmp_path: Path, ca) -> None:
    crt, key = _write(tmp_path, "a", pki.issue_node_cert(ca, "a"))
    with pytest.raises(PkiError, match=r"private key .*missing\.key does not exist"):
        pki.load_cert_key(crt, tmp_path / "missing.key")
    crt.write_text("not a certificate")
    with pytest.raises(PkiError, match="a.crt is not a PEM certificate"):
        pki.load_cert_key(crt, key)


def test_server_and_node_contexts_complete_a_mutual_handshake_with_h2(files) -> None:
    server = tlsconf.server_context(files["ca"], files["server_crt"], files["server_key"])
    client = tlsconf.client_context(files["ca"], files["node_crt"], files["node_key"])
    for name in ("localhost", "127.0.0.1", "cp.example"):
        seen = handshake(server, client, server_hostname=name)
        assert seen["server_error"] is None and seen["client_error"] is None, seen
        assert seen["server_alpn"] == seen["client_alpn"] == "h2"
        assert tlsconf.peer_common_name(seen["peercert"]) == "gpu-1"


def test_a_client_certificate_from_another_ca_is_refused(tmp_path: Path, files) -> None:
    stranger = pki.create_ca("stranger")
    crt, key = _write(tmp_path, "intruder", pki.issue_node_cert(stranger, "gpu-1"))
    server = tlsconf.server_context(files["ca"], files["server_crt"], files["server_key"])
    client = tlsconf.client_context(files["ca"], crt, key)
    seen = handshake(server, client)
    assert isinstance(seen["server_error"], ssl.SSLError)
    assert "certificate verify failed" in str(seen["server_error"])
    assert seen["client_error"] is not None
    assert "peercert" not in seen


def test_a_client_without_a_certificate_is_refused(files) -> None:
    server = tlsconf.server_context(files["ca"], files["server_crt"], files["server_key"])
    bare = ssl.create_default_context(cafile=str(files["ca"]))
    bare.set_alpn_protocols(["h2"])
    seen = handshake(server, bare)
    assert isinstance(seen["server_error"], ssl.SSLError)
    assert "peercert" not in seen


def test_a_node_dialing_a_name_the_server_certificate_lacks_refuses_it(files) -> None:
    server = tlsconf.server_context(files["ca"], files["server_crt"], files["server_key"])
    client = tlsconf.client_context(files["ca"], files["node_crt"], files["node_key"])
    seen = handshake(server, client, server_hostname="elsewhere.example")
    assert isinstance(seen["client_error"], ssl.SSLCertVerificationError)


def test_a_missing_file_is_named_with_the_command_that_makes_it(files) -> None:
    with pytest.raises(PkiError, match=r"private key .*nope\.key does not exist") as e:
        tlsconf.server_context(files["ca"], files["server_crt"], files["ca"].parent / "nope.key")
    assert "llmgw server init" in e.value.hint
    with pytest.raises(PkiError, match="CA certificate .* does not exist") as e:
        tlsconf.client_context(files["ca"].parent / "x.crt", files["node_crt"], files["node_key"])
    assert "llmgw node cert NODE_ID" in e.value.hint


def test_a_key_that_does_not_match_its_certificate_is_said_so(files) -> None:
    with pytest.raises(PkiError, match="the key does not belong to the certificate"):
        tlsconf.server_context(files["ca"], files["server_crt"], files["node_key"])


def test_peer_common_name_reads_getpeercert_and_none_without_a_certificate() -> None:
    peer = {"subject": ((("organizationName", "llmgw"),), (("commonName", "gpu-2"),))}
    assert tlsconf.peer_common_name(peer) == "gpu-2"
    assert tlsconf.peer_common_name({}) is None
    assert tlsconf.peer_common_name(None) is None


class _WhoAmI:
    """A gRPC service that answers Health/Check and records the caller's CN."""

    def __init__(self) -> None:
        self.callers: list[str | None] = []

    def __mapping__(self):
        return {
            "/grpc.health.v1.Health/Check": Handler(
                self.check, Cardinality.UNARY_UNARY, HealthCheckRequest, HealthCheckResponse
            )
        }

    async def check(self, stream) -> None:
        await stream.recv_message()
        self.callers.append(tlsconf.peer_common_name(stream.peer.cert()))
        await stream.send_message(HealthCheckResponse(status=HealthCheckResponse.SERVING))


async def test_grpclib_serves_a_node_over_mutual_tls_and_refuses_a_stranger(
    tmp_path: Path, files
) -> None:
    service = _WhoAmI()
    server = Server([service])
    await server.start(
        "127.0.0.1",
        0,
        ssl=tlsconf.server_context(files["ca"], files["server_crt"], files["server_key"]),
    )
    port = server._server.sockets[0].getsockname()[1]
    try:
        node = Channel(
            "127.0.0.1",
            port,
            ssl=tlsconf.client_context(files["ca"], files["node_crt"], files["node_key"]),
        )
        reply = await asyncio.wait_for(HealthStub(node).Check(HealthCheckRequest()), 10)
        node.close()
        assert reply.status == HealthCheckResponse.SERVING
        assert service.callers == ["gpu-1"]

        crt, key = _write(tmp_path, "x", pki.issue_node_cert(pki.create_ca("x"), "gpu-9"))
        stranger = Channel("127.0.0.1", port, ssl=tlsconf.client_context(files["ca"], crt, key))
        # TLS 1.3: the refusal reaches grpclib after its handshake, as a dead stream.
        with pytest.raises(StreamTerminatedError):
            await asyncio.wait_for(HealthStub(stranger).Check(HealthCheckRequest()), 10)
        stranger.close()
        assert service.callers == ["gpu-1"]
    finally:
        server.close()
        await server.wait_closed()
