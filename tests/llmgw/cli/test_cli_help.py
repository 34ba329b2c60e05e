"""``--help`` of every llmgw command and group, now that commands are imported lazily.

A group lists its commands from a table (llmgw/cli/lazy.py) so that its help
imports none of them; these tests hold that table to the commands themselves,
and walk every command to see its help list every option and subcommand.
"""

from __future__ import annotations

import inspect

import pytest
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner

from llmgw.cli.lazy import LazyGroup
from llmgw.cli.main import app

runner = CliRunner()
WIDE = {"COLUMNS": "300", "TERM": "dumb"}


def every_command(group=None, path=()):
    """(path, command) of every command and group under ``group``, each imported."""
    group = group or get_command(app)
    yield path, group
    if isinstance(group, TyperGroup):
        for name in group.list_commands(None):
            yield from every_command(group.get_command(None, name), (*path, name))


def lazy_groups():
    return [(path, cmd) for path, cmd in every_command() if isinstance(cmd, LazyGroup)]


def listed_line(command) -> str:
    """The first paragraph of a command's help, as typer lists it in its group."""
    return inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0].strip()


def show(path) -> str:
    return " ".join(("llmgw", *path))


def test_every_lazy_commands_summary_is_the_one_its_command_gives():
    # The table is written by hand beside the commands' docstrings; a docstring
    # changed without it would list stale words in `llmgw ctl --help`.
    groups = lazy_groups()
    assert {show(p) for p, _ in groups} == {"llmgw", "llmgw server", "llmgw node", "llmgw ctl"}
    for path, group in groups:
        for name, lazy in group.lazy.items():
            real = group.get_command(None, name)
            assert lazy.summary == listed_line(real), f"{show(path)} {name}"
            # A stand-in lists a command as typer would only where nothing else marks it.
            assert not real.hidden and not real.deprecated, f"{show(path)} {name}"
            assert not getattr(real, "rich_help_panel", None), f"{show(path)} {name}"


@pytest.mark.parametrize("path", [(), ("server",), ("node",), ("ctl",)], ids=show)
def test_a_groups_listing_is_the_one_its_imported_commands_give(path, monkeypatch):
    lazily = runner.invoke(app, [*path, "--help"], env=WIDE)
    assert lazily.exit_code == 0, lazily.output
    # The same help, each command imported and asked for its own help text.
    monkeypatch.setattr(LazyGroup, "format_help", TyperGroup.format_help)
    imported = runner.invoke(app, [*path, "--help"], env=WIDE)
    assert imported.exit_code == 0, imported.output
    assert lazily.output == imported.output


@pytest.mark.parametrize("path", [p for p, _ in every_command()], ids=show)
def test_every_commands_help_lists_its_options_and_subcommands(path):
    command = dict(every_command())[path]
    result = runner.invoke(app, [*path, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert f"Usage: root {' '.join(path)}".rstrip() in result.output
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        for opt in (*param.opts, *param.secondary_opts):
            if opt.startswith("-"):
                assert opt in result.output, f"{show(path)}: {opt}"
    if isinstance(command, TyperGroup):
        for name in command.list_commands(None):
            assert f" {name} " in result.output, f"{show(path)}: {name}"
            summary = listed_line(command.get_command(None, name))
            for line in summary.splitlines():
                assert line.strip() in result.output, f"{show(path)} {name}"
