"""``llmgw doctor``: check this machine can run engines, and say what to fix."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agentd.doctor import Check, run_checks
from llmgw.errors import ExitCode
from llmgw.paths import resolve

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def doctor(
    json_output: bool = typer.Option(
        False, "--json", help='Print the checks as JSON ({"checks": [...]}) and nothing else.'
    ),
) -> None:
    """Check this machine for what llmgw's engines need: CPU, NVIDIA driver, OS, disk, glibc."""
    checks = run_checks(resolve())
    if json_output:
        typer.echo(json.dumps({"checks": [c.model_dump() for c in checks]}, indent=2))
    else:
        _print_table(checks)
    if any(c.status == "fail" for c in checks):
        raise typer.Exit(code=int(ExitCode.ERROR))


def _print_table(checks: list[Check]) -> None:
    # Created here, not at import, so it writes to whatever stdout is now
    # (a test runner's capture included).
    console = Console()
    table = Table("check", "status", "detail", "fix", title="llmgw doctor")
    for c in checks:
        # Text, not markup: details quote file contents that may hold brackets.
        table.add_row(c.name, Text(c.status, style=_STYLE[c.status]), Text(c.detail), Text(c.fix))
    console.print(table)
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    if failed:
        console.print(f"{failed} check(s) failed. Fix them, then run: llmgw doctor")
    elif warned:
        console.print(f"{warned} warning(s): see their fixes; none stops the agent from running.")
    else:
        console.print("All checks passed. Add this node with: llmgw node add HOST")
