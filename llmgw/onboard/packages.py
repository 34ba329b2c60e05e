"""The packages step: the OS libraries engines need, from the node's own package manager.

Named per family (libgomp1 on Debian's, libgomp on Red Hat's, …) and
installed only when missing. A command that fails only because another
apt-get or dpkg holds the lock (cloud-init, unattended-upgrades on a new
machine) is retried for up to ten minutes, shown as waiting, not failing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from llmgw.onboard.checks import NodeFacts, package_manager
from llmgw.onboard.events import Clock, OnboardError, StepEvent
from llmgw.onboard.ssh import NodeShell, Ran

STEP = "packages"
# OpenMP's runtime: llama.cpp's CPU build links it.
NEEDED = {
    "apt-get": ["libgomp1"],
    "dnf": ["libgomp"],
    "yum": ["libgomp"],
    "zypper": ["libgomp1"],
}
LOCK_WORDS = (
    "could not get lock",
    "unable to lock",
    "unable to acquire the dpkg frontend lock",
    "is another process using it",
    "system management is locked",
    "waiting for cache lock",
)
# How often a wait is reported again while it goes on.
WAIT_REPORT_S = 30.0


def is_lock_failure(ran: Ran) -> bool:
    text = ran.output.lower()
    return not ran.ok and any(w in text for w in LOCK_WORDS)


async def install_packages(
    shell: NodeShell, facts: NodeFacts, *, lock_wait_s: float, lock_retry_s: float
) -> AsyncIterator[StepEvent]:
    clock = Clock()
    pm = package_manager(facts)
    wanted = NEEDED.get(pm, [])
    missing = [p for p in wanted if not await _installed(shell, pm, p)]
    if not missing:
        yield StepEvent(
            step=STEP,
            status="kept",
            detail=f"{', '.join(wanted)} installed already",
            elapsed_s=clock.elapsed(),
        )
        return
    yield StepEvent(
        step=STEP,
        status="running",
        detail=f"installing {', '.join(missing)} with {pm}",
        elapsed_s=clock.elapsed(),
    )
    commands: list[list[str]] = []
    env: dict[str, str] = {}
    if pm == "apt-get":
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        commands.append(["apt-get", "update", "-q"])
        commands.append(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing])
    elif pm in ("dnf", "yum"):
        commands.append([pm, "install", "-y", *missing])
    else:
        commands.append(["zypper", "--non-interactive", "install", *missing])
    for argv in commands:
        waited_since: float | None = None
        last_report = -WAIT_REPORT_S
        while True:
            ran = await shell.run(argv, env=env, timeout_s=900)
            if ran.ok:
                break
            if not is_lock_failure(ran):
                raise OnboardError(
                    f"{' '.join(argv)} failed on {shell.target.host}: {ran.output[-800:]}",
                    hint=f"run it there by hand to see why, then node add again: sudo {' '.join(argv)}",
                )
            now = clock.elapsed()
            if waited_since is None:
                waited_since = now
            if now - waited_since > lock_wait_s:
                raise OnboardError(
                    f"another {pm} held the package lock on {shell.target.host} for "
                    f"{lock_wait_s / 60:g} minutes",
                    hint="see what holds it (ps aux | grep -E 'apt|dpkg|unattended'), let it "
                    "finish or stop it, then run node add again",
                )
            if now - last_report >= WAIT_REPORT_S:
                last_report = now
                yield StepEvent(
                    step=STEP,
                    status="waiting",
                    detail=f"waiting for another {pm} to finish ({_first_line(ran)})",
                    elapsed_s=now,
                )
            await asyncio.sleep(lock_retry_s)
    yield StepEvent(
        step=STEP,
        status="ok",
        detail=f"installed {', '.join(missing)} with {pm}",
        elapsed_s=clock.elapsed(),
    )


async def _installed(shell: NodeShell, pm: str, package: str) -> bool:
    if pm == "apt-get":
        ran = await shell.run(
            ["dpkg-query", "-W", "-f=${Status}", package], sudo=False, timeout_s=60
        )
        return ran.ok and "install ok installed" in ran.stdout
    ran = await shell.run(["rpm", "-q", package], sudo=False, timeout_s=60)
    return ran.ok


def _first_line(ran: Ran) -> str:
    for line in ran.output.splitlines():
        if any(w in line.lower() for w in LOCK_WORDS):
            return line.strip()[:200]
    return ran.output.splitlines()[0][:200] if ran.output else ""
