"""llmgw server init and llmgw node cert, over a throwaway LLMGW_HOME."""

import json
import stat
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from llmgw.cli.init_cmds import node_cert, server_init
from llmgw.config import load_agent_config, load_server_config
from llmgw.errors import PkiError, UsageError
from llmgw.paths import Paths
from llmgw.setup import cluster_init
from llmgw.tls import pki, tlsconf
from tests.llmgw.test_pki import handshake


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths.under(tmp_path)


def test_init_creates_the_ca_the_server_certificate_the_token_and_server_yaml(paths) -> None:
    r = cluster_init.init_server(paths, hosts=["cp.example", "10.1.2.3"], cluster_name="lab")
    assert r.created == ["ca", "server_cert", "admin_token", "server_yaml"] and r.kept == []
    assert _mode(paths.pki_dir) == _mode(paths.secrets_dir) == 0o700
    assert _mode(paths.ca_key) == _mode(paths.server_key) == _mode(paths.admin_token_file) == 0o600
    assert _mode(paths.ca_cert) == _mode(paths.server_cert) == 0o644
    assert len(paths.admin_token_file.read_text()) >= 43  # 32 bytes, base64
    assert pki.cert_common_name(paths.ca_cert.read_bytes()) == "lab CA"
    assert r.server_hosts == ["cp.example", "10.1.2.3", "localhost", "127.0.0.1", "::1"]
    assert r.ca_fingerprint_sha256 == pki.fingerprint_sha256(paths.ca_cert.read_bytes())


def test_running_init_again_keeps_the_ca_the_certificate_and_the_token(paths) -> None:
    first = cluster_init.init_server(paths, hosts=["cp.example"])
    token = paths.admin_token_file.read_text()
    server_crt = paths.server_cert.read_bytes()
    again = cluster_init.init_server(paths, hosts=[])
    assert again.created == []
    assert again.kept == ["ca", "server_cert", "admin_token", "server_yaml"]
    assert again.ca_fingerprint_sha256 == first.ca_fingerprint_sha256
    assert paths.admin_token_file.read_text() == token
    assert paths.server_cert.read_bytes() == server_crt


def test_new_hosts_reissue_the_server_certificate_under_the_same_ca(paths) -> None:
    first = cluster_init.init_server(paths, hosts=["cp.example"])
    r = cluster_init.init_server(paths, hosts=["cp.example", "cp2.example"])
    step = next(s for s in r.steps if s.item == "server_cert")
    assert step.action == "reissued" and "hosts changed" in step.reason
    assert "cp2.example" in pki.cert_hosts(paths.server_cert.read_bytes())
    assert r.ca_fingerprint_sha256 == first.ca_fingerprint_sha256
    assert pki.issued_by(paths.server_cert.read_bytes(), paths.ca_cert.read_bytes())


def test_a_lost_server_key_is_replaced_keeping_the_hosts(paths) -> None:
    # Regression guard: re-issuing without --host once dropped every host but
    # this machine's, cutting off nodes that dial the others.
    cluster_init.init_server(paths, hosts=["cp.example"])
    paths.server_key.unlink()
    r = cluster_init.init_server(paths, hosts=[])
    assert next(s for s in r.steps if s.item == "server_cert").action == "reissued"
    assert "cp.example" in r.server_hosts
    pki.load_cert_key(paths.server_cert, paths.server_key)


def test_a_ca_certificate_without_its_key_is_refused_and_left_alone(paths) -> None:
    cluster_init.init_server(paths, hosts=[])
    ca_pem = paths.ca_cert.read_bytes()
    paths.ca_key.unlink()
    with pytest.raises(PkiError, match="its key .* is missing") as e:
        cluster_init.init_server(paths, hosts=[])
    assert "backup" in e.value.hint
    assert paths.ca_cert.read_bytes() == ca_pem
    assert not paths.ca_key.exists()


def test_a_ca_key_that_belongs_to_another_ca_is_refused(paths) -> None:
    cluster_init.init_server(paths, hosts=[])
    paths.ca_key.write_bytes(pki.create_ca("other").key_pem)
    with pytest.raises(PkiError, match="is not the private key of"):
        cluster_init.init_server(paths, hosts=[])


def test_a_secret_made_readable_to_others_is_put_back_to_0600(paths) -> None:
    cluster_init.init_server(paths, hosts=[])
    paths.admin_token_file.chmod(0o644)
    cluster_init.init_server(paths, hosts=[])
    assert _mode(paths.admin_token_file) == 0o600


