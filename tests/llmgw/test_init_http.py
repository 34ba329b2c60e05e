"""``server init``'s gateway port flags: its TLS (--http-tls, --http-cert/--http-key) and the
proxies it trusts (--trusted-proxy, --proxy-protocol), and server.yaml's ``http:`` checks."""

from __future__ import annotations

import json
import socket
import ssl
import stat
import threading

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from llmgw.cli.main import app
from llmgw.config import HttpConfig, load_server_config
from llmgw.paths import Paths


def init(tmp_path, *args: str):
    return CliRunner().invoke(
        app, ["server", "init", "--no-starter", *args], env={"LLMGW_HOME": str(tmp_path)}
    )


def _handshake(paths: Paths, crt: str, key: str, host: str) -> None:
    """A TLS handshake with the issued pair, checked by a client that trusts only the CA."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(crt, key)
    client_ctx = ssl.create_default_context(cafile=str(paths.ca_cert))
    a, b = socket.socketpair()
    errors: list[BaseException] = []

    def serve():
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                s.recv(1)
        except (OSError, ssl.SSLError) as e:  # the client's refusal shows on its side
            errors.append(e)

    t = threading.Thread(target=serve)
    t.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=host) as c:
            c.sendall(b"x")
    finally:
        t.join(5)


def test_http_tls_writes_a_certificate_from_the_cluster_ca_that_verifies_for_the_host(tmp_path):
    res = init(tmp_path, "--host", "cp.example", "--http-tls", "--json")
    assert res.exit_code == 0, res.output
    paths = Paths.under(tmp_path)
    http = load_server_config(paths.server_yaml).http
    assert http.tls and http.tls_cert == str(paths.pki_dir / "http.crt")
    assert stat.S_IMODE((paths.pki_dir / "http.key").stat().st_mode) == 0o600
    assert [s["item"] for s in json.loads(res.stdout)["http"]] == ["http_cert", "http_yaml"]
    for host in ("cp.example", "localhost", "127.0.0.1"):
        _handshake(paths, http.tls_cert, http.tls_key, host)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(paths, http.tls_cert, http.tls_key, "elsewhere.example")
    # Run again: the sound certificate is kept.
    again = init(tmp_path, "--host", "cp.example", "--http-tls", "--json")
    assert json.loads(again.stdout)["http"][0]["action"] == "kept"


def test_the_operators_own_certificate_and_trusted_proxies_go_into_server_yaml(tmp_path):
    crt, key = tmp_path / "op.crt", tmp_path / "op.key"
    crt.write_text("cert"), key.write_text("key")
    res = init(
        tmp_path / "home",
        "--http-cert",
        str(crt),
        "--http-key",
        str(key),
        "--trusted-proxy",
        "10.0.0.0/8",
        "--trusted-proxy",
        "192.168.1.5",
    )
    assert res.exit_code == 0, res.output
    http = load_server_config(Paths.under(tmp_path / "home").server_yaml).http
    assert (http.tls_cert, http.tls_key) == (str(crt), str(key))
    assert http.trusted_proxies == ["10.0.0.0/8", "192.168.1.5"] and not http.proxy_protocol


def test_a_bad_trusted_proxy_is_refused_naming_it_before_anything_is_written(tmp_path):
    res = init(tmp_path, "--trusted-proxy", "10.0.0.0/8", "--trusted-proxy", "haproxy-box")
    assert res.exit_code != 0
    assert "'haproxy-box' is not an address or CIDR" in res.output
    assert not Paths.under(tmp_path).server_yaml.exists()


def test_flags_that_do_not_go_together_are_refused(tmp_path):
    res = init(tmp_path, "--proxy-protocol")
    assert res.exit_code != 0 and "--trusted-proxy" in res.output
    # TLS and the PROXY protocol go together (the header comes before the handshake).
    res = init(tmp_path, "--http-tls", "--trusted-proxy", "10.0.0.1", "--proxy-protocol")
    assert res.exit_code == 0, res.output
    res = init(tmp_path, "--http-cert", str(tmp_path / "none.crt"))
    assert res.exit_code != 0 and "--http-key" in res.output


def test_server_yaml_http_is_checked_by_its_own_rules():
    with pytest.raises(ValidationError, match="'nope' is not an address or CIDR"):
        HttpConfig(trusted_proxies=["nope"])
    with pytest.raises(ValidationError, match="go together"):
        HttpConfig(tls_cert="/x.crt")
    cfg = HttpConfig(trusted_proxies=[" 10.1.0.0/16 ", "::1"], proxy_protocol=True)
    assert cfg.trusted_proxies == ["10.1.0.0/16", "::1"] and cfg.scheme == "http"
    assert HttpConfig(tls_cert="/a", tls_key="/b").scheme == "https"
