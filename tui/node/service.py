"""Restarting this node's agent from the node console.

Where systemd runs the agent as the ``llmgw-agent`` unit, restarting is
``systemctl restart llmgw-agent``; the engines keep running and the new agent
adopts them. Anywhere else (``llmgw up``, a container, no systemd) the
console cannot know how the agent was started, so it says how to do it.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Protocol

from llmgw.agent_status import PROBE_TIMEOUT_S
from llmgw.errors import LlmgwError

UNIT = "llmgw-agent"
# The agent stops within its 2 s stream grace and starts in about a second;
# systemd may also wait out a slow stop. Longer than this is worth saying.
RESTART_TIMEOUT_S = 30.0
BY_HAND = "restart it where it runs: stop `llmgw agent` (Ctrl-C or SIGTERM) and start it again"


class ServiceError(LlmgwError):
    """The agent could not be restarted from here; the hint says how to do it."""


class AgentService(Protocol):
    async def restart(self) -> str:
        """Restart the agent; what was done, in one line. ServiceError when it cannot."""


async def _run(argv: list[str], timeout_s: float) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(errors="replace").strip()


class SystemdService:
    """The agent as the systemd unit ``unit``, through ``systemctl``."""

    def __init__(self, unit: str = UNIT, systemctl: str | None = None) -> None:
        self.unit = unit
        self._systemctl = systemctl

    async def restart(self) -> str:
        systemctl = self._systemctl or shutil.which("systemctl")
        if not systemctl or not shutil.which(systemctl):
            raise ServiceError("systemctl is not on this machine", hint=BY_HAND)
        try:
            code, out = await _run(
                [systemctl, "show", "--property=LoadState", "--value", self.unit],
                PROBE_TIMEOUT_S,
            )
        except TimeoutError as e:
            raise ServiceError(
                f"systemctl did not answer within {PROBE_TIMEOUT_S:g} s", hint=BY_HAND
            ) from e
        if code != 0:
            # "System has not been booted with systemd", a container, …
            said = out.splitlines()[0] if out else f"exit status {code}"
            raise ServiceError(f"systemd cannot be asked here ({said})", hint=BY_HAND)
        if out != "loaded":
            raise ServiceError(f"there is no {self.unit} service on this machine", hint=BY_HAND)
        try:
            code, out = await _run([systemctl, "restart", self.unit], RESTART_TIMEOUT_S)
        except TimeoutError as e:
            raise ServiceError(
                f"the {self.unit} service did not restart within {RESTART_TIMEOUT_S:g} s",
                hint=f"see why: journalctl -u {self.unit} -n 50",
            ) from e
        if code != 0:
            raise ServiceError(
                f"systemctl restart {self.unit} failed: {out or f'exit status {code}'}",
                hint=f"see why: journalctl -u {self.unit} -n 50",
            )
        return f"restarted {self.unit}; engines keep running and the agent takes them back"