def test_server_yaml_from_init_loads_with_the_ports_given(paths) -> None:
    ports = {"agent": 17070, "admin": 19090, "http": 18080, "metrics": 19091}
    cluster_init.init_server(paths, hosts=[], cluster_name="lab", ports=ports)
    cfg = load_server_config(paths.server_yaml)
    assert cfg.cluster_name == "lab"
    assert cfg.listen.agent == "0.0.0.0:17070"
    assert cfg.listen.admin == "127.0.0.1:19090"
    assert cfg.listen.http == "0.0.0.0:18080"
    assert cfg.listen.metrics == "0.0.0.0:19091"
    assert cfg.store.dsn == ""


def test_a_postgres_dsn_goes_to_a_0600_secret_never_into_server_yaml(paths) -> None:
    dsn = "postgresql://llmgw:hunter2@db:5432/llmgw"
    r = cluster_init.init_server(paths, hosts=[], store_dsn=dsn)
    assert "hunter2" not in paths.server_yaml.read_text()
    cfg = load_server_config(paths.server_yaml)
    assert Path(cfg.store.dsn_file).read_text() == dsn
    assert _mode(Path(cfg.store.dsn_file)) == 0o600
    assert "store_dsn" in r.created


def test_an_existing_server_yaml_is_kept_unless_forced(paths) -> None:
    cluster_init.init_server(paths, hosts=[])
    r = cluster_init.init_server(paths, hosts=[], ports={"agent": 17070})
    assert "server_yaml" in r.kept and "--force-config" in r.notes[0]
    assert load_server_config(paths.server_yaml).listen.agent == "0.0.0.0:7070"
    r = cluster_init.init_server(paths, hosts=[], ports={"agent": 17070}, force_config=True)
    assert next(s for s in r.steps if s.item == "server_yaml").action == "rewritten"
    assert load_server_config(paths.server_yaml).listen.agent == "0.0.0.0:17070"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"hosts": ["not a host"]},
        {"hosts": [], "ports": {"grpc": 1}},
        {"hosts": [], "ports": {"agent": 70000}},
        {"hosts": [], "store_dsn": "mysql://x"},
        {"hosts": [], "cluster_name": "../up"},
    ],
)
def test_bad_input_is_a_usage_error_before_anything_is_written(paths, kwargs) -> None:
    with pytest.raises(UsageError):
        cluster_init.init_server(paths, **kwargs)
    assert not paths.ca_cert.exists()


def test_a_node_bundle_holds_the_nodes_certificate_its_key_and_the_ca(paths) -> None:
    cluster_init.init_server(paths, hosts=["cp.example"])
    b = cluster_init.issue_node_bundle(paths, "gpu-1", control_planes=["cp.example:7070"])
    assert Path(b.dir) == paths.node_certs_dir / "gpu-1"
    assert pki.cert_common_name(Path(b.cert).read_bytes()) == "gpu-1"
    assert pki.issued_by(Path(b.cert).read_bytes(), paths.ca_cert.read_bytes())
    assert Path(b.ca_cert).read_bytes() == paths.ca_cert.read_bytes()
    assert _mode(Path(b.key)) == 0o600
    assert b.agent_config.node_id == "gpu-1"
    assert b.agent_config.control_planes == ["cp.example:7070"]
    assert b.agent_config.pki.cert == b.cert and b.agent_config.pki.key == b.key
    assert b.notes == []


def test_a_node_bundle_and_the_server_files_shake_hands(paths) -> None:
    cluster_init.init_server(paths, hosts=["cp.example"])
    b = cluster_init.issue_node_bundle(paths, "gpu-1", control_planes=["cp.example:7070"])
    server = tlsconf.server_context(paths.ca_cert, paths.server_cert, paths.server_key)
    client = tlsconf.client_context(Path(b.ca_cert), Path(b.cert), Path(b.key))
    seen = handshake(server, client, server_hostname="cp.example")
    assert seen["server_error"] is None and seen["client_error"] is None, seen
    assert tlsconf.peer_common_name(seen["peercert"]) == "gpu-1"


@pytest.mark.parametrize("node_id", ["../x", ".hidden", "a/b", "", "x" * 64])
def test_node_ids_that_leave_the_folder_or_hide_are_refused(paths, node_id: str) -> None:
    cluster_init.init_server(paths, hosts=["cp.example"])
    with pytest.raises(UsageError, match="node id"):
        cluster_init.issue_node_bundle(paths, node_id, control_planes=["cp.example:7070"])
    assert not (paths.pki_dir / "x").exists()
    assert not paths.node_certs_dir.exists() or not any(paths.node_certs_dir.iterdir())


def test_a_node_certificate_needs_the_cluster_ca(paths) -> None:
    with pytest.raises(PkiError, match="no cluster CA") as e:
        cluster_init.issue_node_bundle(paths, "gpu-1", control_planes=["cp:7070"])
    assert "llmgw server init" in e.value.hint


