"""``llmgw ctl keys``: API keys for the client API (the secret is shown once)."""

from __future__ import annotations

import typer
from rich.table import Table
from rich.text import Text

from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.errors import UsageError
from llmgw.present import output
from llmgw.present.keyfmt import (
    KEY_COLUMNS,
    NO_KEYS,
    describe_limits,
    key_cells,
    parse_duration,
    parse_money,
    secret_text,
)
from llmgw.present.output import renders
from proto.llmgw.v1 import KeyView, LimitsView, ListKeysReply

keys_app = typer.Typer(
    help="API keys: create (shown once), list, revoke, rotate, limits.", no_args_is_help=True
)


@keys_app.command("create")
def create(
    project: str = typer.Option(..., "--project", help="ORG/TEAM/PROJECT the key belongs to."),
    name: str = typer.Option("", "--name", help="What the key is for."),
    expires_in: str = typer.Option("", "--expires-in", help="e.g. 90d, 12h (default: never)."),
    models: str = typer.Option("", "--models", help="Comma-separated models (default: all)."),
    rpm: int = typer.Option(0, "--rpm", min=0, help="Requests per minute (default: no limit)."),
    tpm: int = typer.Option(0, "--tpm", min=0, help="Tokens per minute (default: no limit)."),
    budget: str = typer.Option(
        "", "--budget", help="Money per calendar month (UTC), e.g. 25 or 0.50 (default: none)."
    ),
    band: str = typer.Option("", "--band", help="Admission band (default: the default band)."),
    json: bool = JsonOpt,
) -> None:
    """Make a key; its secret is printed this once and never again."""
    try:
        seconds = parse_duration(expires_in)
        budget_micros = parse_money(budget) if budget else None
    except UsageError as e:
        raise typer.Exit(code=output.fail(e)) from None
    wanted = [m.strip() for m in models.split(",") if m.strip()]
    call(
        lambda c: c.create_key(
            project,
            name=name,
            models=wanted,
            expires_in_s=seconds,
            rpm=rpm,
            tpm=tpm,
            budget_month_micros=budget_micros,
            band=band,
        ),
        json=json,
    )


@keys_app.command("list")
def list_keys(
    project: str = typer.Option("", "--project", help="Only this project's keys."),
    json: bool = JsonOpt,
) -> None:
    """Keys with their kind, project, limits, expiry and last use (never their secrets)."""
    call(lambda c: c.list_keys(project), json=json)


@keys_app.command("revoke")
def revoke(key_id: str = typer.Argument(...), json: bool = JsonOpt) -> None:
    """Stop a key working, on every control plane within seconds."""
    call(lambda c: c.revoke_key(key_id), json=json)


@keys_app.command("rotate")
def rotate(
    key_id: str = typer.Argument(..., help="The key to replace."),
    overlap: str = typer.Option(
        "1h", "--overlap", help="How long the old secret keeps working (e.g. 24h; 0 stops it now)."
    ),
    json: bool = JsonOpt,
) -> None:
    """A new secret for a key, the old one working for the overlap; the new secret is shown once."""
    try:
        seconds = 0 if overlap.strip() == "0" else parse_duration(overlap)
    except UsageError as e:
        raise typer.Exit(code=output.fail(e)) from None
    call(lambda c: c.rotate_key(key_id, seconds), json=json)


@keys_app.command("limits")
def limits(
    scope: str = typer.Argument(
        ..., help="A key id (key_…) or an ORG, ORG/TEAM or ORG/TEAM/PROJECT path."
    ),
    rpm: int | None = typer.Option(None, "--rpm", min=1, help="Requests per minute."),
    tpm: int | None = typer.Option(None, "--tpm", min=1, help="Tokens per minute."),
    budget: str = typer.Option("", "--budget", help="Money per calendar month (UTC)."),
    budget_day: str = typer.Option("", "--budget-day", help="Money per day (UTC)."),
    clear: str = typer.Option(
        "", "--clear", help="Limits to lift, comma-separated: rpm,tpm,budget,budget-day."
    ),
    replace: bool = typer.Option(
        False, "--replace", help="Write the whole row: every limit not given is lifted."
    ),
    json: bool = JsonOpt,
) -> None:
    """Change the limits of a key or a level of the tree; only the limits given change.

    Each level's limits hold for everything beneath it together; a request
    must pass its key's, project's, team's and organization's.
    """
    names = {"rpm": "rpm", "tpm": "tpm", "budget": "budget_month_micros"}
    names["budget-day"] = "budget_day_micros"
    try:
        wanted = LimitsView(
            scope=scope,
            rpm=rpm,
            tpm=tpm,
            budget_month_micros=parse_money(budget) if budget else None,
            budget_day_micros=parse_money(budget_day) if budget_day else None,
        )
        lifted = []
        for item in (c.strip() for c in clear.split(",") if c.strip()):
            if item not in names:
                raise UsageError(
                    f"--clear {item!r}: say one or more of rpm, tpm, budget, budget-day"
                )
            lifted.append(names[item])
    except UsageError as e:
        raise typer.Exit(code=output.fail(e)) from None
    call(lambda c: c.set_limits(wanted, clear=lifted, replace=replace), json=json)


@renders(KeyView)
def _key(k: KeyView):
    if k.secret:
        return secret_text(k)
    state = f"revoked {k.revoked_at}" if k.revoked_at else "active"
    return Text(f"Key {k.key_id} ({k.prefix}…) for {k.project}: {state}")


@renders(LimitsView)
def _limits(v: LimitsView):
    return Text(f"Limits of {v.scope}: {describe_limits(v)}")


@renders(ListKeysReply)
def _keys(reply: ListKeysReply):
    if not reply.keys:
        return Text(NO_KEYS)
    t = Table(title=f"Keys ({len(reply.keys)})", title_justify="left")
    for col in KEY_COLUMNS:
        t.add_column(col)
    for k in reply.keys:
        t.add_row(*key_cells(k))
    return t
