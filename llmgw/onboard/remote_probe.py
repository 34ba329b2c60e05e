"""Run the probe on the node: upload it over SFTP, run it with the node's python3, read its JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pydantic import ValidationError

from llmgw.onboard import probe
from llmgw.onboard.checks import NodeFacts
from llmgw.onboard.events import OnboardError
from llmgw.onboard.ssh import NodeShell

# Per control plane address; the probe tries them one after the other.
REACH_TIMEOUT_S = 3.0


async def probe_node(
    shell: NodeShell, *, python: str, data_dir: str, control_planes: list[str]
) -> NodeFacts:
    """The node's facts, with its clock offset measured around the probe's run."""
    script = Path(probe.__file__).read_bytes()
    path = await shell.put(script, "probe.py")
    argv = [python, path, "--data-dir", data_dir, "--timeout", f"{REACH_TIMEOUT_S:g}"]
    for addr in control_planes:
        argv += ["--control-plane", addr]
    ran = await shell.run(argv, sudo=False, timeout_s=60 + REACH_TIMEOUT_S * len(control_planes))
    back = time.time()
    if ran.exit_status == 127 or "No such file" in ran.stderr and python in ran.stderr:
        raise OnboardError(
            f"{shell.target.host} has no {python}: llmgw needs Python 3.11 or newer there",
            hint="install it (apt-get install python3 python3-venv; dnf install python3.11), "
            "or name another with --python PATH",
        )
    if not ran.ok:
        raise OnboardError(
            f"the probe failed on {shell.target.host}: {ran.output[-800:]}",
            hint=f"run it by hand there to see why: {python} {path}",
        )
    try:
        facts = NodeFacts.model_validate(json.loads(ran.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, ValidationError) as e:
        raise OnboardError(
            f"the probe on {shell.target.host} printed something unreadable: {ran.stdout[:200]!r}",
            hint="check that python3 on the node is a working CPython",
        ) from e
    # The node reads its clock last, just before it prints: compared with when
    # the answer arrived, the error is one network trip, not the probe's run
    # (which waits seconds on an unreachable address).
    facts.clock_offset_s = round(facts.time - back, 3)
    facts.data_dir = data_dir
    return facts
