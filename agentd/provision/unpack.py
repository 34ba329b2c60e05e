"""Unpacking release archives without letting them write outside their directory.

Every member is checked before a byte is written, and the whole archive is
refused when one member is unsafe: an absolute name, a ``..``, a link whose
target leaves the directory, a member written through a link, a device file
or a FIFO. The error names the member. Files are written by us, not by
tarfile: as root, tarfile would also restore the archive's owners and
set-uid bits, which a release archive has no business setting.

Blocking: the agent calls ``unpack`` through ``asyncio.to_thread``.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from llmgw.errors import LlmgwError

# A llama.cpp CUDA build unpacks to well under 2 GB; an archive declaring
# more than this is a mistake or a bomb, and would fill the disk either way.
MAX_UNPACKED_BYTES = 16 * 1024**3

Kind = Literal["file", "dir", "symlink", "hardlink"]


class UnsafeArchive(LlmgwError):
    """An archive that would write outside its directory, or cannot be read."""


@dataclass
class _Member:
    name: str  # normalised: relative, no "." or ".." parts, no trailing slash
    kind: Kind
    mode: int
    size: int
    link: str = ""  # symlink target as written; hardlink target normalised
    open: Callable[[], IO[bytes]] | None = None


def unpack(archive: Path, dest: Path) -> list[str]:
    """Unpack a .tar.gz, .tar.xz or .zip into ``dest`` (created); return the member names.

    Raises UnsafeArchive naming the first unsafe member. Nothing is written
    when the names show it; a link found to leave only once on disk leaves
    ``dest`` for the caller to remove (installs unpack into a scratch directory).
    """
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            return _unpack(list(_zip_members(zf)), dest, archive.name)
    try:
        with tarfile.open(archive, "r:*") as tf:
            members = list(_tar_members(tf))
            return _unpack(members, dest, archive.name)
    except tarfile.TarError as exc:
        raise UnsafeArchive(
            f"{archive.name} is not an archive this agent can read (tar.gz, tar.xz or zip): {exc}"
        ) from exc


def _unpack(members: list[_Member], dest: Path, archive_name: str) -> list[str]:
    _check(members, archive_name)
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    for m in members:
        target = root / m.name
        if m.kind == "dir":
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            # A later member of the same name wins, as tar has it; never
            # write through what is there.
            target.unlink()
        if m.kind == "symlink":
            os.symlink(m.link, target)
        elif m.kind == "hardlink":
            shutil.copyfile(root / m.link, target)
            os.chmod(target, _safe_mode(m.mode))
        else:
            assert m.open is not None
            with m.open() as src, open(target, "xb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            os.chmod(target, _safe_mode(m.mode))
    # Checked on disk as well: a link may only resolve outside through other
    # links (``a -> .`` then ``b -> a/..``), which names alone do not show.
    for m in members:
        if m.kind == "symlink":
            real = os.path.realpath(root / m.name)
            if real != str(root) and not real.startswith(str(root) + os.sep):
                raise UnsafeArchive(
                    f"{archive_name}: {m.name} is a link that resolves outside the install "
                    f"directory ({m.link}); the archive was refused"
                )
    return [m.name for m in members]


def _check(members: list[_Member], archive_name: str) -> None:
    def refuse(member: str, why: str) -> UnsafeArchive:
        return UnsafeArchive(
            f"{archive_name}: member {member!r} {why}; the archive was refused",
            hint="an engine archive must unpack inside its own directory; "
            "check where this archive came from",
        )

    links: set[str] = set()
    regular: set[str] = set()
    total = 0
    for m in members:
        # Written through a link? Then where it lands depends on the link.
        parts = m.name.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in links:
                raise refuse(m.name, "would be written through a link")
        if m.kind == "symlink":
            if m.link.startswith("/"):
                raise refuse(m.name, f"is a link to an absolute path ({m.link})")
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(m.name), m.link))
            if resolved == ".." or resolved.startswith("../"):
                raise refuse(m.name, f"is a link that leaves the install directory ({m.link})")
            links.add(m.name)
        elif m.kind == "hardlink":
            if m.link not in regular:
                raise refuse(m.name, f"is a hard link to {m.link!r}, not a file earlier in it")
        elif m.kind == "file":
            regular.add(m.name)
            total += m.size
    if total > MAX_UNPACKED_BYTES:
        raise UnsafeArchive(
            f"{archive_name} would unpack to {total / 1e9:.1f} GB, more than the "
            f"{MAX_UNPACKED_BYTES / 1e9:.0f} GB an engine may take; the archive was refused"
        )


def _normalise(raw: str, archive_name: str) -> str:
    """A member name made relative and plain, or UnsafeArchive naming it."""

    def refuse(why: str) -> UnsafeArchive:
        return UnsafeArchive(f"{archive_name}: member {raw!r} {why}; the archive was refused")

    if "\x00" in raw or "\\" in raw:
        raise refuse("has a name no release would have")
    if raw.startswith("/"):
        raise refuse("has an absolute path")
    parts = [p for p in raw.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise refuse("has a '..' in its path and would land outside the install directory")
    return "/".join(parts)


def _tar_members(tf: tarfile.TarFile) -> Iterator[_Member]:
    name_of = tf.name.rsplit("/", 1)[-1] if isinstance(tf.name, str) else "archive"
    for info in tf:
        name = _normalise(info.name, name_of)
        if not name:
            continue  # "./" itself
        if info.isdir():
            yield _Member(name, "dir", info.mode, 0)
        elif info.issym():
            yield _Member(name, "symlink", info.mode, 0, link=info.linkname)
        elif info.islnk():
            try:
                target = _normalise(info.linkname, name_of)
            except UnsafeArchive:
                raise UnsafeArchive(
                    f"{name_of}: member {info.name!r} is a hard link to {info.linkname!r}, "
                    "outside the install directory; the archive was refused"
                ) from None
            yield _Member(name, "hardlink", info.mode, 0, link=target)
        elif info.isreg():
            yield _Member(name, "file", info.mode, info.size, open=_tar_opener(tf, info))
        else:
            what = (
                "a device file" if info.ischr() or info.isblk() else "a FIFO or other special file"
            )
            raise UnsafeArchive(
                f"{name_of}: member {info.name!r} is {what}; the archive was refused"
            )


def _tar_opener(tf: tarfile.TarFile, info: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def opener() -> IO[bytes]:
        f = tf.extractfile(info)
        assert f is not None  # a regular member always has content
        return f

    return opener


def _zip_members(zf: zipfile.ZipFile) -> Iterator[_Member]:
    name_of = Path(zf.filename or "archive.zip").name
    for info in zf.infolist():
        name = _normalise(info.filename, name_of)
        if not name:
            continue
        # Unix permissions (and the file type) live in the high 16 bits; a
        # zip made elsewhere has none, and its members are plain files.
        mode = info.external_attr >> 16
        if info.is_dir():
            yield _Member(name, "dir", mode or 0o755, 0)
        elif stat.S_ISLNK(mode):
            yield _Member(name, "symlink", mode, 0, link=zf.read(info).decode())
        elif mode and not stat.S_ISREG(mode):
            raise UnsafeArchive(
                f"{name_of}: member {info.filename!r} is a special file; the archive was refused"
            )
        else:
            yield _Member(
                name, "file", mode or 0o644, info.file_size, open=lambda i=info: zf.open(i)
            )


def _safe_mode(mode: int) -> int:
    # Keep who may read and run it; drop set-uid, set-gid, sticky and
    # write for others.
    return (stat.S_IMODE(mode) & 0o755) | 0o600
