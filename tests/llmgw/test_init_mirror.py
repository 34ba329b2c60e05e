"""``server init --mirror`` and the setup plan's Mirror part: the files a mirror needs, kept when sound."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from llmgw.cli.main import app
from llmgw.config import load_server_config
from llmgw.errors import UsageError
from llmgw.mirror.config import load_mirror_config
from llmgw.paths import Paths
from llmgw.setup import plan as setup_plan
from llmgw.setup import words as setup_words
from llmgw.setup.mirror_init import bytes_text, init_mirror, parse_bytes
from llmgw.setup.plan import MirrorPart, SetupPlan, StarterPart, check, steps, to_command
from llmgw.tls import pki
from tests.llmgw.test_setup_plan import BIG, free_port, run_command


def init(tmp_path, *args: str):
    return CliRunner().invoke(
        app, ["server", "init", "--no-starter", *args], env={"LLMGW_HOME": str(tmp_path)}
    )


def test_server_init_with_a_mirror_writes_its_config_read_token_url_and_unit(tmp_path) -> None:
    res = init(tmp_path, "--host", "cp.example", "--mirror", "--mirror-max-bytes", "100G")
    assert res.exit_code == 0, res.output
    paths = Paths.under(tmp_path)
    cfg = load_mirror_config(paths.mirror_yaml)
    assert cfg.listen == "0.0.0.0:7080" and cfg.max_bytes == 100 * 10**9
    # The token files and data dir are left to the layout's defaults (they follow LLMGW_HOME).
    assert set(yaml.safe_load(paths.mirror_yaml.read_text())) == {"listen", "max_bytes"}
    token = paths.mirror_read_token_file
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(token.read_text().strip()) >= 40
    # The mirror listens everywhere; the cluster reaches it by the name nodes dial, over HTTPS.
    assert load_server_config(paths.server_yaml).mirror.urls == ["https://cp.example:7080"]
    unit = (paths.config_dir / "systemd" / "llmgw-mirror.service").read_text()
    assert f"mirror serve --config {paths.mirror_yaml}" in unit
    assert f"Environment=LLMGW_HOME={paths.home}" in unit and "Restart=always" in unit
    assert "llmgw mirror serve" in res.stdout
    assert res.stdout.rstrip().endswith("Start it: llmgw server")


def test_the_mirror_gets_an_admin_token_of_its_own_and_a_certificate_from_the_cluster_ca(
    tmp_path,
) -> None:
    # Guards: a mirror took the cluster's admin token and served plain HTTP by default.
    res = init(tmp_path, "--host", "cp.example", "--host", "10.0.0.5", "--mirror", "--json")
    assert res.exit_code == 0, res.output
    paths = Paths.under(tmp_path)
    mirror = json.loads(res.stdout)["mirror"]
    admin = paths.mirror_admin_token_file
    assert mirror["admin_token_file"] == str(admin)
    assert stat.S_IMODE(admin.stat().st_mode) == 0o600 and len(admin.read_text().strip()) >= 40
    assert admin.read_text() != paths.admin_token_file.read_text()
    assert admin.read_text() != paths.mirror_read_token_file.read_text()
    # HTTPS with a certificate the cluster CA signed, for every name nodes dial this machine by.
    cert = paths.mirror_cert.read_bytes()
    assert mirror["tls_cert"] == str(paths.mirror_cert) and mirror["url"].startswith("https://")
    assert pki.issued_by(cert, paths.ca_cert.read_bytes())
    assert {"cp.example", "10.0.0.5", "127.0.0.1"} <= set(pki.cert_hosts(cert))
    assert stat.S_IMODE(paths.mirror_key.stat().st_mode) == 0o600
    # The mirror and the control plane take the mirror's own token, by default.
    assert load_mirror_config(paths.mirror_yaml).admin_token_file == ""
    assert {s["item"]: s["action"] for s in mirror["steps"]}["tls_cert"] == "created"
    again = init(tmp_path, "--mirror", "--json")
    steps = {s["item"]: s["action"] for s in json.loads(again.stdout)["mirror"]["steps"]}
    assert steps["tls_cert"] == "kept" and steps["admin_token"] == "kept"
    assert paths.mirror_cert.read_bytes() == cert


def test_a_plain_http_mirror_is_a_choice_said_in_its_flag(tmp_path) -> None:
    res = init(tmp_path, "--host", "cp.example", "--mirror", "--mirror-plain-http", "--json")
    assert res.exit_code == 0, res.output
    paths = Paths.under(tmp_path)
    mirror = json.loads(res.stdout)["mirror"]
    assert mirror["url"] == "http://cp.example:7080" and mirror["tls_cert"] == ""
    assert load_mirror_config(paths.mirror_yaml).plain_http is True
    assert not paths.mirror_cert.exists()
    # Every other protection stays: its own admin token.
    assert paths.mirror_admin_token_file.exists()
    plan = SetupPlan(starter=StarterPart(on=False), mirror=MirrorPart(on=True, plain_http=True))
    assert to_command(plan)[-1] == "--mirror-plain-http"
    assert "plain HTTP" in setup_words.describe_part(plan, "mirror")
    assert "HTTPS" in setup_words.describe_part(
        plan.with_part("mirror", MirrorPart(on=True)), "mirror"
    )


def test_a_certificate_for_a_mirror_on_another_machine_is_issued_on_the_control_plane(
    tmp_path,
) -> None:
    assert init(tmp_path).exit_code == 0
    res = CliRunner().invoke(
        app,
        ["mirror", "cert", "--host", "mirror-2.example", "--host", "10.0.0.7", "--json"],
        env={"LLMGW_HOME": str(tmp_path)},
    )
    assert res.exit_code == 0, res.output
    bundle = json.loads(res.stdout)
    paths = Paths.under(tmp_path)
    cert = Path(bundle["cert"]).read_bytes()
    assert pki.issued_by(cert, paths.ca_cert.read_bytes())
    assert {"mirror-2.example", "10.0.0.7"} <= set(pki.cert_hosts(cert))
    assert Path(bundle["ca_cert"]).read_bytes() == paths.ca_cert.read_bytes()
    assert stat.S_IMODE(Path(bundle["key"]).stat().st_mode) == 0o600
    people = CliRunner().invoke(
        app, ["mirror", "cert", "--host", "m3.example"], env={"LLMGW_HOME": str(tmp_path)}
    )
    assert people.exit_code == 0, people.output
    assert "--tls-cert" in people.stdout and "mirror-admin-token" in people.stdout


def test_running_it_again_keeps_the_read_token_every_node_holds(tmp_path) -> None:
    assert init(tmp_path, "--mirror").exit_code == 0
    paths = Paths.under(tmp_path)
    token = paths.mirror_read_token_file.read_text()
    again = init(tmp_path, "--mirror", "--mirror-listen", "0.0.0.0:7081", "--json")
    assert again.exit_code == 0, again.output
    mirror = json.loads(again.stdout)["mirror"]
    assert paths.mirror_read_token_file.read_text() == token
    actions = {s["item"]: s for s in mirror["steps"]}
    assert {s["action"] for s in actions.values()} == {"kept"}
    # A flag the kept mirror.yaml does not say is not dropped silently.
    assert "--mirror-listen not applied" in actions["mirror_yaml"]["reason"]
    assert len(load_server_config(paths.server_yaml).mirror.urls) == 1


def test_a_url_already_in_mirror_urls_is_kept_and_others_stay_first(tmp_path) -> None:
    paths = Paths.under(tmp_path)
    assert init(tmp_path).exit_code == 0
    cfg = load_server_config(paths.server_yaml)
    cfg.mirror.urls = ["http://other:7080"]
    paths.server_yaml.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    done = init_mirror(paths, listen="10.0.0.5:7080", write_unit=False)
    assert done.url == "https://10.0.0.5:7080"
    assert load_server_config(paths.server_yaml).mirror.urls == [
        "http://other:7080",
        "https://10.0.0.5:7080",
    ]
    # The certificate names the address it listens on.
    assert "10.0.0.5" in pki.cert_hosts(paths.mirror_cert.read_bytes())


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--mirror-listen", "0.0.0.0:7080"], "give --mirror"),
        (["--mirror", "--mirror-max-bytes", "lots"], "not a size"),
        (["--mirror", "--mirror-listen", "nowhere"], "not HOST:PORT"),
    ],
)
def test_bad_mirror_flags_are_refused_before_anything_is_written(tmp_path, args, words) -> None:
    res = init(tmp_path, *args)
    assert res.exit_code == UsageError.exit_code, res.output
    assert words in res.stderr
    assert not Paths.under(tmp_path).config_dir.exists()


@pytest.mark.parametrize(
    ("text", "n"),
    [("0", 0), ("123", 123), ("100G", 10**11), ("1.5T", 15 * 10**11), ("2GiB", 2 << 30)],
)
def test_sizes_read_as_disks_say_them(text, n) -> None:
    assert parse_bytes(text) == n


def test_sizes_are_said_back_in_the_units_they_are_read_in() -> None:
    assert bytes_text(parse_bytes("100G")) == "100 GB"
    assert parse_bytes(bytes_text(parse_bytes("1.5T")).replace(" ", "")) == 15 * 10**11


def test_a_plan_with_a_mirror_is_the_same_install_as_its_command(tmp_path) -> None:
    port = free_port()
    plan = SetupPlan(
        starter=StarterPart(on=False),
        mirror=MirrorPart(on=True, listen=f"0.0.0.0:{port}", max_bytes=5 * 10**11),
    )
    argv = to_command(plan)
    assert argv[-5:] == ["--mirror", "--mirror-listen", f"0.0.0.0:{port}"] + [
        "--mirror-max-bytes",
        str(5 * 10**11),
    ]
    res = run_command(argv, tmp_path)
    assert res.exit_code == 0, res.output
    cfg = load_mirror_config(Paths.under(tmp_path).mirror_yaml)
    assert cfg.listen == f"0.0.0.0:{port}" and cfg.max_bytes == 5 * 10**11
    assert "mirror" in [s.key for s in steps(plan)]
    assert "quota 500 GB" in setup_words.describe_part(plan, "mirror")


def test_the_mirror_part_is_out_by_default_and_its_command_says_nothing_of_it() -> None:
    plan = setup_plan.default_plan(BIG)
    assert plan.mirror.on is False
    assert not any(a.startswith("--mirror") for a in to_command(plan))
    _, outs = setup_words.in_and_out(plan)
    assert any(line.startswith("Model mirror:") for line in outs)


def test_a_mirror_on_a_port_of_the_control_plane_is_refused_naming_the_flag() -> None:
    plan = SetupPlan(mirror=MirrorPart(on=True, listen="0.0.0.0:8080"))
    [refusal] = check(plan, BIG)
    assert refusal.part == "mirror" and "http port" in refusal.message
    assert refusal.flags == ["--mirror-listen"]
    busy = BIG.model_copy(update={"ports_in_use": (7080,)})
    [taken] = check(plan.with_part("mirror", MirrorPart(on=True)), busy)
    assert "7080 (mirror) is in use" in taken.message


async def test_a_setup_run_with_a_mirror_says_where_the_cluster_reaches_it(tmp_path) -> None:
    from llmgw.setup.run import PlanRun

    port = free_port()
    plan = SetupPlan(
        starter=StarterPart(on=False), mirror=MirrorPart(on=True, listen=f"127.0.0.1:{port}")
    )
    paths = Paths.under(tmp_path / "home")
    run = PlanRun(plan, paths, start=False, machine=lambda: BIG)
    ended = {u.key: u for u in [u async for u in run.updates()] if u.state != "running"}
    assert run.ok, ended
    assert list(ended) == ["check", "init", "node", "mirror"]
    assert f"https://127.0.0.1:{port}" in ended["mirror"].detail
    assert str(paths.mirror_read_token_file) in ended["mirror"].detail
