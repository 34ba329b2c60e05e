"""The core stays free of the UI: importing it never pulls textual or typer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_core_modules_import_without_textual_or_typer():
    code = (
        "import llmgw.inventory, llmgw.config, llmgw.paths, llmgw.errors, sys; "
        "assert 'textual' not in sys.modules and 'typer' not in sys.modules"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
