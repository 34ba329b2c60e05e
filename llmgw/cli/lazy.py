"""A command group that imports a command's module only when that command is called.

``llmgw version`` answered in 1.6 s when every command's module was imported
first (asyncssh, the generated proto, every group's presenters; issue 28). A
``LazyGroup`` knows its commands by name, by where they live and by their
summary, the first paragraph of their help, which the group's own ``--help``
lists: the module is imported when the command runs or shows its own help.
tests/llmgw/cli/test_cli_help.py holds every summary equal to its command's.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Lazy:
    """A command of a group, known before its module is imported."""

    # "package.module:name": a typer.Typer (the command is its group) or a command function.
    target: str
    # The first paragraph of the command's help, as the group's listing shows it.
    summary: str
    # The summary is the command's whole help (its docstring, if any, is for readers of the code).
    summary_is_help: bool = False

    def load(self, name: str) -> Any:
        """The command itself: its module imported, its typer app made a click command."""
        module, _, attr = self.target.partition(":")
        found = getattr(importlib.import_module(module), attr)
        if isinstance(found, typer.Typer):
            command = typer.main.get_group(found)
        else:
            app = typer.Typer()
            help_ = self.summary if self.summary_is_help else None
            app.command(name, cls=_Command, help=help_)(found)
            command = typer.main.get_group(app).commands[name]
        command.name = name
        return command


class _FalseHelpFlag:
    """Gives ``--help`` the value False when it is not given, as every other flag has.

    Typer passes a flag's value through a pydantic TypeAdapter unless it is
    already a bool; ``--help`` not given is None, and building its adapter
    imports pydantic (0.1 s) on every call of every command.
    """

    def get_help_option(self, ctx: Any) -> Any:
        option = super().get_help_option(ctx)  # type: ignore[misc]
        if option is not None and option.default is None:
            option.default = False
        return option


class _Command(_FalseHelpFlag, TyperCommand):
    """A command of a LazyGroup made from a function."""


class _Summary(TyperCommand):
    """Stands in for a command not imported yet: its name and summary, for a listing."""


def lazy_group(commands: dict[str, Lazy]) -> type[LazyGroup]:
    """A LazyGroup class of these commands, listed in this order, for ``typer.Typer(cls=…)``.

    For example ``typer.Typer(cls=lazy_group({"status": Lazy("llmgw.cli.ctl.cluster:status",
    "The control plane: …")}))``.
    """
    return type("LazyGroup", (LazyGroup,), {"lazy": commands})


class LazyGroup(_FalseHelpFlag, TyperGroup):
    """A TyperGroup whose ``lazy`` commands are imported when resolved, not when listed."""

    lazy: ClassVar[dict[str, Lazy]] = {}

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        # Every name is in `commands` from the start, so that TyperGroup's "Did you mean"
        # sees them all and the listing keeps the table's order.
        for name, lazy in self.lazy.items():
            self.commands.setdefault(name, _Summary(name=name, help=lazy.summary))
        self._listing = False

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        if isinstance(command, _Summary) and not self._listing:
            command = self.commands[cmd_name] = self.lazy[cmd_name].load(cmd_name)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        # The group's help lists its commands from their summaries, importing none of them.
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
