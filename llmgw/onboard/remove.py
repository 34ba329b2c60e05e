"""``node remove``: drain the node, stop and disable its agent, revoke its certificate, forget it.

The revocation is what makes the removal stick: even an agent that could not
be stopped (the machine is off, SSH refused) cannot connect again, since the
agent port refuses its certificate. Adding the machine again issues a new one.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
from collections.abc import AsyncIterator

from llmgw.admin_client import AdminClient
from llmgw.errors import ExitCode, LlmgwError, NotFoundError
from llmgw.onboard.events import Clock, StepEvent, result_event
from llmgw.onboard.layout import UNIT_NAME, NodeLayout
from llmgw.onboard.plan import RemovePlan, forget_record, load_record
from llmgw.onboard.ssh import connect
from llmgw.tls import pki

INACTIVE = {"stopped", "failed"}
POLL_S = 1.0


async def remove_node(plan: RemovePlan) -> AsyncIterator[StepEvent]:
    """Remove one node; the last event is ``result``."""
    total = Clock()
    node_id = plan.node_id
    rec = load_record(plan.paths, node_id)
    target = plan.target or (rec.target() if rec else None)
    root = plan.install_root if plan.install_root is not None else (rec.install_root if rec else "")
    layout = NodeLayout.for_root(root)
    warnings: list[dict] = []
    step, clock = "drain", Clock()
    try:
        async with AdminClient.from_paths(plan.paths) as admin:
            known = True
            try:
                await admin.drain_node(node_id)
            except NotFoundError:
                known = False
            if known:
                yield StepEvent(step=step, status="running", detail=f"draining {node_id}")
                while True:
                    left = [
                        r.replica_id
                        for r in (await admin.list_replicas()).replicas
                        if r.node_id == node_id and r.state not in INACTIVE
                    ]
                    if not left:
                        break
                    if clock.elapsed() > plan.drain_timeout_s:
                        raise LlmgwError(
                            f"{node_id} still runs {', '.join(left[:3])} after "
                            f"{plan.drain_timeout_s:g} s of draining",
                            hint="see why with: llmgw ctl replicas; then run node remove again",
                        )
                    await asyncio.sleep(POLL_S)
                yield StepEvent(
                    step=step, status="ok", detail="no replicas left", elapsed_s=clock.elapsed()
                )
            else:
                yield StepEvent(
                    step=step,
                    status="skipped",
                    detail=f"the control plane does not know {node_id} (removed already?)",
                )

            step, clock = "stop", Clock()
            if target is None or not plan.stop_agent:
                why = (
                    "--no-stop given"
                    if target is not None
                    else "no record of how node add reached it"
                )
                warnings.append({"check": "stop", "detail": f"agent not stopped: {why}"})
                yield StepEvent(
                    step=step,
                    status="warn",
                    detail=f"the agent on {node_id} was not stopped ({why})",
                    fix="stop it there: systemctl disable --now llmgw-agent; its certificate is "
                    "revoked anyway, so it cannot connect again",
                )
            else:
                async for ev in _stop(target, layout, clock, warnings):
                    yield ev

            step, clock = "revoke", Clock()
            serial, fingerprint = _local_serial(plan, node_id, rec)
            reply = await admin.revoke_node(
                node_id,
                serial=serial,
                fingerprint_sha256=fingerprint,
                reason="removed by llmgw node remove",
            )
            yield StepEvent(step=step, status="ok", detail=reply.note, elapsed_s=clock.elapsed())

            step, clock = "forget", Clock()
            if known:
                try:
                    removed = await admin.remove_node(node_id)
                    note = removed.note or f"{node_id} is no longer a node of this cluster"
                except NotFoundError:
                    note = f"{node_id} was forgotten already"
            else:
                note = f"{node_id} was forgotten already"
            shutil.rmtree(plan.paths.node_certs_dir / node_id, ignore_errors=True)
            forget_record(plan.paths, node_id)
            yield StepEvent(step=step, status="ok", detail=note, elapsed_s=clock.elapsed())
    except LlmgwError as e:
        yield StepEvent(
            step=step, status="fail", detail=e.message, fix=e.hint, elapsed_s=clock.elapsed()
        )
        yield _result(node_id, "fail", e.message, e.hint, total, warnings, e.exit_code)
        return
    yield _result(node_id, "ok", f"{node_id} removed", "", total, warnings, ExitCode.OK)


async def _stop(target, layout: NodeLayout, clock: Clock, warnings: list[dict]):
    try:
        shell = await connect(target)
    except LlmgwError as e:
        warnings.append({"check": "stop", "detail": e.message})
        yield StepEvent(
            step="stop",
            status="warn",
            detail=f"could not reach the node to stop its agent: {e.message}",
            fix="stop it there when you can: systemctl disable --now llmgw-agent; its "
            "certificate is revoked, so it cannot connect again",
            elapsed_s=clock.elapsed(),
        )
        return
    try:
        systemd = (await shell.run(["test", "-d", "/run/systemd/system"], sudo=False)).ok
        if systemd:
            await shell.run(["systemctl", "disable", "--now", UNIT_NAME])
            if layout.install_root:
                await shell.run(["rm", "-f", f"/etc/systemd/system/{UNIT_NAME}"])
                await shell.run(["systemctl", "daemon-reload"])
            detail = f"{UNIT_NAME} stopped and disabled"
        else:
            pid = shlex.quote(layout.pidfile)
            await shell.run(
                [
                    "sh",
                    "-c",
                    (
                        f'p="$(cat {pid} 2>/dev/null)"; [ -n "$p" ] && kill "$p" 2>/dev/null; '
                        f"rm -f {pid}; true"
                    ),
                ]
            )
            detail = f"the detached agent stopped (pidfile {layout.pidfile})"
        yield StepEvent(step="stop", status="ok", detail=detail, elapsed_s=clock.elapsed())
    finally:
        await shell.close()


def _local_serial(plan: RemovePlan, node_id: str, rec) -> tuple[str, str]:
    crt = plan.paths.node_certs_dir / node_id / "node.crt"
    try:
        pem = crt.read_bytes()
        from cryptography import x509

        serial = format(x509.load_pem_x509_certificate(pem).serial_number, "X")
        return serial, pki.fingerprint_sha256(pem)
    except (OSError, ValueError):
        pass
    if rec is not None and rec.cert_serial:
        return rec.cert_serial, rec.cert_fingerprint_sha256
    return "", ""  # the control plane revokes what the node's stream presents


def _result(node_id, status, detail, fix, total: Clock, warnings, code: ExitCode) -> StepEvent:
    return result_event(status, detail, fix, total, code, node_id=node_id, warnings=warnings)
