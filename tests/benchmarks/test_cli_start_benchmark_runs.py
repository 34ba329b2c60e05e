"""benchmarks/cli_start.py runs end to end, once per command.

Only that it runs and reports is asserted; its timings are for the report,
never for an assertion, so a busy CI machine cannot fail a build.
"""

from __future__ import annotations

from tests.benchmarks.runner import run_benchmark


def test_the_cli_start_benchmark_runs_once_per_command(tmp_path):
    # Guards against the benchmark rotting as the CLI changes: it is run by
    # hand, so nothing else would notice.
    result = run_benchmark("cli_start.py", tmp_path / "cli_start.json", "--runs", "1")
    commands = result["commands"]
    assert {"python -c pass", "llmgw version", "llmgw ctl status --json"} <= set(commands)
    assert all(f["best_s"] > 0 for f in commands.values())
    assert commands["llmgw version"]["modules"] > 0
    assert result["importtime_llmgw_cli_main_s"] > 0
