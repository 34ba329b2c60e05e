"""The register step: wait, through the admin API, until the node's agent has registered and is ready."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from llmgw.admin_client import AdminClient
from llmgw.errors import AdminError, ConfigError, NotFoundError
from llmgw.onboard.events import Clock, OnboardError, StepEvent
from llmgw.onboard.layout import NodeLayout
from llmgw.paths import Paths
from llmgw.present.nodefmt import gib, gpu_summary, os_name
from llmgw.present.opsfmt import host_warnings
from llmgw.protojson import to_plain

STEP = "register"
POLL_S = 1.0


async def wait_registered(
    paths: Paths,
    node_id: str,
    layout: NodeLayout,
    *,
    systemd: bool,
    timeout_s: float,
    state: dict,
) -> AsyncIterator[StepEvent]:
    clock = Clock()
    log_hint = "journalctl -u llmgw-agent -n 50" if systemd else f"tail -n 50 {layout.log_file}"
    try:
        client = AdminClient.from_paths(paths)
    except ConfigError as e:
        raise OnboardError(e.message, hint=e.hint) from e
    yield StepEvent(
        step=STEP,
        status="running",
        detail=f"waiting for {node_id} to register",
        elapsed_s=clock.elapsed(),
    )
    last = ""
    async with client:
        while True:
            try:
                view = await client.get_node(node_id)
            except NotFoundError:
                view = None
            except AdminError as e:
                raise OnboardError(
                    f"the node is set up, but this control plane's admin API does not answer: "
                    f"{e.message}",
                    hint=e.hint or "start it (llmgw server), then: llmgw ctl nodes",
                ) from e
            if view is not None and view.connected and view.state == "ready":
                break
            if view is not None:
                last = f"{view.state}: {view.reason}"
            if clock.elapsed() > timeout_s:
                raise OnboardError(
                    f"{node_id} did not become ready within {timeout_s:g} s"
                    + (f" (last seen {last})" if last else " (it never registered)"),
                    hint=f"look at the agent's log on the node: {log_hint}; a node that cannot "
                    "reach the control plane or whose certificate is refused says so there",
                )
            await asyncio.sleep(POLL_S)
    h = view.host
    facts = (
        f"{os_name(view)}, {h.arch if h else ''}, {h.cpu_count if h else 0} CPUs, "
        f"{gib(h.memory_total_bytes) if h else '?'} memory, GPUs: {gpu_summary(view)}"
    )
    state["node"] = to_plain(view)
    yield StepEvent(
        step=STEP, status="ok", detail=f"{node_id} is ready: {facts}", elapsed_s=clock.elapsed()
    )
    for w in host_warnings(h):
        yield StepEvent(step=STEP, status="warn", item="node", detail=w, elapsed_s=clock.elapsed())
