"""Which files gatewayd reads as an outside provider's API key: those in one directory only.

An external model's ``api_key_files`` are read by the control plane and sent
to the model's ``url`` as ``Authorization: Bearer …``. Any one-line file
gatewayd can read would do (the engine key, the store's DSN file, the admin
token), and the url is the model's author's to choose: a model added with
``url: https://anywhere`` and ``file: …/secrets/admin-token`` sent that file
to anywhere. So a key file must lie under ``<secrets dir>/providers/``
(``Paths.provider_keys_dir``; ``/etc/llmgw/secrets/providers/`` on a system
install), links resolved: refused when the model is added, and again each
time a key is read (a catalog kept from before, or a link changed since).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def refused_key_file(file: str, keys_dir: Path | None) -> str | None:
    """Why ``file`` is not read as a provider's key (in words naming the directory), or None.

    What counts is where the file really is, links resolved as far as they exist
    (a file not there yet is judged by where it would be): a link in the
    directory to the engine key is refused, the directory itself may be a link
    (to where a site keeps such keys).
    """
    if keys_dir is None:
        return f"api key file {file}: this control plane reads no outside provider's key files"
    home = os.path.realpath(keys_dir)
    real = os.path.realpath(os.path.normpath(file))
    if real != home and os.path.commonpath([real, home]) == home:
        return None
    where = "" if real == os.path.normpath(file) else f" (it leads to {real})"
    return (
        f"api key file {file}{where} is not in {keys_dir}: gatewayd reads outside providers'"
        f" keys from that directory only; put the key there (one line, mode 0600), e.g."
        f" {keys_dir}/NAME.key, and name that file"
    )


def key_file_mark(file: str, keys_dir: Path | None) -> tuple[int, int, int]:
    """(inode, size, mtime_ns) of ``file``, to tell whether it changed since it was read;
    refused as ``read_key_file`` refuses."""
    _refuse(file, keys_dir)
    st = os.stat(os.path.realpath(file))
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_key_file(file: str, keys_dir: Path | None) -> tuple[tuple[int, int, int], str]:
    """(inode, size, mtime_ns) of ``file`` and its text, read as a provider's key.

    Refused (a PermissionError whose strerror says why, naming the directory)
    outside ``keys_dir``. The path checked is the one opened (its links
    resolved, the last one not followed), so a link made between the check and
    the read does not lead out.
    """
    _refuse(file, keys_dir)
    fd = os.open(os.path.realpath(file), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, encoding="utf-8") as f:
        st = os.fstat(f.fileno())
        return (st.st_ino, st.st_size, st.st_mtime_ns), f.read()


def _refuse(file: str, keys_dir: Path | None) -> None:
    why = refused_key_file(file, keys_dir)
    if why is not None:
        raise PermissionError(errno.EACCES, why)
