"""The Mirror screen's Add dialog: what ``llmgw ctl mirror add`` takes, as a form.

What was typed is checked by the command's own ``add_request``
(``llmgw.present.mirrorfmt``) and the dialog is dismissed with the request to
send, or None on Escape; the screen sends it and follows the add on its
progress line. A mistake stays in the form, in the command's words.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Checkbox, Input, Label

from llmgw.present.mirrorfmt import add_request
from proto.llmgw.v1 import MirrorAddRequest
from tui.screens.dialogs import FormDialog


def split_globs(text: str) -> list[str]:
    """``*.gguf, *.json`` or ``*.gguf *.json``: the globs as --include takes them one by one."""
    return [g for g in text.replace(",", " ").split() if g]


class MirrorAddDialog(FormDialog[MirrorAddRequest]):
    """Pull hf:org/name[@rev] into the mirror, or upload a file or folder of this machine."""

    OK_LABEL = "Add"

    def __init__(self) -> None:
        super().__init__("Add to the mirror")

    def fields(self) -> ComposeResult:
        yield Label("Source: hf:org/name@revision, or a file or folder on this machine")
        yield Input(placeholder="hf:google/gemma-3-270m-gguf@main", id="add-source")
        yield Label("Only files matching (globs; config and tokenizer files always)")
        yield Input(placeholder="*.gguf  (empty: every file)", id="add-include")
        yield Label("Keep a local file or folder as org/name")
        yield Input(placeholder="local/my-model", id="add-as")
        yield Checkbox(
            "Allow pickle files (only for a repository you have checked)", id="add-pickle"
        )

    def result(self) -> MirrorAddRequest:
        return add_request(
            self.field("#add-source"),
            include=split_globs(self.field("#add-include")),
            as_repo=self.field("#add-as"),
            allow_pickle=self.query_one("#add-pickle", Checkbox).value,
        )
