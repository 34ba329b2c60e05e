"""The user an engine runs as: never root.

An agent runs as root (it reads NVML, installs engines, owns the node's
state); an engine runs code and weights that came from elsewhere, so it never
does. Engines run as ``llmgw-engine``: a system user with no login shell and
its home under the agent's data dir, made by ``llmgw node add`` and, where it
is still missing, by the agent itself when it starts as root
(``ensure_engine_user``). An agent not running as root (``llmgw up`` by an
ordinary user) has no one else to run engines as and runs them as itself.

``engine_user`` in agent.yaml names another user; naming root, or any user
of uid 0, is refused. The one way to run engines as root is
``LLMGW_ALLOW_ROOT_ENGINES=1`` in the agent's environment, for throwaway
machines where everything runs as root (CI containers, the test suite); it
is said in the agent's log at every start.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentd.supervisor.model import SupervisorError
from llmgw.fsutil import let_through, let_through_to

log = logging.getLogger(__name__)

ENGINE_USER = "llmgw-engine"
ALLOW_ROOT_ENV = "LLMGW_ALLOW_ROOT_ENGINES"
# The engine user's home, under the agent's data dir: engines' caches
# (~/.cache of vLLM, Triton, FlashInfer) land beside the agent's own files.
ENGINE_HOME = "engine-home"
NOLOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false")
USERADD_TIMEOUT_S = 60.0
SET_ENGINE_USER = (
    f"leave engine_user empty in agent.yaml (engines then run as {ENGINE_USER}) "
    "or name an unprivileged user"
)


@dataclass(frozen=True)
class EngineUser:
    """Who an engine runs as; ``uid`` None means as the agent itself, with no switch."""

    name: str
    uid: int | None
    gid: int | None
    home: str
    groups: list[int] = field(default_factory=list)
    # Said in the shard's reason when not empty.
    note: str = ""


def root_engines_allowed(environ: dict[str, str] | None = None) -> bool:
    """Whether LLMGW_ALLOW_ROOT_ENGINES=1 lets engines run as root (throwaway machines only)."""
    return (os.environ if environ is None else environ).get(ALLOW_ROOT_ENV, "") == "1"


def _switch_to(pw: pwd.struct_passwd, note: str = "") -> EngineUser:
    return EngineUser(
        name=pw.pw_name,
        uid=pw.pw_uid,
        gid=pw.pw_gid,
        home=pw.pw_dir,
        # Supplementary groups from /etc/group: on some distributions the GPU
        # device files are open only to a group such as video or render.
        groups=os.getgrouplist(pw.pw_name, pw.pw_gid),
        note=note,
    )


def _as_self(euid: int, lookup_uid: Callable[[int], pwd.struct_passwd]) -> EngineUser:
    try:
        pw = lookup_uid(euid)
        name, home = pw.pw_name, pw.pw_dir
    except KeyError:
        name, home = str(euid), os.environ.get("HOME", "/")
    return EngineUser(name=name, uid=None, gid=None, home=home)


def resolve_engine_user(
    run_as: str | None,
    *,
    euid: int | None = None,
    allow_root: bool | None = None,
    lookup: Callable[[str], pwd.struct_passwd] = pwd.getpwnam,
    lookup_uid: Callable[[int], pwd.struct_passwd] = pwd.getpwuid,
) -> EngineUser:
    """The user to start an engine as.

    ``run_as`` names one (never root); None chooses: as root, ``llmgw-engine``;
    as anyone else, the agent's own user. Looked up at each start, so a user
    created while the agent runs is taken.
    """
    euid = os.geteuid() if euid is None else euid
    allow_root = root_engines_allowed() if allow_root is None else allow_root
    if run_as is not None:
        try:
            pw = lookup(run_as)
        except KeyError:
            raise SupervisorError(
                f"there is no user {run_as} on this node to run the engine as",
                hint=f"create it (useradd --system --no-create-home {run_as}) or choose another",
            ) from None
        if pw.pw_uid == 0:
            if allow_root and euid == 0:
                return _as_self(euid, lookup_uid)
            raise SupervisorError(
                f"engine_user {run_as} is root (uid 0); an engine never runs as root",
                hint=SET_ENGINE_USER,
            )
        if pw.pw_uid == euid:
            return _as_self(euid, lookup_uid)
        if euid != 0:
            raise SupervisorError(
                f"the agent runs as uid {euid} and cannot start engines as {run_as}",
                hint="run the agent as root, or leave the engine user unset",
            )
        return _switch_to(pw)
    if euid != 0:
        return _as_self(euid, lookup_uid)
    if allow_root:
        # Said once in the agent's log at its start, not in every shard's reason.
        return _as_self(euid, lookup_uid)
    try:
        pw = lookup(ENGINE_USER)
    except KeyError:
        raise SupervisorError(
            f"this node has no user {ENGINE_USER} to run engines as, and an engine never"
            " runs as root",
            hint=f"restart the agent as root (it creates {ENGINE_USER}), or create it: "
            + " ".join(useradd_argv("/var/lib/llmgw-agent/engine-home", which=shutil.which)),
        ) from None
    if pw.pw_uid == 0:
        raise SupervisorError(
            f"the user {ENGINE_USER} on this node has uid 0; an engine never runs as root",
            hint=f"give {ENGINE_USER} its own unprivileged uid (usermod -u)",
        )
    return _switch_to(pw)


def share_gid(run_as: str | None) -> int | None:
    """The group that files made for engines (weights, installs) are shared with.

    The engine user's primary group when engines run as another user; None
    when they run as the agent itself (``llmgw up``, or root engines allowed),
    and then nothing about those files is changed. None too while there is
    no engine user yet: the files are shared when they are next used.
    """
    try:
        user = resolve_engine_user(run_as)
    except SupervisorError:
        return None
    return user.gid if user.uid is not None else None


def nologin_shell(exists: Callable[[str], bool] = os.path.exists) -> str:
    return next((s for s in NOLOGIN_SHELLS if exists(s)), NOLOGIN_SHELLS[-1])


def useradd_argv(
    home: str,
    *,
    which: Callable[[str], str | None] = shutil.which,
    exists: Callable[[str], bool] = os.path.exists,
) -> list[str]:
    """The command that makes the engine user here: shadow's useradd, or BusyBox's adduser.

    A system user (a uid below the login users'), its own group, no login
    shell, and a home that is not made (the agent makes it, owned by the user).
    """
    shell = nologin_shell(exists)
    if which("useradd") or not which("adduser"):
        return [
            "useradd", "--system", "--user-group", "--no-create-home",
            "--home-dir", home, "--shell", shell, ENGINE_USER,
        ]  # fmt: skip
    # Alpine and other BusyBox systems: -S system, -D no password, -H no home made.
    return ["adduser", "-S", "-D", "-H", "-h", home, "-s", shell, ENGINE_USER]


def ensure_engine_user(
    data_dir: Path,
    *,
    home: Path | None = None,
    reach: Sequence[Path] = (),
    lookup: Callable[[str], pwd.struct_passwd] = pwd.getpwnam,
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
) -> str:
    """Make ``llmgw-engine`` where it is missing, and its home; what was done, in words.

    With ``home`` (the agent's LLMGW_HOME), the user is let through every
    directory from it down to ``data_dir`` and each of ``reach`` (the engines
    dir): ``llmgw up`` as root keeps everything there, and a home made 0700
    would stop the engine at its door.

    Blocking (runs useradd): called through asyncio.to_thread by an agent
    that runs as root with no engine_user of its own. A failure is said, not
    raised: the agent keeps running, and a shard it is asked to start fails
    with the reason.
    """
    try:
        pw = lookup(ENGINE_USER)
        done = f"engines run as {ENGINE_USER} (uid {pw.pw_uid})"
    except KeyError:
        argv = useradd_argv(str(data_dir / ENGINE_HOME))
        try:
            made = run(argv, capture_output=True, text=True, timeout=USERADD_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as e:
            return f"could not create the user {ENGINE_USER} ({' '.join(argv)}): {e}"
        if made.returncode != 0:
            words = (made.stderr or made.stdout).strip().splitlines()
            return (
                f"could not create the user {ENGINE_USER} ({' '.join(argv)}):"
                f" {words[-1] if words else f'exit {made.returncode}'}"
            )
        try:
            pw = lookup(ENGINE_USER)
        except KeyError:
            return f"{' '.join(argv)} ran, yet there is no user {ENGINE_USER}"
        done = f"created the user {ENGINE_USER} (uid {pw.pw_uid}) to run engines as"
    own_home = data_dir / ENGINE_HOME
    if Path(pw.pw_dir) == own_home:
        try:
            own_home.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chown(own_home, pw.pw_uid, pw.pw_gid)
            os.chmod(own_home, 0o700)
            # The data dir is root's alone under UMask=0077: the engine user
            # passes through it to its home (and to the weights).
            let_through(data_dir, pw.pw_gid)
        except OSError as e:
            return f"{done}; its home {own_home} could not be made: {e.strerror}"
    if home is not None:
        try:
            for path in (data_dir, *reach):
                let_through_to(path, home, pw.pw_gid)
        except OSError as e:
            return f"{done}; it could not be let through {home}: {e.strerror}"
    return done