def test_the_default_control_plane_is_the_servers_first_host_and_agent_port(paths) -> None:
    cluster_init.init_server(paths, hosts=["cp.example"], ports={"agent": 17070})
    b = cluster_init.issue_node_bundle(paths, "gpu-1", control_planes=[])
    assert b.agent_config.control_planes == ["cp.example:17070"]


def test_a_control_plane_the_server_certificate_does_not_name_is_noted(paths) -> None:
    cluster_init.init_server(paths, hosts=["cp.example"])
    b = cluster_init.issue_node_bundle(paths, "gpu-1", control_planes=["10.9.9.9:7070"])
    assert "does not name 10.9.9.9" in b.notes[0]
    assert "--host 10.9.9.9" in b.notes[0]


def test_the_local_agent_gets_agent_yaml_once_and_a_certificate_when_missing(paths) -> None:
    cluster_init.init_server(paths, hosts=[])
    path = cluster_init.write_local_agent(paths, "local", ["127.0.0.1:7070"])
    cfg = load_agent_config(path)
    assert cfg.node_id == "local" and cfg.control_planes == ["127.0.0.1:7070"]
    assert Path(cfg.pki.cert) == paths.pki_dir / "node.crt"
    assert pki.cert_common_name(Path(cfg.pki.cert).read_bytes()) == "local"
    assert _mode(Path(cfg.pki.key)) == 0o600
    text, cert = path.read_text(), Path(cfg.pki.cert).read_bytes()

    cluster_init.write_local_agent(paths, "other", ["127.0.0.1:9999"])
    assert path.read_text() == text
    assert Path(cfg.pki.cert).read_bytes() == cert

    Path(cfg.pki.cert).unlink()
    cluster_init.write_local_agent(paths, "local", ["127.0.0.1:7070"])
    pki.load_cert_key(Path(cfg.pki.cert), Path(cfg.pki.key))


# --- the commands -------------------------------------------------------------


def _app(fn) -> typer.Typer:
    app = typer.Typer()
    app.command()(fn)
    return app


def test_server_init_json_prints_only_the_result_as_json(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LLMGW_HOME", str(tmp_path))
    res = CliRunner().invoke(_app(server_init), ["--host", "cp.example", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["created"] == ["ca", "server_cert", "admin_token", "server_yaml"]
    assert out["server_yaml"] == str(Paths.under(tmp_path).server_yaml)
    assert "cp.example" in out["server_hosts"]


def test_server_init_for_people_lists_what_it_did_and_the_next_step(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGW_HOME", str(tmp_path))
    runner = CliRunner()
    res = runner.invoke(_app(server_init), ["--name", "lab", "--agent-port", "17070"])
    assert res.exit_code == 0, res.output
    assert "created" in res.stdout and "SHA-256" in res.stdout
    assert res.stdout.rstrip().endswith("Start it: llmgw server")
    res = runner.invoke(_app(server_init), [])
    assert "nothing changed" in res.stdout


def test_server_init_reads_the_store_dsn_from_the_environment(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LLMGW_HOME", str(tmp_path))
    monkeypatch.setenv("LLMGW_STORE_DSN", "postgresql://u:pw@db/llmgw")
    res = CliRunner().invoke(_app(server_init), ["--json"])
    assert res.exit_code == 0, res.output
    assert "store_dsn" in json.loads(res.stdout)["created"]


def test_a_refused_init_says_why_on_stderr_with_the_pki_exit_code(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGW_HOME", str(tmp_path))
    paths = Paths.under(tmp_path)
    cluster_init.init_server(paths, hosts=[])
    paths.ca_key.unlink()
    res = CliRunner().invoke(_app(server_init), ["--json"])
    assert res.exit_code == PkiError.exit_code
    assert res.stdout == ""
    assert res.stderr.startswith("error: ") and "hint: " in res.stderr


def test_node_cert_prints_the_bundle_and_how_to_install_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LLMGW_HOME", str(tmp_path))
    cluster_init.init_server(Paths.under(tmp_path), hosts=["cp.example"])
    runner = CliRunner()
    res = runner.invoke(_app(node_cert), ["gpu-1"])
    assert res.exit_code == 0, res.output
    assert "node_id: gpu-1" in res.stdout and "/etc/llmgw/pki/node.crt" in res.stdout
    assert "llmgw agent" in res.stdout.splitlines()[-1]
    res = runner.invoke(_app(node_cert), ["gpu-2", "--control-plane", "cp.example:7070", "--json"])
    out = json.loads(res.stdout)
    assert out["agent_config"]["control_planes"] == ["cp.example:7070"]
    assert yaml.safe_load(Path(out["ca_cert"]).read_text()) is not None
    res = runner.invoke(_app(node_cert), ["../evil"])
    assert res.exit_code == UsageError.exit_code and "node id" in res.stderr
