"""Benchmark: how long ``llmgw`` takes to start, beside ``python -c pass`` and other CLIs.

What it answers: does ``llmgw version``, and ``llmgw ctl status --json`` on a
machine with no control plane (an empty LLMGW_HOME: the error path), answer in
a blink — the goal is 0.25 s — as ``gh --version`` and ``kubectl version
--client`` do?

Each command is run ``--runs`` times in a row as a process of its own; the
best wall time is reported (the least disturbed by whatever else runs on the
machine), with the median beside it. llmgw is run as its console script runs
it (``from llmgw.cli.main import main``) with this interpreter, so PYTHONPATH
can point it at another checkout to compare. Also reported: how many modules
each llmgw command imported, and the ``-X importtime`` total of
``import llmgw.cli.main``. gh and kubectl are measured only where installed.

The figures are printed, never judged: ``python benchmarks/cli_start.py
[--runs 10] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The console script's body, and a list of the modules imported written at exit.
LLMGW = ("import sys; from llmgw.cli.main import main; sys.argv[0] = 'llmgw'; main()",)
LIST_MODULES = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "llmgw"
from llmgw.cli.main import main
main()
"""


def timed(argv: list[str], env: dict[str, str], runs: int) -> dict[str, float]:
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - start)
    return {"best_s": min(walls), "median_s": statistics.median(walls)}


def modules_imported(args: list[str], env: dict[str, str]) -> int:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "modules.json"
        subprocess.run(
            [sys.executable, "-c", LIST_MODULES, str(out), *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return len(json.loads(out.read_text()))


def importtime_s(env: dict[str, str]) -> float:
    """The cumulative -X importtime of ``import llmgw.cli.main``, in seconds."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import llmgw.cli.main"],
        env=env,
        capture_output=True,
        text=True,
    )
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == "llmgw.cli.main":
            return int(parts[1]) / 1e6
    raise SystemExit(f"no importtime line for llmgw.cli.main:\n{proc.stderr[-2000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs of each command (best of)")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    opts = ap.parse_args()
    if opts.runs < 1:
        ap.error("--runs must be at least 1")

    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "LLMGW_HOME": home}
        llmgw = [sys.executable, "-c", *LLMGW]
        commands: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "llmgw version": [*llmgw, "version"],
            "llmgw ctl status --json": [*llmgw, "ctl", "status", "--json"],
            "llmgw --help": [*llmgw, "--help"],
        }
        if shutil.which("gh"):
            commands["gh --version"] = ["gh", "--version"]
        if shutil.which("kubectl"):
            commands["kubectl version --client"] = ["kubectl", "version", "--client"]
        figures = {name: timed(argv, env, opts.runs) for name, argv in commands.items()}
        for name in ("llmgw version", "llmgw ctl status --json", "llmgw --help"):
            figures[name]["modules"] = modules_imported(name.split()[1:], env)
        report = {
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            "load_average": list(os.getloadavg()),
            "runs": opts.runs,
            "importtime_llmgw_cli_main_s": importtime_s(env),
            "commands": figures,
        }

    print(f"best of {opts.runs}, load average {report['load_average'][0]:.2f}")
    for name, f in figures.items():
        mods = f"  {f['modules']} modules" if "modules" in f else ""
        print(
            f"  {name:<28} {f['best_s'] * 1000:7.1f} ms  (median {f['median_s'] * 1000:.1f}){mods}"
        )
    print(
        f"  import llmgw.cli.main (-X importtime): {report['importtime_llmgw_cli_main_s'] * 1000:.1f} ms"
    )
    if opts.json:
        opts.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
