"""The user an engine runs as: never root."""

from __future__ import annotations

import os
import pwd
import sys

import psutil
import pytest

from agentd.supervisor import ENGINE_USER, SupervisorError, resolve_engine_user
from tests.agentd.supervisor.conftest import eventually


def passwd(name: str, uid: int, home: str = "/nonexistent") -> pwd.struct_passwd:
    return pwd.struct_passwd((name, "x", uid, uid, "", home, "/usr/sbin/nologin"))


def users(*entries: pwd.struct_passwd):
    by_name = {e.pw_name: e for e in entries}
    by_uid = {e.pw_uid: e for e in entries}

    def lookup(name):
        return by_name[name]

    def lookup_uid(uid):
        return by_uid[uid]

    return {"lookup": lookup, "lookup_uid": lookup_uid}


ROOT = passwd("root", 0, "/root")
ENGINE = passwd(ENGINE_USER, 990, "/var/lib/llmgw-engine")
NOBODY = passwd("nobody", 65534)
ALICE = passwd("alice", 1000, "/home/alice")


def test_a_root_agent_runs_engines_as_the_engine_user():
    user = resolve_engine_user(None, euid=0, **users(ROOT, ENGINE, NOBODY))
    assert (user.name, user.uid, user.gid, user.home, user.note) == (
        ENGINE_USER, 990, 990, "/var/lib/llmgw-engine", "",
    )  # fmt: skip


def test_without_the_engine_user_a_root_agent_falls_back_to_nobody_and_says_so():
    user = resolve_engine_user(None, euid=0, **users(ROOT, NOBODY))
    assert (user.name, user.uid) == ("nobody", 65534)
    assert user.note.startswith(f"running as nobody: this node has no user {ENGINE_USER}")


def test_a_root_agent_with_no_one_to_run_as_refuses_rather_than_running_as_root():
    with pytest.raises(SupervisorError, match="an engine is never run as root"):
        resolve_engine_user(None, euid=0, **users(ROOT))


def test_an_agent_that_is_not_root_runs_engines_as_itself():
    user = resolve_engine_user(None, euid=1000, **users(ALICE))
    assert (user.name, user.uid, user.home) == ("alice", None, "/home/alice")


def test_a_named_user_is_taken_and_a_missing_one_refused():
    assert resolve_engine_user("alice", euid=0, **users(ROOT, ALICE)).uid == 1000
    assert resolve_engine_user("root", euid=0, **users(ROOT)).uid is None
    with pytest.raises(SupervisorError, match="there is no user bob on this node"):
        resolve_engine_user("bob", euid=0, **users(ROOT))
    with pytest.raises(SupervisorError, match="cannot start engines as nobody"):
        resolve_engine_user("nobody", euid=1000, **users(ALICE, NOBODY))


def _has_engine_user() -> bool:
    try:
        pwd.getpwnam(ENGINE_USER)
    except KeyError:
        return False
    return True


@pytest.mark.skipif(
    os.geteuid() != 0 or _has_engine_user() or not os.access("/usr/bin/python3", os.X_OK),
    reason="needs root on a node without the engine user",
)
async def test_a_real_engine_runs_as_nobody_where_the_engine_user_is_missing(harness):
    sup, events = harness.supervisor(run_as=None)
    code = "import os, time; print('uid', os.getuid(), flush=True); time.sleep(60)"
    spec = harness.spec().model_copy(update={"argv": ["/usr/bin/python3", "-c", code], "cwd": "/"})
    info = await sup.start(spec)

    assert info.user == "nobody"
    assert "running as nobody: this node has no user llmgw-engine" in events.last().reason
    assert psutil.Process(info.pid).uids().real == 65534
    await eventually(lambda: "uid 65534" in sup.log_tail("s1"), "no output from the engine")
    await sup.stop("s1", grace_s=2)
    assert events.states()[-1] == "stopped"


@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_the_agents_own_user_resolves():
    assert resolve_engine_user(pwd.getpwuid(os.geteuid()).pw_name).uid is None
