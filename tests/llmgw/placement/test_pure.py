"""Placement is pure core: importing it pulls in no daemon and no UI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_placement_imports_no_daemon_and_no_ui():
    code = (
        "import sys, llmgw.placement; "
        "bad = [m for m in ('textual', 'typer', 'gatewayd', 'agentd', 'tui') if m in sys.modules]; "
        "assert not bad, bad"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
