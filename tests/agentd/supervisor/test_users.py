"""The user an engine runs as: never root."""

from __future__ import annotations

import os
import pwd
import sys

import psutil
import pytest

from agentd.supervisor import ENGINE_USER, SupervisorError, resolve_engine_user
from agentd.supervisor.users import ALLOW_ROOT_ENV, root_engines_allowed
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
    user = resolve_engine_user(None, euid=0, allow_root=False, **users(ROOT, ENGINE, NOBODY))
    assert (user.name, user.uid, user.gid, user.home, user.note) == (
        ENGINE_USER, 990, 990, "/var/lib/llmgw-engine", "",
    )  # fmt: skip


def test_without_the_engine_user_a_root_agent_refuses_rather_than_running_as_nobody():
    # Guards the old fallback: onboarded nodes ran every engine as nobody,
    # a user other daemons share.
    with pytest.raises(SupervisorError, match=f"this node has no user {ENGINE_USER}") as refused:
        resolve_engine_user(None, euid=0, allow_root=False, **users(ROOT, NOBODY))
    assert "restart the agent as root" in refused.value.hint
    assert "useradd --system" in refused.value.hint or "adduser -S" in refused.value.hint


def test_an_agent_that_is_not_root_runs_engines_as_itself():
    user = resolve_engine_user(None, euid=1000, allow_root=False, **users(ALICE))
    assert (user.name, user.uid, user.home) == ("alice", None, "/home/alice")


def test_a_named_user_is_taken_and_a_missing_one_refused():
    assert resolve_engine_user("alice", euid=0, allow_root=False, **users(ROOT, ALICE)).uid == 1000
    with pytest.raises(SupervisorError, match="there is no user bob on this node"):
        resolve_engine_user("bob", euid=0, allow_root=False, **users(ROOT))
    with pytest.raises(SupervisorError, match="cannot start engines as nobody"):
        resolve_engine_user("nobody", euid=1000, allow_root=False, **users(ALICE, NOBODY))


def test_an_engine_user_of_root_or_of_uid_0_is_refused_saying_what_to_set():
    toor = passwd("toor", 0, "/root")
    for name in ("root", "toor"):
        with pytest.raises(SupervisorError, match=f"engine_user {name} is root") as refused:
            resolve_engine_user(name, euid=0, allow_root=False, **users(ROOT, toor))
        assert refused.value.hint.startswith("leave engine_user empty in agent.yaml")
    with pytest.raises(SupervisorError, match="has uid 0"):
        resolve_engine_user(None, euid=0, allow_root=False, **users(passwd(ENGINE_USER, 0)))


def test_root_engines_run_only_where_the_environment_allows_them_on_purpose():
    assert resolve_engine_user("root", euid=0, allow_root=True, **users(ROOT)).uid is None
    assert resolve_engine_user(None, euid=0, allow_root=True, **users(ROOT)).uid is None
    assert root_engines_allowed({ALLOW_ROOT_ENV: "1"}) is True
    assert root_engines_allowed({ALLOW_ROOT_ENV: "yes"}) is False
    assert root_engines_allowed({}) is False


NEEDS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK), reason="needs root"
)
SAY_UID = "import os, time; print('uid', os.getuid(), flush=True); time.sleep(60)"


@NEEDS_ROOT
async def test_a_real_engine_is_never_started_as_root(harness, monkeypatch):
    monkeypatch.delenv(ALLOW_ROOT_ENV, raising=False)
    sup, events = harness.supervisor(run_as="root")
    spec = harness.spec().model_copy(update={"argv": ["/usr/bin/python3", "-c", SAY_UID]})

    info = await sup.start(spec)

    assert events.states()[-1] == "failed" and not info.pid
    assert "engine_user root is root (uid 0); an engine never runs as root" in info.reason


@NEEDS_ROOT
async def test_a_real_engine_runs_as_the_unprivileged_user_named(harness):
    sup, events = harness.supervisor(run_as="nobody")
    spec = harness.spec().model_copy(
        update={"argv": ["/usr/bin/python3", "-c", SAY_UID], "cwd": "/"}
    )
    info = await sup.start(spec)

    assert info.user == "nobody"
    assert psutil.Process(info.pid).uids().real == 65534
    await eventually(lambda: "uid 65534" in sup.log_tail("s1"), "no output from the engine")
    await sup.stop("s1", grace_s=2)
    assert events.states()[-1] == "stopped"


@pytest.mark.skipif(sys.platform != "linux", reason="Linux only")
def test_the_agents_own_user_resolves():
    me = pwd.getpwuid(os.geteuid()).pw_name
    # Root is its own user only where root engines are allowed on purpose.
    assert resolve_engine_user(me, allow_root=True).uid is None
