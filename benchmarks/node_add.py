"""Benchmark: ``llmgw node add`` onboarding a namespace test host, split by step.

Each run makes a fresh test host (a network namespace running Debian's sshd,
tests/e2e/netns_host.py) and a fresh gatewayd on this machine's side of its
veth, then times ``llmgw node add HOST --accept-new-host-key … --json`` with
the warm wheelhouse (tests/e2e/wheelhouse.py, built once if missing). The
step times are node add's own NDJSON ``elapsed_s``; "ready" is this script's
wall clock from starting node add to the node shown ready by
``llmgw ctl nodes --json``. The node is then removed (``node remove``) and the
host torn down.

Goal it is read against: **under 60 s from node add to the node ready, with a
warm wheelhouse.** Printed, never judged.

Run as root: ``.venv/bin/python benchmarks/node_add.py [--runs 3] [--json out.json]``.
Exit status: 0 when every run onboarded its node; 1 when one failed (its
output is printed); 2 when this machine cannot make a test host.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e.netns_host import (
    NODE_ADD_STEPS,
    NetnsUnavailable,
    host_control_plane,
    netns_host,
    parse_ndjson,
    run_node_add,
    step_seconds,
    sweep_stale_namespaces,
    unavailable_reason,
)
from tests.e2e.wheelhouse import ensure_wheelhouse, wheel_names

# The columns of the table: the steps the goal names, then the totals.
COLUMNS = ("connect", "doctor", "install", "packages", "join", "register")
READY_WITHIN_S = 120.0


class RunFailed(Exception):
    """One onboarding did not end with the node ready; the message holds node add's output."""


def _wait_ready(plane, node_id: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = plane.nodes()
        if nodes and nodes.get(node_id, {}).get("state") == "ready":
            return True
        time.sleep(0.2)
    return False


def one_run(index: int, wheelhouse: Path) -> dict:
    """Onboard a fresh test host once; its step times, node add's total and time to ready."""
    node_id = f"bench-node-{index}"
    with (
        netns_host() as host,
        tempfile.TemporaryDirectory(prefix="llmgw-bench-") as tmp,
        host_control_plane(host, Path(tmp)) as plane,
    ):
        install_root = host.workdir / "node-root"
        started = time.monotonic()
        add = run_node_add(plane, host, node_id, install_root, wheelhouse)
        added_s = time.monotonic() - started
        if add.returncode != 0:
            raise RunFailed(f"node add exited {add.returncode}:\n{add.stdout}\n{add.stderr}")
        if not _wait_ready(plane, node_id, READY_WITHIN_S):
            raise RunFailed(f"{node_id} never showed ready:\n{add.stdout}\n{add.stderr}")
        ready_s = time.monotonic() - started
        events = parse_ndjson(add.stdout)
        remove = plane.llmgw("node", "remove", node_id, "--json", timeout_s=180)
        steps = step_seconds(events)
        return {
            "run": index,
            "steps_s": {k: v for k, v in steps.items() if k != "result"},
            "node_add_s": round(added_s, 2),
            # node add's own figure: "result"'s elapsed_s is since onboarding began.
            "reported_total_s": steps.get("result"),
            "ready_s": round(ready_s, 2),
            "remove_ok": remove.returncode == 0,
        }


def _cell(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def print_table(runs: list[dict]) -> None:
    header = ["run", *COLUMNS, "total", "node add", "ready"]
    totals = ("reported_total_s", "node_add_s", "ready_s")
    rows = [
        [str(r["run"])]
        + [_cell(r["steps_s"].get(step)) for step in COLUMNS]
        + [_cell(r[key]) for key in totals]
        for r in runs
    ]
    if len(runs) > 1:
        median = ["median"]
        for step in COLUMNS:
            values = [r["steps_s"][step] for r in runs if step in r["steps_s"]]
            median.append(_cell(statistics.median(values) if values else None))
        for key in totals:
            values = [r[key] for r in runs if r[key] is not None]
            median.append(_cell(statistics.median(values) if values else None))
        rows.append(median)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
    print(
        "seconds. Steps and total: node add's own elapsed_s. 'node add': its process, "
        "start to exit; 'ready': its start to the node ready in `llmgw ctl nodes` "
        "(goal: under 60 s)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="onboardings, each on a fresh host")
    p.add_argument("--json", type=Path, help="write the figures here too")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    reason = unavailable_reason()
    if reason is not None:
        print(f"cannot make a test host: {reason}", file=sys.stderr)
        return 2
    sweep_stale_namespaces()
    wheelhouse = ensure_wheelhouse()
    print(f"wheelhouse: {wheelhouse} ({len(wheel_names(wheelhouse))} wheels)")
    print(f"steps node add is expected to report: {', '.join(NODE_ADD_STEPS)}")
    runs, failed = [], 0
    for index in range(1, args.runs + 1):
        try:
            runs.append(one_run(index, wheelhouse))
        except NetnsUnavailable as e:
            print(f"cannot make a test host: {e}", file=sys.stderr)
            return 2
        except RunFailed as e:
            failed += 1
            print(f"run {index} failed: {e}", file=sys.stderr)
    if runs:
        print_table(runs)
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "failed": failed}, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
