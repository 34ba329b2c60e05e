"""The install step: llmgw of the control plane's exact version into the node's venv.

The wheel the control plane built of itself is copied over SFTP, its sha256
checked on the node, a venv made with the node's python3, and the wheel
installed with its dependencies from PyPI or from an uploaded wheelhouse
(``--no-index --find-links``). The wheel's sha256 is kept in the venv: a
node that has it already is left as it is.
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator
from pathlib import Path

from llmgw.onboard.events import Clock, OnboardError, StepEvent
from llmgw.onboard.layout import NodeLayout
from llmgw.onboard.remote_files import install_file, make_dir
from llmgw.onboard.ssh import NodeShell
from llmgw.onboard.wheel import SelfWheel

STEP = "install"
PIP_TIMEOUT_S = 1800.0


async def install_llmgw(
    shell: NodeShell,
    layout: NodeLayout,
    wheel: SelfWheel,
    *,
    python: str,
    wheelhouse: str,
    state: dict,
) -> AsyncIterator[StepEvent]:
    clock = Clock()
    marker = await shell.run(["cat", layout.wheel_marker], timeout_s=30)
    present = await shell.run(["test", "-x", layout.llmgw], timeout_s=30)
    if marker.ok and marker.stdout.strip() == wheel.sha256 and present.ok:
        state["llmgw_changed"] = False
        yield StepEvent(
            step=STEP,
            status="kept",
            detail=f"llmgw {wheel.version} is installed in {layout.venv} already",
            elapsed_s=clock.elapsed(),
        )
        return
    state["llmgw_changed"] = True
    name = wheel.path.name
    yield StepEvent(
        step=STEP,
        status="running",
        detail=f"copying {name} ({wheel.path.stat().st_size / 1e6:.1f} MB)",
        elapsed_s=clock.elapsed(),
    )
    staged = await shell.put(wheel.path.read_bytes(), name)
    summed = await shell.run(["sha256sum", "--", staged], sudo=False, timeout_s=60)
    got = summed.stdout.split()[0] if summed.ok and summed.stdout.split() else ""
    if got != wheel.sha256:
        raise OnboardError(
            f"the llmgw wheel arrived damaged on {shell.target.host} "
            f"(sha256 {got or 'unknown'}, expected {wheel.sha256})",
            hint="run node add again; if it happens again, check the node's disk and memory",
        )
    venv_python = f"{layout.venv}/bin/python"
    if not (await shell.run(["test", "-x", venv_python], timeout_s=30)).ok:
        yield StepEvent(
            step=STEP, status="running", detail=f"creating {layout.venv}", elapsed_s=clock.elapsed()
        )
        await make_dir(shell, posixpath.dirname(layout.venv))
        made = await shell.run([python, "-m", "venv", layout.venv], timeout_s=300)
        if not made.ok:
            raise OnboardError(
                f"could not create a venv with {python} on {shell.target.host}: {made.output}",
                hint="install the venv module (Debian/Ubuntu: apt-get install python3-venv)",
            )
    pip = [f"{layout.venv}/bin/python", "-m", "pip", "install", "--disable-pip-version-check"]
    if wheelhouse:
        files = sorted(Path(wheelhouse).glob("*.whl"))
        yield StepEvent(
            step=STEP,
            status="running",
            detail=f"copying the wheelhouse ({len(files)} wheels)",
            elapsed_s=clock.elapsed(),
        )
        remote_wh = f"{shell.staging}/wheelhouse"
        await shell.put_files(files, remote_wh)
        pip += ["--no-index", "--find-links", remote_wh]
    yield StepEvent(
        step=STEP,
        status="running",
        detail="installing llmgw and its dependencies"
        + (" from the wheelhouse" if wheelhouse else " from PyPI"),
        elapsed_s=clock.elapsed(),
    )
    for argv in ([*pip, staged], [*pip, "--force-reinstall", "--no-deps", staged]):
        ran = await shell.run(argv, timeout_s=PIP_TIMEOUT_S)
        if not ran.ok:
            raise OnboardError(
                f"pip could not install llmgw on {shell.target.host}: {ran.output[-1200:]}",
                hint=(
                    "the wheelhouse must hold every dependency for the node's Python and "
                    "architecture (pip download -d DIR llmgw-…whl)"
                    if wheelhouse
                    else "the node must reach PyPI, or give --wheelhouse DIR with every dependency"
                ),
            )
    await install_file(shell, (wheel.sha256 + "\n").encode(), layout.wheel_marker, mode=0o644)
    yield StepEvent(
        step=STEP,
        status="ok",
        detail=f"llmgw {wheel.version} installed in {layout.venv}",
        elapsed_s=clock.elapsed(),
    )
