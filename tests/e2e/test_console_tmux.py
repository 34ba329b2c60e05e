"""The real ``llmgw`` console in a real terminal (tmux), against a real ``llmgw up``.

Every other console test drives Textual's pilot in a headless app; this one
types into the installed ``llmgw`` command running in a tmux pane 80×24 and
200×60, as an operator would, and reads the screen back with
``tmux capture-pane``: each screen comes up with its title and its keys in the
footer, and nothing ever shows a traceback.

tmux runs on a socket of its own in the test's directory: it never touches
a tmux server the machine already has.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.helpers import init_on_free_ports, llmgw, nodes_json, start, wait_until
from tui.screens.shell import PALETTE_HINT_SHORT_CELLS, tight_tabs
from tui.screens.shell import SCREENS as SHELL_TABS

TMUX = shutil.which("tmux")
if TMUX is None:
    # Under CI a missing tmux is a broken machine (scripts/test.sh installs it), not a skip.
    if os.environ.get("CI") == "true":
        raise RuntimeError("tmux is not installed: scripts/test.sh installs it with apt")
    pytest.skip("tmux is not installed (apt-get install tmux)", allow_module_level=True)

SIZES = [(80, 24), (200, 60)]


def _llmgw_command() -> list[str]:
    """The installed ``llmgw`` console script beside this Python, as a user runs it."""
    script = Path(sys.executable).with_name("llmgw")
    return [str(script)] if script.exists() else [sys.executable, "-m", "llmgw"]


# Each screen: the key that opens it, what its status line starts with, and the keys
# its footer must show (descriptions, as the footer writes them) besides the shell's.
SCREENS = [
    ("n", "Nodes: 1 (1 ready)", ["Cordon", "Drain", "Remove", "Details"]),
    ("m", "Models:", ["Serve", "Scale", "Remove", "Explain"]),
    ("p", "Replicas:", ["History", "Restart"]),
    (
        "k",
        "Levels:",
        ["New level", "New key", "Revoke", "Rotate", "Limits", "Rename", "Remove level"],
    ),
    ("u", "Usage by", ["Period", "Group by"]),
    # No batch yet: its cancel key has nothing to act on and is not shown.
    ("b", "Batches:", []),
    # No mirror in this cluster: the screen says how to run one; nothing to add or remove.
    ("i", "has no mirror", []),
    # No company MCP server yet: the cursor is on llmgw:admin, which is granted, not changed.
    ("j", "No company MCP servers yet", ["Add", "Grant", "Revoke"]),
    # The settings kept in the store; the cursor is on the newest version, which is in
    # force, so there is nothing to roll back to and that key is not shown.
    ("w", "Settings:", ["Change a key"]),
    ("o", "Live from", []),
]
# The screens' keys are on the header's tabs (TABS); the palette's on the tab line too.
SHELL_KEYS = ["Quit"]
# Each whole (but see TAB_OF_KEY); in 80 columns one space apart instead of two (tabs_markup).
TABS = (
    "o Overview",
    "n Nodes",
    "m Models",
    "p Replicas",
    "k Keys",
    "u Usage",
    "b Batches",
    "i Mirror",
    "j MCP",
    "w Settings",
)
# Ten tabs overflow 80 columns: the shell's tight_tabs has the last ones (never the
# current one) show their key alone there, at most three; every other tab is whole.
TAB_OF_KEY = {s.key: s for s in SHELL_TABS}
# In 80 columns, beside the tabs, the palette's key alone; its words where there is room.
PALETTE = {80: "^p", 200: "^p commands"}

# Keys the footer does not show, by (terminal width or None for any, screen): none
# today. A defect found later is listed here so that this test fails when a new one
# appears, and fails again once it is fixed (then its entry goes).
KNOWN_MISSING: dict[tuple[int | None, str], set[str]] = {}


def _known_missing(width: int, marker: str) -> set[str]:
    return KNOWN_MISSING.get((None, marker), set()) | KNOWN_MISSING.get((width, marker), set())


class Pane:
    """One tmux session on a private socket, running one command in a window of a set size."""

    def __init__(self, workdir: Path, name: str, size: tuple[int, int], command: str) -> None:
        self.socket = workdir / f"tmux-{name}.sock"
        self.name = name
        width, height = size
        # The shell stays after the console ends, so a crash's last words can be read.
        # COLUMNS and LINES of the test run (pytest sets them) would override the
        # pane's own size for the program in it.
        script = f"unset COLUMNS LINES; {command}; echo '[llmgw exited '$?']'; sleep 600"
        self.tmux(
            "-f", "/dev/null", "new-session", "-d", "-s", name,
            "-x", str(width), "-y", str(height), "sh", "-c", script,
        )  # fmt: skip

    def tmux(self, *args: str) -> str:
        res = subprocess.run(
            [TMUX, "-S", str(self.socket), *args], capture_output=True, text=True, timeout=20
        )
        assert res.returncode == 0, f"tmux {' '.join(args)}: {res.stderr}"
        return res.stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def size(self) -> tuple[int, int]:
        out = self.tmux("display-message", "-p", "-t", self.name, "#{pane_width} #{pane_height}")
        w, h = out.split()
        return int(w), int(h)

    def wait_for(self, *words: str, timeout_s: float = 20) -> str:
        """The screen once every one of ``words`` is on it (a bound, not a timing test)."""
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            assert "Traceback" not in text, text
            if all(w in text for w in words):
                return text
            time.sleep(0.2)
        raise AssertionError(f"never showed {words}; the screen was:\n{text}")

    def wait_gone(self, word: str, timeout_s: float = 20) -> str:
        """The screen once ``word`` has left it."""
        deadline = time.monotonic() + timeout_s
        text = self.text()
        while word in text and time.monotonic() < deadline:
            time.sleep(0.2)
            text = self.text()
        assert word not in text, f"{word!r} stayed on the screen:\n{text}"
        return text

    def close(self) -> None:
        subprocess.run([TMUX, "-S", str(self.socket), "kill-server"], capture_output=True)


def footer(text: str) -> str:
    """The bottom line of the screen: the key row."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``llmgw up`` under a temporary LLMGW_HOME, its node ready, a sim model, a project and
    a key; stopped (with everything it started) after the module."""
    home = tmp_path_factory.mktemp("console") / "home"
    init_on_free_ports(home)
    up = start(home, "up")
    try:
        wait_until(lambda: (nodes_json(home) or [{}])[0].get("state") == "ready", timeout_s=60)
        for args in (
            ["ctl", "model", "serve", "/models/none.gguf", "--name", "sim-chat"]
            + ["--engine", "sim", "--cpu"],
            ["ctl", "project", "create", "Acme/ml/search", "--parents"],
            ["ctl", "keys", "create", "--project", "Acme/ml/search", "--name", "web"],
        ):
            res = llmgw(home, *args, "--json")
            assert res.returncode == 0, res.stderr
        yield home
    finally:
        up.terminate()
        try:
            up.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.communicate()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_screen_comes_up_in_a_real_terminal_with_its_title_and_keys(cluster, tmp_path, size):
    command = f"LLMGW_HOME={shlex.quote(str(cluster))} {shlex.join(_llmgw_command())}"
    pane = Pane(tmp_path, f"console-{size[0]}x{size[1]}", size, command)
    try:
        assert pane.size() == size
        # Bare `llmgw` on a control plane: the cluster console, on the Overview.
        pane.wait_for("Live from", "1/1 nodes ready")

        missing: dict[str, set[str]] = {}
        for key, marker, own_keys in SCREENS:
            pane.keys(key)
            text = pane.wait_for(marker)
            # The header: the cluster's name and state, and every tab whole.
            assert text.splitlines()[0].lstrip().startswith("llmgw"), text
            room = size[0] - 2 - PALETTE_HINT_SHORT_CELLS
            tight = {s.key for s in SHELL_TABS if s.mode in tight_tabs(TAB_OF_KEY[key].mode, room)}
            whole = [tab for tab in TABS if tab.split()[0] not in tight]
            assert key not in tight and len(whole) >= len(TABS) - 3, (key, tight)
            assert all(tab in text.splitlines()[1] for tab in whole), text
            assert PALETTE[size[0]] in text.splitlines()[1], text
            # The footer follows the status line by a frame or two (its keys are
            # refreshed once the rows are in): look until it shows what it should.
            deadline = time.monotonic() + 5
            while True:
                row = footer(pane.text())
                gone = {k for k in own_keys + SHELL_KEYS if not re.search(rf"\b{k}\b", row)}
                if gone == _known_missing(size[0], marker) or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            if gone:
                missing[marker] = gone
        known = {
            marker: _known_missing(size[0], marker)
            for _, marker, _ in SCREENS
            if _known_missing(size[0], marker)
        }
        assert missing == known, f"keys missing from the footer at {size}: {missing}"

        # Enter on a node opens its details; Esc closes them.
        pane.keys("n")
        pane.wait_for("Nodes: 1 (1 ready)")
        pane.keys("Enter")
        pane.wait_for("last heartbeat")
        # A key sent right after Escape would be read as Alt+key: wait for it to close.
        pane.keys("Escape")
        pane.wait_gone("last heartbeat")

        pane.keys("q")
        text = pane.wait_for("[llmgw exited 0]")
        assert "Traceback" not in text
    finally:
        pane.close()
