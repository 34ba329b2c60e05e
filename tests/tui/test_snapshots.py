"""Snapshots of every console screen with fixed data, in a small terminal and a large one.

Each scene of ``tests/tui/kit/fixed_console.py`` (the cluster console's screens
and dialogs over ``FixedAdmin``, the node console over ``FixedProbe``, setup
on a fixed machine) is drawn at 80×24 and 200×60 and compared with the SVG
under ``__snapshots__``. A screen that changes on purpose is accepted with
``pytest tests/tui/test_snapshots.py --snapshot-update`` (look at the report
first), then ``python scripts/console_captures.py`` to redraw docs/console.md.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.tui.kit.fixed_console import SCENES, Scene, fixed_place

SIZES = {"80x24": (80, 24), "200x60": (200, 60)}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("scene", SCENES, ids=lambda s: s.name)
def test_each_screen_draws_as_its_snapshot(snap_compare, scene: Scene, size: str):
    # snap_compare runs the app on a loop of its own: this test is not async.
    with fixed_place() as workdir:
        assert snap_compare(scene.make(workdir), terminal_size=SIZES[size], run_before=scene.open)


def test_docs_console_md_shows_the_screens_as_they_are():
    from scripts.console_captures import DOC, render

    text = DOC.read_text()
    assert asyncio.run(render(text)) == text, (
        "docs/console.md is out of date with the screens: run python scripts/console_captures.py"
    )
