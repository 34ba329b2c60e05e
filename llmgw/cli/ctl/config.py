"""``llmgw ctl config``: the cluster's kept settings — read, change, edit, history, diff, roll back.

What operators change while the cluster runs is one versioned document in
the store (llmgw/settings/document.py): the same on every control plane
within seconds and pushed to the agents. Every version records who made it
(the user running ctl) and when. A change is checked as a whole before it is
kept; a bad value is refused naming its key and what it expects. How the
replies look: llmgw/cli/ctl/render/settings.py.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

import typer

import llmgw.cli.ctl.render.settings  # noqa: F401  (registers the renderers)
from llmgw.admin_client import AdminClient
from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.errors import ConflictError, LlmgwError, UsageError
from llmgw.paths import resolve
from llmgw.present import output
from llmgw.present.settingsfmt import author
from llmgw.settings import SettingsRefused, load_document

config_app = typer.Typer(
    help="The cluster's kept settings: get, set, edit, history, diff, rollback.",
    no_args_is_help=True,
)

CommentOpt = typer.Option("", "--comment", "-m", help="Why: kept with the version.")


@config_app.command("get")
def config_get(
    key: str = typer.Argument("", help="A key (router.admission.bands[0].queue_ttl); all if none."),
    version: int = typer.Option(0, "--version", min=0, help="Of this version (0: the newest)."),
    json: bool = JsonOpt,
) -> None:
    """The settings document, or one key of it, with its version, who and when."""
    call(lambda c: c.get_settings(key, version=version), json=json)


@config_app.command("set")
def config_set(
    assignments: list[str] = typer.Argument(
        ..., help="KEY=VALUE, the value as YAML (5m, [a, b], {name: gold}); several at once."
    ),
    comment: str = CommentOpt,
    json: bool = JsonOpt,
) -> None:
    """Change keys; checked as a whole, kept as a new version, in force everywhere within seconds."""
    call(
        lambda c: c.set_settings(assignments, comment=comment, author=author()),
        json=json,
        next_step="See what changed: llmgw ctl config diff · undo it: llmgw ctl config rollback N",
    )


@config_app.command("history")
def config_history(
    limit: int = typer.Option(0, "--limit", min=0, help="The newest this many (0: 50)."),
    json: bool = JsonOpt,
) -> None:
    """Every version: when, by whom, from which, what it changed, why."""
    call(lambda c: c.settings_history(limit), json=json)


@config_app.command("diff")
def config_diff(
    a: int = typer.Argument(0, help="From this version (0: the one before B)."),
    b: int = typer.Argument(0, help="To this version (0: the newest)."),
    json: bool = JsonOpt,
) -> None:
    """What changed from version A to version B (no versions: the newest change)."""
    call(lambda c: c.settings_diff(a, b), json=json)


@config_app.command("rollback")
def config_rollback(
    version: int = typer.Argument(..., min=1, help="The version to go back to."),
    comment: str = CommentOpt,
    json: bool = JsonOpt,
) -> None:
    """Keep version N again, as a new version (the history keeps everything between)."""
    call(
        lambda c: c.rollback_settings(version, comment=comment, author=author()),
        json=json,
        next_step="Check it: llmgw ctl config diff",
    )


@config_app.command("edit")
def config_edit(comment: str = CommentOpt, json: bool = JsonOpt) -> None:
    """Open the newest version in $EDITOR; what is saved is checked as a whole, then kept.

    A refused edit says which key and what it expects, and offers to edit again
    with your changes still in. If someone kept another version meanwhile, the
    edit is refused and saved to a file for you to make again.
    """
    try:
        current = _ask(lambda c: c.get_settings())
        text = current.value_yaml
        while True:
            edited = _edit(text)
            if edited == current.value_yaml:
                output.stderr.print("Nothing changed; no version was written.")
                return
            try:
                load_document(edited)
                break
            except SettingsRefused as e:
                output.fail(e)
                if not typer.confirm("Edit again?", default=True, err=True):
                    raise typer.Exit(code=int(e.exit_code)) from None
                text = edited
        try:
            reply = _ask(
                lambda c: c.set_settings(
                    document_yaml=edited,
                    parent_version=current.version.version,
                    comment=comment,
                    author=author(),
                )
            )
        except ConflictError as e:
            kept = _keep_edit(edited)
            raise ConflictError(e.message, hint=f"your edit is kept in {kept}; {e.hint}") from None
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    output.emit(reply, json=json, next_step="See what changed: llmgw ctl config diff")


def _ask(method):
    async def go():
        async with AdminClient.from_paths(resolve()) as client:
            return await method(client)

    return asyncio.run(go())


def _editor() -> list[str]:
    command = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    return shlex.split(command)


def _edit(text: str) -> str:
    """``text`` as the operator leaves it after editing it in their editor."""
    with tempfile.TemporaryDirectory(prefix="llmgw-config-") as tmp:
        path = Path(tmp) / "settings.yaml"
        path.write_text(text)
        try:
            done = subprocess.run([*_editor(), str(path)], check=False)
        except FileNotFoundError as e:
            raise UsageError(
                f"the editor {_editor()[0]!r} was not found",
                hint="set EDITOR (e.g. EDITOR=nano), or change keys with llmgw ctl config set",
            ) from e
        if done.returncode != 0:
            raise UsageError(
                f"the editor exited with {done.returncode}; nothing was kept",
                hint="save and quit the editor normally to keep an edit",
            )
        return path.read_text()


def _keep_edit(text: str) -> Path:
    """Save a refused edit where the operator finds it again (0600: it is the cluster's settings)."""
    fd, name = tempfile.mkstemp(prefix="llmgw-settings-edit-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return Path(name)
