"""Whether the engine user can reach what its command line names, looked at before it starts.

An engine that cannot read its weights or run its program fails with its
own words ("Permission denied", or a Python traceback ten lines deep).
The agent runs as root, for which os.access answers yes to everything, so
the mode bits are read instead: owner, group (the user's groups) or others,
the class the kernel itself would pick, on every directory on the way and
on the file. A path with a POSIX ACL is taken as reachable: its mode bits
alone do not tell.
"""

from __future__ import annotations

import os
import stat
from grp import getgrgid
from pathlib import Path
from pwd import getpwuid

from agentd.supervisor.users import EngineUser

R, W, X = 4, 2, 1
_ACL_XATTR = "system.posix_acl_access"


def share_hint(user: EngineUser) -> str:
    """What to do about a path the engine user cannot reach, naming its group."""
    try:
        group = getgrgid(user.gid).gr_name if user.gid is not None else "its group"
    except KeyError:
        group = str(user.gid)
    return (
        f"what the agent fetches and installs is shared with the group {group}; for a path"
        f" from elsewhere: chgrp -R {group} PATH && chmod -R g+rX PATH"
    )


def _rights(st: os.stat_result, uid: int, gids: set[int]) -> int:
    mode = st.st_mode
    if st.st_uid == uid:
        return (mode >> 6) & 7
    if st.st_gid in gids:
        return (mode >> 3) & 7
    return mode & 7


def _has_acl(path: str) -> bool:
    try:
        os.getxattr(path, _ACL_XATTR, follow_symlinks=False)
    except OSError:
        return False
    return True


def _owner_words(st: os.stat_result) -> str:
    try:
        owner = getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{stat.S_IMODE(st.st_mode):04o} {owner}:{group}"


def closed_on_the_way(path: str, uid: int, gids: set[int]) -> str | None:
    """The directory above ``path`` that ``uid`` may not pass through, in words; None if none.

    ``path`` itself is not looked at, nor where links lead.
    """
    for d in reversed(Path(path).parents):
        try:
            st = os.stat(d)
        except OSError:
            return None  # not there: the engine says so itself
        if not _rights(st, uid, gids) & X and not _has_acl(str(d)):
            return f"{d} ({_owner_words(st)}) does not let it through"
    return None


def blocked(path: str, want: int, uid: int, gids: set[int]) -> str | None:
    """Why ``uid`` cannot have ``want`` (R|W|X) on ``path``, in words; None when it can.

    Both the path as named and where its links lead are walked.
    """
    real = os.path.realpath(path)
    for way in dict.fromkeys((os.path.abspath(path), real)):
        if (why := closed_on_the_way(way, uid, gids)) is not None:
            return why
    try:
        st = os.stat(real)
    except OSError:
        return None
    if _rights(st, uid, gids) & want != want and not _has_acl(real):
        need = " and ".join(w for bit, w in ((R, "read"), (W, "write"), (X, "run")) if want & bit)
        what = "it" if real == os.path.abspath(path) else f"{real}, where it leads,"
        return f"{what} is {_owner_words(st)}, which it may not {need}"
    return None


def _wanted(argv: list[str], env: dict[str, str]) -> list[tuple[str, int]]:
    """The paths an engine's command line names, and what it needs of each."""
    found: list[tuple[str, int]] = []
    program = argv[0]
    if os.path.isabs(program):
        # A script is read by its interpreter as well as run.
        need = X
        try:
            with open(program, "rb") as f:
                need |= R if f.read(2) == b"#!" else 0
        except OSError:
            pass
        found.append((program, need))
    for arg in argv[1:]:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if os.path.isabs(value) and os.path.exists(value):
            found.append((value, R | X if os.path.isdir(value) else R))
    for d in env.get("LD_LIBRARY_PATH", "").split(":"):
        if os.path.isabs(d) and os.path.isdir(d):
            found.append((d, R | X))
    return found


def first_blocked(argv: list[str], env: dict[str, str], user: EngineUser) -> str | None:
    """What keeps ``user`` from starting this command, in plain words; None if nothing does.

    Blocking (a few stats per path). Nothing is looked at when the engine
    runs as the agent itself.
    """
    if user.uid is None or user.uid == 0:
        return None
    gids = {user.gid, *user.groups} - {None}
    for path, want in _wanted(argv, env):
        why = blocked(path, want, user.uid, gids)  # type: ignore[arg-type]
        if why is not None:
            return f"{user.name} cannot reach {path}: {why}"
    return None
