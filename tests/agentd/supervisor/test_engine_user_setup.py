"""The agent's own setup makes llmgw-engine where it is missing.

A fake useradd (and BusyBox adduser) on PATH plays the system's: it writes
the user into a passwd file of the test's own, which the lookups read, so no
real user is ever made on this machine.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import pytest

from agentd.supervisor.users import ENGINE_USER, ensure_engine_user, useradd_argv

FAKE_UID = 64123


def fake_tool(bin_dir: Path, name: str, passwd_file: Path, *, fail: str = "") -> Path:
    """A shell script named ``name`` that records its argv and adds the user it names."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / name
    body = (
        f'echo "$@" >> {bin_dir}/{name}.calls\n'
        + (f'echo "{name}: {fail}" >&2\nexit 9\n' if fail else "")
        # The home follows --home-dir / -h; the name is the last argument.
        + 'home=""; prev=""; for a in "$@"; do\n'
        + '  [ "$prev" = "--home-dir" ] || [ "$prev" = "-h" ] && home="$a"; prev="$a"; last="$a"\n'
        + "done\n"
        + f'echo "$last:x:{FAKE_UID}:{FAKE_UID}::$home:/usr/sbin/nologin" >> {passwd_file}\n'
    )
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def lookup_in(passwd_file: Path):
    def lookup(name: str) -> pwd.struct_passwd:
        if passwd_file.exists():
            for line in passwd_file.read_text().splitlines():
                fields = line.split(":")
                if fields[0] == name:
                    return pwd.struct_passwd(
                        (fields[0], "x", int(fields[2]), int(fields[3]), "", fields[5], fields[6])
                    )
        raise KeyError(name)

    return lookup


def calls(bin_dir: Path, name: str) -> list[str]:
    path = bin_dir / f"{name}.calls"
    return path.read_text().splitlines() if path.exists() else []


def test_a_missing_engine_user_is_made_a_system_user_with_no_login_and_its_home_under_data_dir(
    tmp_path, monkeypatch
):
    passwd_file, bin_dir = tmp_path / "passwd", tmp_path / "bin"
    fake_tool(bin_dir, "useradd", passwd_file)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    data_dir = tmp_path / "agent"

    said = ensure_engine_user(data_dir, lookup=lookup_in(passwd_file))

    assert said == f"created the user {ENGINE_USER} (uid {FAKE_UID}) to run engines as"
    (argv,) = calls(bin_dir, "useradd")
    assert argv.split() == [
        "--system", "--user-group", "--no-create-home",
        "--home-dir", str(data_dir / "engine-home"), "--shell", argv.split()[-2], ENGINE_USER,
    ]  # fmt: skip
    assert argv.split()[-2].endswith(("nologin", "false"))
    home = data_dir / "engine-home"
    assert home.is_dir() and stat.S_IMODE(home.stat().st_mode) == 0o700
    if os.geteuid() == 0:
        assert home.stat().st_uid == FAKE_UID


def test_an_engine_user_already_there_is_kept_and_nothing_is_run(tmp_path, monkeypatch):
    passwd_file, bin_dir = tmp_path / "passwd", tmp_path / "bin"
    passwd_file.write_text(f"{ENGINE_USER}:x:991:991::/nonexistent:/usr/sbin/nologin\n")
    fake_tool(bin_dir, "useradd", passwd_file)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    said = ensure_engine_user(tmp_path / "agent", lookup=lookup_in(passwd_file))

    assert said == f"engines run as {ENGINE_USER} (uid 991)"
    assert calls(bin_dir, "useradd") == []
    assert not (tmp_path / "agent" / "engine-home").exists()  # its home is elsewhere


def test_on_busybox_the_engine_user_is_made_with_adduser(tmp_path, monkeypatch):
    passwd_file, bin_dir = tmp_path / "passwd", tmp_path / "bin"
    fake_tool(bin_dir, "adduser", passwd_file)
    monkeypatch.setenv("PATH", str(bin_dir))  # no useradd anywhere, as on Alpine

    said = ensure_engine_user(tmp_path / "agent", lookup=lookup_in(passwd_file))

    assert said.startswith(f"created the user {ENGINE_USER}")
    (argv,) = calls(bin_dir, "adduser")
    assert argv.split()[:4] == ["-S", "-D", "-H", "-h"] and argv.split()[-1] == ENGINE_USER


def test_a_useradd_that_fails_is_said_in_its_own_words_and_the_agent_goes_on(tmp_path, monkeypatch):
    passwd_file, bin_dir = tmp_path / "passwd", tmp_path / "bin"
    fake_tool(bin_dir, "useradd", passwd_file, fail="cannot lock /etc/passwd; try again later.")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    said = ensure_engine_user(tmp_path / "agent", lookup=lookup_in(passwd_file))

    assert said.startswith(f"could not create the user {ENGINE_USER} (useradd --system")
    assert said.endswith("useradd: cannot lock /etc/passwd; try again later.")


@pytest.mark.parametrize(
    ("tools", "first"), [({"useradd", "adduser"}, "useradd"), ({"adduser"}, "adduser")]
)
def test_useradd_is_preferred_where_both_exist(tools, first):
    argv = useradd_argv("/h", which=lambda t: f"/usr/sbin/{t}" if t in tools else None)
    assert argv[0] == first and argv[-1] == ENGINE_USER


def _has(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


@pytest.mark.one_worker("machine-users")  # whether llmgw-engine exists is the machine's
@pytest.mark.skipif(
    os.geteuid() != 0 or _has(ENGINE_USER), reason="needs root on a machine without the user"
)
async def test_a_root_agent_with_no_engine_user_runs_useradd_at_its_start(tmp_path, monkeypatch):
    from tests.cluster_fixture import running_cluster, wait_for

    # The fake records and adds to a passwd file of its own: this machine's stays as it is,
    # so the agent then says the user is still missing, in words.
    passwd_file, bin_dir = tmp_path / "passwd", tmp_path / "bin"
    fake_tool(bin_dir, "useradd", passwd_file)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.delenv("LLMGW_ALLOW_ROOT_ENGINES", raising=False)
    async with running_cluster(tmp_path) as cluster:
        cfg = cluster.agent_config("root-node", fixture="cpu_only_16c")
        cfg.engine_user = ""
        await cluster.start_agent("root-node", cfg=cfg)
        await wait_for(lambda: calls(bin_dir, "useradd"))
    (argv,) = calls(bin_dir, "useradd")
    assert argv.split()[:3] == ["--system", "--user-group", "--no-create-home"]
    assert f"--home-dir {cfg.data_dir}/engine-home" in argv
