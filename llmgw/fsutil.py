"""Safe file writes (temp file, fsync, rename), and files shared with the engine user's group."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes | str, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never half.

    The file is created with ``mode`` from the start (secrets are never
    readable by others, not even for a moment).
    """
    if isinstance(data, str):
        data = data.encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_secret(path: Path, data: bytes | str) -> None:
    """Write a secret: 0600, atomically, in a directory only the owner can read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, data, mode=0o600)


# What the agent (root) makes for its engines — weights, engine installs — is
# shared with the engine user's group alone: the owner writes, the group reads
# (and runs what is a program), others get nothing. Set explicitly, so a
# systemd UMask=0077 (everything root-only) or a loose umask changes nothing.
SHARED_DIR_MODE = 0o750
SHARED_FILE_MODE = 0o640
SHARED_PROGRAM_MODE = 0o750


def share_entry(path: Path, gid: int) -> bool:
    """Give one file or directory to group ``gid`` read-only; True when it changed.

    Owned by the agent's own user (a file someone else owns could be
    rewritten by them); links are left alone (what they point at is shared
    where it lies); a regular file with its owner's execute bit is a program.
    """
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        mode = SHARED_DIR_MODE
    elif stat.S_ISREG(st.st_mode):
        mode = SHARED_PROGRAM_MODE if st.st_mode & stat.S_IXUSR else SHARED_FILE_MODE
    else:
        return False
    changed = False
    uid = os.geteuid()
    if (st.st_uid, st.st_gid) != (uid, gid):
        os.chown(path, uid, gid, follow_symlinks=False)
        changed = True
    # chown clears set-uid/set-gid bits, so the mode is set after it. Not a
    # link (seen above), and only root writes where these lie: a plain chmod
    # (Linux has no lchmod; glibc before 2.32 refuses one).
    if stat.S_IMODE(st.st_mode) != mode or changed:
        os.chmod(path, mode)
        changed = True
    return changed


def share_tree(root: Path, gid: int) -> int:
    """``share_entry`` for ``root`` and everything under it, links not followed; how many changed."""
    changed = int(share_entry(root, gid))
    for top, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            changed += share_entry(Path(top) / name, gid)
    return changed


def let_through(directory: Path, gid: int) -> bool:
    """Let group ``gid`` pass through ``directory`` (search only, no listing); True if changed.

    For the one directory above what is shared (the agent's data dir, made
    0700 under UMask=0077). Only a directory of the agent's own, whose group
    is root's or ``gid`` already, or has no rights, is changed: taking a
    directory from another group would lock that group out.
    """
    st = os.stat(directory)
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IXOTH or (st.st_gid == gid and mode & stat.S_IXGRP):
        return False
    if st.st_uid != os.geteuid() or (st.st_gid not in (0, gid) and mode & 0o070):
        return False
    if st.st_gid != gid:
        os.chown(directory, -1, gid)
        mode &= ~0o070  # root's group's rights are not the engine group's
    os.chmod(directory, mode | stat.S_IXGRP)
    return True


def let_through_to(path: Path, top: Path, gid: int) -> None:
    """``let_through`` every directory from ``top`` down to the one above ``path``.

    The way from a home the agent made (``LLMGW_HOME``, 0700 under UMask=0077)
    to what it shares below it; nothing above ``top`` is touched, nor a
    ``path`` outside it.
    """
    path, top = Path(path), Path(top)
    if top not in path.parents:
        return
    for d in reversed(path.parents):
        if (d == top or top in d.parents) and d.is_dir():
            let_through(d, gid)


def share_with_group(path: Path, gid: int, *, top: Path, tree: bool = False) -> None:
    """Share ``path`` (with ``tree``, all under it) with group ``gid``, and the way to it.

    Every directory from ``path`` up to ``top`` is shared as well, and the
    group may pass through the directory above ``top``.
    """
    path, top = Path(path), Path(top)
    if tree and path.is_dir() and not path.is_symlink():
        share_tree(path, gid)
    else:
        share_entry(path, gid)
    for parent in path.parents:
        if parent != top and top not in parent.parents:
            break
        share_entry(parent, gid)
        if parent == top:
            break
    let_through(top.parent, gid)


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """The hex sha256 of a file, read in chunks (blocking: call it through a thread)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()
