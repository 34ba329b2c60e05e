"""How onboarding keeps a long-lived llmgw program running on the machine it set up.

Under systemd: a unit, written only when it differs, linked when it lies
outside systemd's search path (an install root), enabled, and (re)started
when something it reads changed or it is not running. Without systemd (a
container, the namespace test hosts): the program started detached with
``setsid``, its pid in a pidfile, its output appended to a log. ``node add``
runs the agent this way and ``server add`` the control plane.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from llmgw.onboard.events import OnboardError
from llmgw.onboard.remote_files import install_file
from llmgw.onboard.ssh import NodeShell


async def must(
    shell: NodeShell, argv: list[str], *, hint: str, env: dict[str, str] | None = None
) -> None:
    """Run ``argv`` on the machine; a failure is an OnboardError with its output and ``hint``."""
    ran = await shell.run(argv, env=env, timeout_s=120)
    if not ran.ok:
        raise OnboardError(
            f"{' '.join(argv)} failed on {shell.target.host}: {ran.output[-800:]}", hint=hint
        )


async def run_unit(
    shell: NodeShell,
    *,
    unit_name: str,
    unit_file: str,
    text: str,
    link: bool,
    have: dict[str, str],
    restart: bool,
    hint: str,
) -> tuple[str, str]:
    """The unit in place, enabled and running; (status, detail) for the step's event.

    ``have``: the sha256 of files on the machine (remote_sha256), so an unchanged
    unit is not rewritten; ``restart``: something the program reads changed.
    """
    unit_changed = await install_file(shell, text.encode(), unit_file, mode=0o644, have=have)
    if unit_changed and link:
        await must(shell, ["systemctl", "link", unit_file], hint=hint)
    if unit_changed:
        await must(shell, ["systemctl", "daemon-reload"], hint=hint)
    await must(shell, ["systemctl", "enable", unit_name], hint=hint)
    active = (await shell.run(["systemctl", "is-active", "--quiet", unit_name])).ok
    if restart or unit_changed or not active:
        await must(shell, ["systemctl", "restart", unit_name], hint=hint)
        return "ok", f"{unit_name} enabled and (re)started"
    return "kept", f"{unit_name} enabled and running; nothing changed"


async def detached_alive(shell: NodeShell, pidfile: str) -> bool:
    """Whether the pid in ``pidfile`` is a live process on the machine."""
    quoted = shlex.quote(pidfile)
    ran = await shell.run(["sh", "-c", f'kill -0 "$(cat {quoted} 2>/dev/null)" 2>/dev/null'])
    return ran.ok


async def start_detached(
    shell: NodeShell,
    argv: list[str],
    *,
    pidfile: str,
    log_file: str,
    env: dict[str, str] | None = None,
    hint: str,
) -> None:
    """Start ``argv`` in a session of its own, output to ``log_file``, pid to ``pidfile``."""
    log_dir = shlex.quote(str(PurePosixPath(log_file).parent))
    start = (
        # The folders first, then only the program in the background: `a && b & c` would
        # send the whole chain to the background and write the pidfile before them.
        f"mkdir -p {log_dir} {shlex.quote(str(PurePosixPath(pidfile).parent))} && cd / && "
        "umask 077 && { "
        f"setsid {shlex.join(argv)} "
        f"</dev/null >>{shlex.quote(log_file)} 2>&1 & echo $! > {shlex.quote(pidfile)}; }}"
    )
    await must(shell, ["sh", "-c", start], env=env, hint=hint)


async def stop_detached(shell: NodeShell, pidfile: str, *, wait_s: float = 30.0) -> None:
    """SIGTERM the pid in ``pidfile`` and wait up to ``wait_s`` for it to end.

    Waited for, not slept on: a control plane gives its lease up and closes its
    ports on the way out, and the one started after it must bind the same ports.
    """
    quoted = shlex.quote(pidfile)
    tenths = max(1, int(wait_s * 10))
    script = (
        f'pid="$(cat {quoted} 2>/dev/null)"; [ -n "$pid" ] || exit 0; '
        'kill "$pid" 2>/dev/null; i=0; '
        f'while kill -0 "$pid" 2>/dev/null && [ "$i" -lt {tenths} ]; do sleep 0.1; i=$((i+1)); done'
    )
    await shell.run(["sh", "-c", script], timeout_s=wait_s + 30)
