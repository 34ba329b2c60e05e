"""One way to print every command's answer.

``emit(reply, json=True)`` prints exactly the reply as JSON on stdout and
nothing else; without it, the renderer registered for the reply's type draws
a rich table for people. Errors go to stderr through ``fail``.

Light to import (every command's error goes through ``fail``): the proto and
pydantic support is imported by ``as_plain``, when there is a reply.
"""

from __future__ import annotations

import json as _json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console

from llmgw.errors import LlmgwError

_renderers: dict[type, Callable[[Any], Any]] = {}

stdout = Console()
stderr = Console(stderr=True)


def renders(kind: type):
    """Register the function that draws ``kind`` for people."""

    def deco(fn):
        _renderers[kind] = fn
        return fn

    return deco


def as_plain(reply: Any) -> Any:
    import betterproto2
    from pydantic import BaseModel

    from llmgw.protojson import to_plain

    if isinstance(reply, betterproto2.Message):
        return to_plain(reply)
    if isinstance(reply, BaseModel):
        return reply.model_dump(mode="json")
    return reply


def emit(reply: Any, *, json: bool, next_step: str = "") -> None:
    if json:
        sys.stdout.write(_json.dumps(as_plain(reply), indent=2) + "\n")
        sys.stdout.flush()
        return
    render = _renderers.get(type(reply))
    if render is None:
        stdout.print_json(_json.dumps(as_plain(reply)))
    else:
        stdout.print(render(reply))
    if next_step:
        stdout.print(f"[dim]{next_step}[/dim]")


def fail(err: LlmgwError) -> int:
    """Print an error for people on stderr; returns the exit code to use."""
    stderr.print(f"[bold red]error:[/bold red] {err.message}", highlight=False)
    if err.hint:
        stderr.print(f"  {err.hint}", highlight=False, style="dim")
    return int(err.exit_code)
