"""``llmgw mirror serve``: its flags over mirror.yaml, and what it refuses before the daemon starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from llmgw.cli.main import app
from llmgw.cli.mirror_cmds import serve_config
from llmgw.errors import ConfigError, UsageError
from llmgw.mirror.config import MirrorServeConfig, MirrorTls
from llmgw.paths import Paths

FILE = MirrorServeConfig(
    listen="0.0.0.0:7080",
    peers=["http://10.0.0.6:7080"],
    max_bytes=10**12,
    sync_interval_s=30,
    tls=MirrorTls(cert="/etc/m.crt", key="/etc/m.key"),
)


def test_flags_win_over_mirror_yaml_and_what_they_leave_out_is_kept() -> None:
    cfg = serve_config(
        FILE,
        listen="127.0.0.1:7181",
        peers=["http://10.0.0.7:7080", "http://10.0.0.8:7080/"],
        max_bytes="100G",
        sync_interval_s=2.5,
        client_ca="/etc/ca.crt",
    )
    assert cfg.listen == "127.0.0.1:7181"
    # --peer names the whole list: a peer in the file is not added to it.
    assert cfg.peers == ["http://10.0.0.7:7080", "http://10.0.0.8:7080"]
    assert cfg.max_bytes == 100 * 10**9 and cfg.sync_interval_s == 2.5
    assert cfg.tls == MirrorTls(cert="/etc/m.crt", key="/etc/m.key", client_ca="/etc/ca.crt")
    assert serve_config(FILE) == FILE


def test_an_empty_upstream_makes_an_offline_mirror() -> None:
    assert serve_config(FILE).upstream == "https://huggingface.co"
    assert serve_config(FILE, upstream="").upstream == ""
    assert serve_config(FILE, upstream="http://127.0.0.1:9/").upstream == "http://127.0.0.1:9"


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ({"listen": "nowhere"}, "listen"),
        ({"peers": ["ftp://x"]}, "a peer"),
        ({"upstream": "hub.example"}, "upstream"),
        ({"max_bytes": "lots"}, "not a size"),
    ],
)
def test_a_bad_flag_is_said_in_mirror_yaml_s_words(flags, words) -> None:
    with pytest.raises(UsageError) as e:
        serve_config(MirrorServeConfig(), **flags)
    assert words in e.value.message


def test_https_needs_a_certificate_and_its_key_together() -> None:
    with pytest.raises(UsageError, match="both a certificate and its key"):
        serve_config(MirrorServeConfig(), tls_cert="/etc/m.crt")
    with pytest.raises(UsageError, match="over HTTPS only"):
        serve_config(MirrorServeConfig(), client_ca="/etc/ca.crt")


def test_without_a_read_token_it_says_how_to_make_one_and_starts_nothing(tmp_path) -> None:
    res = CliRunner().invoke(
        app,
        ["mirror", "serve", "--listen", "127.0.0.1:0"],
        env={"LLMGW_HOME": str(tmp_path), "COLUMNS": "400"},
    )
    assert res.exit_code == ConfigError.exit_code, res.output
    said = " ".join(res.stderr.split())  # rich wraps lines at the terminal's width
    assert "mirror-read-token" in said and "server init --mirror" in said
    assert not Paths.under(tmp_path).mirror_data_dir.exists()


def test_a_config_named_that_does_not_exist_is_refused(tmp_path) -> None:
    res = CliRunner().invoke(
        app,
        ["mirror", "serve", "--config", str(tmp_path / "nope.yaml")],
        env={"LLMGW_HOME": str(tmp_path), "COLUMNS": "400"},
    )
    assert res.exit_code == ConfigError.exit_code
    assert "nope.yaml does not exist" in " ".join(res.stderr.split())
