"""``node add`` as one async generator of step events: connect, doctor, install, packages, user, join, register.

The CLI prints the events (a line each, or NDJSON); the console's Add node
dialog shows the same ones. A failure ends the run with a ``fail`` event
naming the fix, then the ``result`` event; warnings are shown and the run
goes on. Running it again on a joined node repairs what is missing and
changes nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import PurePosixPath

from llmgw.config import check_name
from llmgw.errors import ExitCode, LlmgwError, UsageError
from llmgw.onboard.checks import doctor_events, node_checks
from llmgw.onboard.engine_user import ensure_engine_user
from llmgw.onboard.events import Clock, StepEvent, result_event
from llmgw.onboard.install import install_llmgw
from llmgw.onboard.join import join_node
from llmgw.onboard.layout import NodeLayout
from llmgw.onboard.mirror_source import choose_mirror
from llmgw.onboard.packages import install_packages
from llmgw.onboard.plan import AddPlan, NodeRecord, save_record
from llmgw.onboard.register import wait_registered
from llmgw.onboard.remote_probe import probe_node
from llmgw.onboard.ssh import NodeShell, connect
from llmgw.onboard.wheel import self_wheel
from llmgw.setup.cluster_init import _default_control_planes

NEXT_STEP = "Serve a model on it: llmgw ctl model serve SOURCE"


def control_planes_for(plan: AddPlan) -> list[str]:
    """--control-plane as given (comma separated allowed), else the cluster's own address."""
    given = [a.strip() for item in plan.control_planes for a in item.split(",") if a.strip()]
    return given or _default_control_planes(plan.paths)


async def add_node(plan: AddPlan) -> AsyncIterator[StepEvent]:
    """Onboard one machine; the last event is ``result``."""
    total = Clock()
    state: dict = {"warnings": []}
    step = "connect"
    clock = Clock()
    shell: NodeShell | None = None
    node_id = plan.node_id
    try:
        if plan.install_root and not PurePosixPath(plan.install_root).is_absolute():
            raise UsageError(f"--install-root {plan.install_root!r} must be an absolute path")
        planes = control_planes_for(plan)
        layout = NodeLayout.for_root(plan.install_root)

        yield StepEvent(step=step, status="running", detail=f"connecting to {plan.target.where()}")
        shell = await connect(plan.target)
        how = "as root" if shell.is_root else "with passwordless sudo"
        if shell.host_key_recorded:
            how += f"; recorded its new host key {shell.host_key_recorded}"
        yield StepEvent(
            step=step, status="ok", detail=f"logged in {how}", elapsed_s=clock.elapsed()
        )

        step, clock = "doctor", Clock()
        facts = await probe_node(
            shell,
            python=plan.python,
            data_dir=str(layout.paths.agent_data_dir),
            control_planes=planes,
        )
        checks = node_checks(facts)
        for ev in doctor_events(
            checks, host=plan.target.host, warnings=state["warnings"], clock=clock
        ):
            yield ev

        if not node_id:
            node_id = facts.hostname.split(".")[0].lower()
        try:
            check_name(node_id, what="node id")
        except ValueError as e:
            raise UsageError(f"{e}", hint="name the node with --node-id NAME") from e

        step, clock = "install", Clock()
        cache = plan.paths.server_data_dir / "self-wheels"
        wheel = await asyncio.to_thread(self_wheel, cache)
        # A cluster with a mirror installs from it alone, unless a wheelhouse is given.
        chosen = (
            None if plan.wheelhouse else await choose_mirror(plan.paths, control_plane=planes[0])
        )
        async for ev in install_llmgw(
            shell,
            layout,
            wheel,
            python=plan.python,
            wheelhouse=plan.wheelhouse,
            state=state,
            mirror=chosen[0] if chosen else None,
            mirror_wheels=chosen[1] if chosen else None,
            cpu_flags=facts.cpu_flags,
            ca_cert=str(plan.paths.ca_cert),
        ):
            yield ev

        step, clock = "packages", Clock()
        async for ev in install_packages(
            shell, facts, lock_wait_s=plan.lock_wait_s, lock_retry_s=plan.lock_retry_s
        ):
            yield ev

        step, clock = "user", Clock()
        async for ev in ensure_engine_user(shell, facts, layout):
            yield ev

        step, clock = "join", Clock()
        async for ev in join_node(
            shell,
            layout,
            paths=plan.paths,
            node_id=node_id,
            control_planes=planes,
            systemd=facts.systemd,
            state=state,
            labels=plan.labels,
        ):
            if ev.status == "warn":
                state["warnings"].append({"check": "systemd", "detail": ev.detail, "fix": ev.fix})
            yield ev
        t = plan.target
        save_record(
            plan.paths,
            NodeRecord(
                node_id=node_id,
                host=t.host,
                port=t.port,
                user=t.user,
                identity=t.identity,
                known_hosts=t.known_hosts,
                install_root=plan.install_root,
                python=plan.python,
                control_planes=planes,
                cert_serial=state.get("cert_serial", ""),
                cert_fingerprint_sha256=state.get("cert_fingerprint_sha256", ""),
            ),
        )
        await shell.close()
        shell = None

        step, clock = "register", Clock()
        async for ev in wait_registered(
            plan.paths,
            node_id,
            layout,
            systemd=facts.systemd,
            timeout_s=plan.register_timeout_s,
            state=state,
        ):
            if ev.status == "warn":
                state["warnings"].append({"check": "node", "detail": ev.detail, "fix": ev.fix})
            yield ev
    except LlmgwError as e:
        code = e.exit_code if e.exit_code != ExitCode.OK else ExitCode.ERROR
        yield StepEvent(
            step=step, status="fail", detail=e.message, fix=e.hint, elapsed_s=clock.elapsed()
        )
        yield _result(plan, node_id, "fail", e.message, e.hint, total, state, code)
        return
    finally:
        if shell is not None:
            await shell.close()
    yield _result(plan, node_id, "ok", f"{node_id} joined the cluster", NEXT_STEP, total, state)


def _result(
    plan: AddPlan,
    node_id: str,
    status: str,
    detail: str,
    fix: str,
    total: Clock,
    state: dict,
    code: ExitCode = ExitCode.OK,
) -> StepEvent:
    return result_event(
        status,
        detail,
        fix,
        total,
        code,
        node_id=node_id,
        host=plan.target.host,
        install_root=plan.install_root,
        warnings=state.get("warnings", []),
        node=state.get("node"),
        next_step=NEXT_STEP if status == "ok" else "",
    )
