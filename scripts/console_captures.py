"""Redraw the screen captures in docs/console.md from the consoles themselves.

Each capture in the page sits between two markers naming a scene of
``tests/tui/kit/fixed_console.py`` and a terminal size::

    <!-- capture: nodes 120x14 -->
    ```text
    …what that screen shows, drawn by the console with fixed data…
    ```
    <!-- /capture -->

This script draws each scene at its size and puts the text in place; the
prose around the markers is left as written. ``--check`` only says whether
the page is current (tests/tui/test_snapshots.py asks the same).

    .venv/bin/python scripts/console_captures.py [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.tui.kit.fixed_console import SCENES, capture

DOC = ROOT / "docs" / "console.md"
BLOCK = re.compile(
    r"(?P<head><!-- capture: (?P<name>[\w-]+) (?P<w>\d+)x(?P<h>\d+) -->\n```text\n)"
    r"(?P<body>.*?)"
    r"(?P<tail>```\n<!-- /capture -->)",
    re.DOTALL,
)


async def render(text: str) -> str:
    """``text`` with every capture block drawn again."""
    scenes = {s.name: s for s in SCENES}
    out, at = [], 0
    for m in BLOCK.finditer(text):
        name = m["name"]
        if name not in scenes:
            raise SystemExit(f"docs/console.md names a scene that does not exist: {name}")
        drawn = await capture(scenes[name], (int(m["w"]), int(m["h"])))
        out += [text[at : m.start("body")], drawn.rstrip("\n") + "\n"]
        at = m.start("tail")
    out.append(text[at:])
    return "".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is current")
    args = parser.parse_args()
    text = DOC.read_text()
    drawn = asyncio.run(render(text))
    if args.check:
        if drawn != text:
            print(f"{DOC.relative_to(ROOT)} is out of date: run scripts/console_captures.py")
            return 1
        print(f"{DOC.relative_to(ROOT)} is current")
        return 0
    if drawn != text:
        DOC.write_text(drawn)
        print(f"redrew the captures in {DOC.relative_to(ROOT)}")
    else:
        print(f"{DOC.relative_to(ROOT)} was current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
