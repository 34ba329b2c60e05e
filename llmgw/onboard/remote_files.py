"""Files on the node: read their sha256 and put them in place (as root) only when they differ."""

from __future__ import annotations

import hashlib
import posixpath

from llmgw.onboard.events import OnboardError
from llmgw.onboard.ssh import NodeShell


async def remote_sha256(shell: NodeShell, paths: list[str]) -> dict[str, str]:
    """sha256 of each path that exists on the node (missing ones are left out)."""
    ran = await shell.run(["sha256sum", "--", *paths], timeout_s=60)
    out: dict[str, str] = {}
    for line in ran.stdout.splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) == 64 and name:
            out[name.strip()] = digest
    return out


async def install_file(
    shell: NodeShell, data: bytes, dest: str, *, mode: int, have: dict[str, str] | None = None
) -> bool:
    """Put ``data`` at ``dest`` with ``mode`` unless it is there already; True when written."""
    if have is not None and have.get(dest) == hashlib.sha256(data).hexdigest():
        await shell.run(["chmod", f"{mode:o}", dest], timeout_s=30)
        return False
    staged = await shell.put(data, posixpath.basename(dest))
    ran = await shell.run(["install", "-D", "-m", f"{mode:o}", staged, dest], timeout_s=60)
    if not ran.ok:
        raise OnboardError(
            f"could not write {dest} on {shell.target.host}: {ran.output}",
            hint="check the node's free space and that the folder is writable by root",
        )
    await shell.run(["rm", "-f", staged], sudo=False, timeout_s=30)
    return True


async def make_dir(shell: NodeShell, path: str, *, mode: int = 0o755) -> None:
    ran = await shell.run(["install", "-d", "-m", f"{mode:o}", path], timeout_s=30)
    if not ran.ok:
        raise OnboardError(f"could not create {path} on {shell.target.host}: {ran.output}")
