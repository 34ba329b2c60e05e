"""The user an engine runs as.

An agent runs as root (it reads NVML, installs engines, owns the node's
state); an engine runs code and weights that came from elsewhere, so it never
does. Engines run as ``llmgw-engine``, which the installer creates. The
supervisor does not create users: where that user is missing it falls back
to ``nobody`` and says so in the shard's reason, so an operator sees it.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from dataclasses import dataclass, field

from agentd.supervisor.model import SupervisorError

ENGINE_USER = "llmgw-engine"
FALLBACK_USER = "nobody"


@dataclass(frozen=True)
class EngineUser:
    """Who an engine runs as; ``uid`` None means as the agent itself, with no switch."""

    name: str
    uid: int | None
    gid: int | None
    home: str
    groups: list[int] = field(default_factory=list)
    # Said in the shard's reason when not empty: the fallback to nobody.
    note: str = ""


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
    lookup: Callable[[str], pwd.struct_passwd] = pwd.getpwnam,
    lookup_uid: Callable[[int], pwd.struct_passwd] = pwd.getpwuid,
) -> EngineUser:
    """The user to start an engine as.

    ``run_as`` names one; None chooses: as root, ``llmgw-engine`` (or
    ``nobody``, with a note, where it is missing); as anyone else, the agent's
    own user (``llmgw up`` without root has no one else to run as). Looked up
    at each start, so a user created while the agent runs is taken.
    """
    euid = os.geteuid() if euid is None else euid
    if run_as is not None:
        try:
            pw = lookup(run_as)
        except KeyError:
            raise SupervisorError(
                f"there is no user {run_as} on this node to run the engine as",
                hint=f"create it (useradd --system --no-create-home {run_as}) or choose another",
            ) from None
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
    try:
        return _switch_to(lookup(ENGINE_USER))
    except KeyError:
        pass
    try:
        pw = lookup(FALLBACK_USER)
    except KeyError:
        raise SupervisorError(
            f"this node has neither a user {ENGINE_USER} nor {FALLBACK_USER}; "
            "an engine is never run as root",
            hint=f"create one: useradd --system --no-create-home {ENGINE_USER}",
        ) from None
    return _switch_to(
        pw,
        note=(
            f"running as {FALLBACK_USER}: this node has no user {ENGINE_USER} "
            f"(create one: useradd --system --no-create-home {ENGINE_USER})"
        ),
    )
