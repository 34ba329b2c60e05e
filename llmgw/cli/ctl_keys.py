"""``llmgw ctl keys``: API keys for the client API (the secret is shown once)."""

from __future__ import annotations

import re

import typer
from rich.table import Table
from rich.text import Text

from llmgw import output
from llmgw.cli.ctl import JsonOpt, app, call
from llmgw.errors import UsageError
from llmgw.output import renders
from proto.llmgw.v1 import KeyView, ListKeysReply

keys_app = typer.Typer(help="API keys: create (shown once), list, revoke.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> int:
    """'90d', '12h', '30m', '1w2d' -> seconds; '' -> 0 (never)."""
    if not text:
        return 0
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise UsageError(f"{text!r} is not a duration: write it like 90d, 12h or 30m")
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


@keys_app.command("create")
def create(
    project: str = typer.Option(..., "--project", help="ORG/TEAM/PROJECT the key belongs to."),
    name: str = typer.Option("", "--name", help="What the key is for."),
    expires_in: str = typer.Option("", "--expires-in", help="e.g. 90d, 12h (default: never)."),
    models: str = typer.Option("", "--models", help="Comma-separated models (default: all)."),
    rpm: int = typer.Option(0, "--rpm", min=0, help="Requests per minute (default: no limit)."),
    tpm: int = typer.Option(0, "--tpm", min=0, help="Tokens per minute (default: no limit)."),
    json: bool = JsonOpt,
) -> None:
    """Make a key; its secret is printed this once and never again."""
    try:
        seconds = parse_duration(expires_in)
    except UsageError as e:
        raise typer.Exit(code=output.fail(e)) from None
    wanted = [m.strip() for m in models.split(",") if m.strip()]
    call(
        lambda c: c.create_key(
            project, name=name, models=wanted, expires_in_s=seconds, rpm=rpm, tpm=tpm
        ),
        json=json,
    )


@keys_app.command("list")
def list_keys(project: str = typer.Option("", "--project"), json: bool = JsonOpt) -> None:
    """Keys with their project, expiry and last use (never their secrets)."""
    call(lambda c: c.list_keys(project), json=json)


@keys_app.command("revoke")
def revoke(key_id: str = typer.Argument(...), json: bool = JsonOpt) -> None:
    """Stop a key working, on every control plane within seconds."""
    call(lambda c: c.revoke_key(key_id), json=json)


@renders(KeyView)
def _key(k: KeyView):
    if k.secret:
        return Text.assemble(
            (f"Key {k.key_id} for {k.project} made. Its secret, shown this once:\n", ""),
            (k.secret, "bold"),
            ("\nUse it as: Authorization: Bearer <secret>", "dim"),
        )
    state = f"revoked {k.revoked_at}" if k.revoked_at else "active"
    return Text(f"Key {k.key_id} ({k.prefix}…) for {k.project}: {state}")


@renders(ListKeysReply)
def _keys(reply: ListKeysReply):
    if not reply.keys:
        return Text("No keys yet. Make one: llmgw ctl keys create --project ORG/TEAM/PROJECT")
    t = Table(title=f"Keys ({len(reply.keys)})", title_justify="left")
    for col in ("KEY", "PROJECT", "NAME", "PREFIX", "MODELS", "EXPIRES", "LAST USED", "STATE"):
        t.add_column(col)
    for k in reply.keys:
        t.add_row(
            k.key_id,
            k.project,
            k.name,
            k.prefix + "…",
            ",".join(k.models) or "all",
            k.expires_at or "never",
            k.last_used_at or "-",
            Text("revoked", style="red") if k.revoked_at else Text("active", style="green"),
        )
    return t
