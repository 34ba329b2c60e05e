"""A new user's first minutes, in a real terminal: bare ``llmgw`` on a machine that is
nothing yet opens setup; its plan page shows the install as a command; running it starts
the cluster, with this machine as a ready node serving the starter model; the cluster
console opens, and a second model served from its Models screen is in ``ctl models``.

It drives the installed ``llmgw`` in tmux (a socket of the test's own), as
``test_console_tmux`` does, with a real llama.cpp serving the real starter model.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.helpers import llmgw, wait_until
from tests.e2e.test_console_tmux import Pane, _llmgw_command

pytestmark = pytest.mark.timeout(600)


def _models(home: Path) -> dict[str, dict]:
    res = llmgw(home, "ctl", "models", "--json")
    if res.returncode != 0:
        return {}
    return {m["spec"]["name"]: m for m in json.loads(res.stdout).get("models", [])}


def _stop_up(home: Path) -> None:
    """Stop the ``llmgw up`` setup left running in the background (and what it started)."""
    pidfile = home / "run" / "up.pid"
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.3)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def test_setup_then_the_cluster_console_then_a_second_model(tmp_path, gemma3_270m_gguf):
    weights = gemma3_270m_gguf  # the starter's own weights, served again under a new name
    home = tmp_path / "home"
    command = f"LLMGW_HOME={shlex.quote(str(home))} {shlex.join(_llmgw_command())}"
    pane = Pane(tmp_path, "setup", (160, 48), command)
    try:
        # Nothing here yet: setup, with the parts of an installation.
        pane.wait_for("Control plane", "Starter model")
        pane.keys("p")
        # The plan page: what is in, and the same install as a command.
        text = pane.wait_for("The same install as a command", "llmgw server init")
        pane.wait_for("Run")
        pane.keys("r")
        # The run page: every step, then the cluster runs and the console is offered.
        text = pane.wait_for("The cluster runs.", timeout_s=300)
        assert "✗" not in text, text
        pane.keys("c")

        # The cluster console: this machine a ready node, the starter model serving.
        pane.wait_for("1/1 nodes ready", "1/1 models serving", timeout_s=120)
        (starter,) = _models(home)

        # A second model, served from the Models screen's dialog.
        pane.keys("m")
        pane.wait_for("Models: 1")
        pane.keys("a")
        pane.wait_for("Serve a model")
        pane.tmux("send-keys", "-t", pane.name, "-l", str(weights))
        # The name the file would give shows once the source is in; then on to Name.
        pane.wait_for("gemma-3-270m-q4-k-m (from the file name)")
        pane.keys("Tab")
        time.sleep(0.5)
        pane.tmux("send-keys", "-t", pane.name, "-l", "second")
        pane.wait_for("second")
        pane.keys("Enter")
        pane.wait_for("Models: 2")

        # The same model, as the command sees it, and serving.
        models = wait_until(
            lambda: (m := _models(home)).get("second", {}).get("state") == "serving" and m,
            timeout_s=180,
        )
        assert set(models) == {starter, "second"}
        assert models["second"]["spec"]["source"] == str(weights)
        pane.wait_for("Models: 2 (2 serving)", timeout_s=30)

        pane.keys("q")
        text = pane.wait_for("[llmgw exited 0]")
        assert "Traceback" not in text
    finally:
        pane.close()
        _stop_up(home)
