"""The last step of ``server add``: wait until the new control plane is part of the cluster.

Asked of this control plane's admin API: the new one must appear in the
cluster's control-plane list (Status → ``control_planes``, the rows every
control plane writes into the shared store) under the id ``server add`` gave
it, standing by (or leading, when none led before it). Where this control
plane does not answer — ``server init --standbys`` runs before it is started
— or does not list control planes, the new one's own ``/health`` (then
``/leader``) over its HTTP port is what is waited for, and the step says so.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import httpx

from llmgw.admin_client import AdminClient
from llmgw.errors import AdminError, ConfigError
from llmgw.onboard.events import Clock, OnboardError, StepEvent
from llmgw.paths import Paths

STEP = "ready"
POLL_S = 0.5
HTTP_TIMEOUT_S = 3.0


async def wait_standing(
    paths: Paths,
    *,
    control_plane_id: str,
    health_url: str,
    log_hint: str,
    timeout_s: float,
    expect_running: bool,
    state: dict,
) -> AsyncIterator[StepEvent]:
    """Events until the new control plane is listed (or answers); OnboardError past ``timeout_s``.

    ``expect_running``: this control plane should answer (server add); a
    silent one is then a warning. ``state["role"]`` is set to what it plays.
    """
    clock = Clock()
    yield StepEvent(
        step=STEP,
        status="running",
        detail=f"waiting for {control_plane_id} to join the cluster",
        elapsed_s=clock.elapsed(),
    )
    try:
        client: AdminClient | None = AdminClient.from_paths(paths, timeout_s=5.0)
    except ConfigError:
        client = None
    last = ""
    listed = False
    warned = False
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S, verify=_verify(paths)) as http:
        try:
            while True:
                if client is not None:
                    try:
                        status = await client.status()
                        listed = bool(status.control_plane_id)
                        view = next(
                            (
                                v
                                for v in status.control_planes
                                if v.control_plane_id == control_plane_id
                            ),
                            None,
                        )
                        if view is not None and view.role in ("leader", "standby"):
                            state["role"] = view.role
                            leader = status.leader_id or "none yet"
                            words = "stands by" if view.role == "standby" else "leads the cluster"
                            yield StepEvent(
                                step=STEP,
                                status="ok",
                                detail=f"{control_plane_id} {words} (leader: {leader}; "
                                f"store: {view.store_state or 'unknown'})",
                                elapsed_s=clock.elapsed(),
                            )
                            return
                        if view is not None:
                            last = f"listed as {view.role}"
                    except AdminError as e:
                        listed = False
                        if expect_running and not warned:
                            warned = True
                            yield StepEvent(
                                step=STEP,
                                status="warn",
                                detail=f"this control plane's admin API does not answer "
                                f"({e.message}): waiting for the new one's {health_url} instead",
                                fix="start this one (llmgw start), then check: llmgw ctl status",
                                elapsed_s=clock.elapsed(),
                            )
                if not listed:
                    answer = await _health(http, health_url)
                    if answer:
                        state["role"] = answer
                        yield StepEvent(
                            step=STEP,
                            status="ok",
                            detail=f"{control_plane_id} answers {health_url} ({answer}); "
                            "this control plane does not list control planes now, so its place "
                            "in the cluster was not checked",
                            elapsed_s=clock.elapsed(),
                        )
                        return
                    last = last or f"{health_url} does not answer"
                if clock.elapsed() > timeout_s:
                    raise OnboardError(
                        f"{control_plane_id} did not join the cluster within {timeout_s:g} s"
                        + (f" ({last})" if last else ""),
                        hint=f"look at its log: {log_hint}; a control plane that cannot reach "
                        "the store or bind its ports says so there",
                    )
                await asyncio.sleep(POLL_S)
        finally:
            if client is not None:
                client.close()


def _verify(paths: Paths) -> ssl.SSLContext:
    """The system's CAs and the cluster's: a gateway port with ``http.tls_*`` may show either
    (``--http-tls`` issues from the cluster CA; an operator's own may be public)."""
    ctx = ssl.create_default_context()
    if paths.ca_cert.exists():
        ctx.load_verify_locations(cafile=str(paths.ca_cert))
    return ctx


async def _health(http: httpx.AsyncClient, url: str) -> str:
    """ "leader" or "standby" once ``url`` (/health) answers 200; "" until then."""
    try:
        got = await http.get(url)
        if got.status_code != 200:
            return ""
        leader = await http.get(url.removesuffix("/health") + "/leader")
    except httpx.HTTPError:
        return ""
    return "leader" if leader.status_code == 200 else "standby"
