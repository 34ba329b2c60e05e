"""The engine user step: ``llmgw-engine`` on the node, the user its engines run as.

Engines run code and weights from elsewhere, so never as root: node add
makes a system user for them where the node has none, with its own group, no
login shell, no password and a home under the agent's data dir (which the
agent makes, owned by that user). ``useradd`` on the families node add
supports (Debian, Red Hat, SUSE), BusyBox's ``adduser`` on Alpine.

Under ``--install-root`` node add changes nothing outside that folder, so it
only looks: the agent, which runs as root, makes the user when it starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from llmgw.onboard.checks import NodeFacts
from llmgw.onboard.events import Clock, OnboardError, StepEvent
from llmgw.onboard.layout import NodeLayout
from llmgw.onboard.ssh import NodeShell

STEP = "user"
ENGINE_USER = "llmgw-engine"
ENGINE_HOME = "engine-home"


def engine_home(layout: NodeLayout) -> str:
    return str(layout.paths.agent_data_dir / ENGINE_HOME)


def create_argv(facts: NodeFacts, home: str) -> list[str]:
    """The command that makes the engine user on a node of this OS family."""
    if "alpine" in set(facts.os_family):
        # BusyBox: -S system user, -D no password, -H no home made.
        return ["adduser", "-S", "-D", "-H", "-h", home, "-s", "/sbin/nologin", ENGINE_USER]
    return [
        "useradd", "--system", "--user-group", "--no-create-home",
        "--home-dir", home, "--shell", "/usr/sbin/nologin", ENGINE_USER,
    ]  # fmt: skip


async def ensure_engine_user(
    shell: NodeShell, facts: NodeFacts, layout: NodeLayout
) -> AsyncIterator[StepEvent]:
    clock = Clock()
    found = await shell.run(["getent", "passwd", ENGINE_USER], sudo=False, timeout_s=30)
    if found.ok and found.stdout.strip():
        fields = found.stdout.strip().split(":")
        uid = fields[2] if len(fields) > 2 else "?"
        if uid == "0":
            raise OnboardError(
                f"the user {ENGINE_USER} on {shell.target.host} has uid 0: engines would run as root",
                hint=f"give it an unprivileged uid there (usermod -u UID {ENGINE_USER}), "
                "then run node add again",
            )
        yield StepEvent(
            step=STEP,
            status="kept",
            detail=f"engines run as {ENGINE_USER} (uid {uid}), there already",
            elapsed_s=clock.elapsed(),
        )
        return
    argv = create_argv(facts, engine_home(layout))
    if layout.install_root:
        yield StepEvent(
            step=STEP,
            status="kept",
            detail=f"no user {ENGINE_USER} yet; under --install-root nothing outside it is "
            "changed: the agent makes it when it starts",
            elapsed_s=clock.elapsed(),
        )
        return
    yield StepEvent(
        step=STEP,
        status="running",
        detail=f"creating the system user {ENGINE_USER} for engines",
        elapsed_s=clock.elapsed(),
    )
    made = await shell.run(argv, timeout_s=60)
    if not made.ok:
        raise OnboardError(
            f"{' '.join(argv)} failed on {shell.target.host}: {made.output[-600:]}",
            hint=f"make the user there by hand (sudo {' '.join(argv)}), then run node add again",
        )
    yield StepEvent(
        step=STEP,
        status="ok",
        detail=f"created {ENGINE_USER}, a system user with no login, home {engine_home(layout)}",
        elapsed_s=clock.elapsed(),
    )
