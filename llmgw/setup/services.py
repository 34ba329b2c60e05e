"""What llmgw runs on this machine, and stopping and starting it: ``llmgw stop|start|restart``.

Three parts, each there when its config is: the mirror (mirror.yaml), the
control plane (server.yaml) and the agent (agent.yaml). They start in that
order — gatewayd pins models through the mirror from its start, the agent
dials gatewayd — and stop in the reverse one. The agent stops first and alone:
its engines keep running, and it adopts them when it comes back.

A part runs under systemd when systemd knows its unit (on a system install;
under LLMGW_HOME only a unit linked from that home); otherwise as a detached
process found by the pid file it writes itself (llmgw/pidfile.py), its output
in the log dir. Every start waits, within a bound, for the part to answer
(the admin API, the agent's status socket, the mirror's /health), so
"started" means it serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel

from llmgw.admin_client import AdminClient
from llmgw.agent_status import read_status
from llmgw.config import split_host_port
from llmgw.errors import LlmgwError
from llmgw.mirror.config import load_mirror_config
from llmgw.onboard.layout import UNIT_NAME as AGENT_UNIT_NAME
from llmgw.paths import ENV_HOME, Paths
from llmgw.pidfile import live_pid, read_pid
from llmgw.setup.mirror_init import MIRROR_UNIT_NAME, llmgw_program
from llmgw.setup.server_unit import SERVER_UNIT_NAME
from llmgw.setup.systemd import Systemd

# Bounds, not pauses: a start returns as soon as the part answers.
READY_TIMEOUT_S = 30.0
# gatewayd finishes the requests in flight on SIGTERM; past this it is killed.
STOP_TIMEOUT_S = 30.0
_PROBE_INTERVAL_S = 0.2

PartName = Literal["mirror", "control plane", "agent"]
Action = Literal[
    "started", "stopped", "killed", "already running", "not running", "not set up here", "failed"
]


class PartResult(BaseModel):
    """What one command did with one part, for people and ``--json``."""

    part: PartName
    action: Action
    via: Literal["systemd", "process", ""] = ""
    pid: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.action != "failed"


class ServicesReply(BaseModel):
    command: Literal["start", "stop", "restart"]
    parts: list[PartResult]
    ok: bool


@dataclass(frozen=True)
class Service:
    part: PartName
    unit: str
    config: Path
    pid_file: Path
    args: tuple[str, ...]
    log_file: Path

    @property
    def word(self) -> str:
        """The word of its command line that says which llmgw process it is."""
        return self.args[0]


def services(paths: Paths) -> list[Service]:
    """The parts in the order they start."""
    logs = paths.log_dir
    return [
        Service(
            "mirror",
            MIRROR_UNIT_NAME,
            paths.mirror_yaml,
            paths.mirror_pid_file,
            ("mirror", "serve"),
            logs / "mirror.log",
        ),
        Service(
            "control plane",
            SERVER_UNIT_NAME,
            paths.server_yaml,
            paths.server_pid_file,
            ("server",),
            logs / "gatewayd.log",
        ),
        Service(
            "agent",
            AGENT_UNIT_NAME,
            paths.agent_yaml,
            paths.agent_pid_file,
            ("agent",),
            logs / "agentd.log",
        ),
    ]


class Services:
    """Stops and starts this machine's parts; ``systemd`` is the one to ask (a test's fake)."""

    def __init__(self, paths: Paths, systemd: Systemd | None = None) -> None:
        self.paths = paths
        self.systemd = systemd or Systemd.here()

    def start(self) -> list[PartResult]:
        # Each part is tried even when one before it failed, as systemd would at boot:
        # an agent keeps dialing until its control plane answers.
        return [self._start(s) for s in services(self.paths)]

    def stop(self) -> list[PartResult]:
        return [self._stop(s) for s in reversed(services(self.paths))]

    def _under_systemd(self, s: Service) -> bool:
        return self.systemd.knows(s.unit, self.paths.home)

    # -- start ---------------------------------------------------------------

    def _start(self, s: Service) -> PartResult:
        if not s.config.exists():
            return PartResult(part=s.part, action="not set up here", detail=f"no {s.config.name}")
        if self._under_systemd(s):
            return self._start_unit(s)
        pid = live_pid(s.pid_file, s.word)
        if pid is not None:
            return PartResult(part=s.part, action="already running", via="process", pid=pid)
        s.log_file.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.paths.home is not None:
            env[ENV_HOME] = str(self.paths.home)
        with s.log_file.open("ab") as log:
            proc = subprocess.Popen(
                [*llmgw_program(), *s.args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                cwd="/",
                # Its own session: it outlives this command and no terminal's Ctrl-C reaches it.
                start_new_session=True,
            )

        def exited() -> bool:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_PROBE_INTERVAL_S)
            return proc.returncode is not None

        failure = self._wait_up(s, exited)
        if failure:
            if proc.returncode is None:
                proc.kill()
                proc.wait()
            return PartResult(
                part=s.part, action="failed", via="process", pid=proc.pid, detail=failure
            )
        return PartResult(
            part=s.part, action="started", via="process", pid=proc.pid, detail=f"log {s.log_file}"
        )

    def _start_unit(self, s: Service) -> PartResult:
        sd = self.systemd
        if sd.is_active(s.unit):
            return PartResult(
                part=s.part, action="already running", via="systemd", pid=sd.main_pid(s.unit)
            )
        ran = sd.run("start", s.unit)
        if not ran.ok:
            return PartResult(
                part=s.part,
                action="failed",
                via="systemd",
                detail=f"systemctl start {s.unit}: {ran.output[-300:]} (see journalctl -u "
                f"{s.unit})",
            )

        def exited() -> bool:
            time.sleep(_PROBE_INTERVAL_S)
            return not sd.is_active(s.unit)

        failure = self._wait_up(s, exited, log_hint=f"journalctl -u {s.unit}")
        action: Action = "failed" if failure else "started"
        return PartResult(
            part=s.part, action=action, via="systemd", pid=sd.main_pid(s.unit), detail=failure
        )

    def _wait_up(self, s: Service, exited: Callable[[], bool], log_hint: str = "") -> str:
        """ "" once ``s`` answers; else what went wrong. ``exited`` also paces the probes."""
        hint = log_hint or f"see {s.log_file}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            try:
                if self._answers(s):
                    return ""
            except (LlmgwError, OSError) as e:
                last = getattr(e, "message", "") or str(e)
            if exited():
                return f"exited while starting: {_log_tail(s.log_file) or last} ({hint})"
        return f"did not answer within {READY_TIMEOUT_S:g} s ({last}; {hint})"

    def _answers(self, s: Service) -> bool:
        if s.part == "control plane":
            return asyncio.run(_admin_answers(self.paths))
        if s.part == "agent":
            asyncio.run(read_status(self.paths.agent_status_socket))
            return True
        return _mirror_answers(s.config)

    # -- stop ----------------------------------------------------------------

    def _stop(self, s: Service) -> PartResult:
        note = (
            "its engines keep running; it adopts them when it starts" if s.part == "agent" else ""
        )
        if self._under_systemd(s):
            sd = self.systemd
            if not sd.is_active(s.unit):
                return PartResult(part=s.part, action="not running", via="systemd")
            pid = sd.main_pid(s.unit)
            ran = sd.run("stop", s.unit)
            if not ran.ok:
                return PartResult(
                    part=s.part,
                    action="failed",
                    via="systemd",
                    pid=pid,
                    detail=f"systemctl stop {s.unit}: {ran.output[-300:]}",
                )
            return PartResult(part=s.part, action="stopped", via="systemd", pid=pid, detail=note)
        pid = live_pid(s.pid_file, s.word)
        if pid is None:
            action: Action = "not running" if s.config.exists() else "not set up here"
            return PartResult(part=s.part, action=action)
        up = _supervising_up(pid)
        if up is not None:
            # `llmgw up` would take a stop for a crash and start it again at once.
            return PartResult(
                part=s.part,
                action="failed",
                via="process",
                pid=pid,
                detail=f"it runs under llmgw up (pid {up}), which restarts it: stop that one "
                f"(Ctrl-C there, or kill {up})",
            )
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if wait_gone(pid, STOP_TIMEOUT_S):
            return PartResult(part=s.part, action="stopped", via="process", pid=pid, detail=note)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not wait_gone(pid, 5.0):
            return PartResult(
                part=s.part,
                action="failed",
                via="process",
                pid=pid,
                detail="it did not end even on SIGKILL",
            )
        # Killed, it could not remove its pid file itself.
        if read_pid(s.pid_file) == pid:
            with contextlib.suppress(OSError):
                s.pid_file.unlink()
        return PartResult(
            part=s.part,
            action="killed",
            via="process",
            pid=pid,
            detail=f"it did not stop within {STOP_TIMEOUT_S:g} s of SIGTERM",
        )


def _supervising_up(pid: int) -> int | None:
    """The pid of the ``llmgw up`` that runs ``pid`` as its child, if one does."""
    try:
        parent = psutil.Process(pid).parent()
        argv = parent.cmdline() if parent is not None else []
    except psutil.Error:
        return None
    is_llmgw = any(Path(a).name == "llmgw" for a in argv)
    return parent.pid if parent is not None and is_llmgw and "up" in argv else None


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` ended within ``timeout_s`` (not our child: a pidfd tells)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except OSError:  # a kernel without pidfds (before 5.3): ask now and then
        return _poll_gone(pid, timeout_s)
    try:
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready)
    finally:
        os.close(fd)


def _poll_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(_PROBE_INTERVAL_S)
    return False


async def _admin_answers(paths: Paths) -> bool:
    async with AdminClient.from_paths(paths, timeout_s=2) as c:
        await c.status()
    return True


def _mirror_answers(mirror_yaml: Path) -> bool:
    import httpx

    cfg = load_mirror_config(mirror_yaml)
    _, port = split_host_port(cfg.listen)
    try:
        # Loopback, for liveness only (a certificate of the operator's own may not name it).
        got = httpx.get(f"{cfg.scheme}://127.0.0.1:{port}/health", timeout=2, verify=False)
    except httpx.HTTPError as e:
        raise OSError(str(e) or type(e).__name__) from e
    return got.status_code == 200


def _log_tail(log_file: Path, lines: int = 5) -> str:
    try:
        tail = log_file.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return ""
    return " | ".join(tail)
