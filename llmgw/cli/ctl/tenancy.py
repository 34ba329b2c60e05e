"""``llmgw ctl org|team|project``: the tree API keys hang from.

Paths are as the API takes them: ``Acme``, ``Acme/ml``, ``Acme/ml/search``.
"""

from __future__ import annotations

import typer
from rich.table import Table
from rich.text import Text

from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.errors import UsageError
from llmgw.present import output
from llmgw.present.keyfmt import (
    NO_TENANTS,
    NOUNS,
    SHAPES,
    TENANT_COLUMNS,
    parse_retention,
    removed_line,
    tenant_cells,
    tenant_line,
)
from llmgw.present.output import renders
from proto.llmgw.v1 import ListTenantsReply, RemoveTenantReply, TenantView


def _level_app(kind: str) -> typer.Typer:
    noun, shape = NOUNS[kind], SHAPES[kind]
    sub = typer.Typer(
        help=f"{noun.capitalize()}s: create, list, rename, rm (named {shape}).",
        no_args_is_help=True,
    )

    @sub.command("create")
    def create(
        path: str = typer.Argument(..., help=f"{shape}, e.g. {_example(kind)}."),
        parents: bool = typer.Option(
            False, "--parents", "-p", help="Create the levels above too when they are missing."
        ),
        json: bool = JsonOpt,
    ) -> None:
        call(lambda c: c.create_tenant(kind, path, parents=parents), json=json)

    create.__doc__ = f"Add a {noun}."

    @sub.command("list")
    def list_(
        under: str = typer.Option("", "--under", help="Only those beneath this path."),
        json: bool = JsonOpt,
    ) -> None:
        call(lambda c: c.list_tenants(kind, under), json=json)

    list_.__doc__ = f"Every {noun}, with its limits and working keys."

    @sub.command("rename")
    def rename(
        path: str = typer.Argument(..., help=f"{shape} as it is now."),
        new_name: str = typer.Argument(..., help="The new last part of the path."),
        json: bool = JsonOpt,
    ) -> None:
        call(lambda c: c.rename_tenant(kind, path, new_name), json=json)

    rename.__doc__ = f"Rename a {noun}; what is beneath it and its keys move with it."

    @sub.command("rm")
    def remove(
        path: str = typer.Argument(..., help=shape),
        force: bool = typer.Option(
            False,
            "--force",
            help="Also remove the levels beneath and all they hold: keys, files, batches,"
            " stored responses, MCP grants (usage is kept).",
        ),
        json: bool = JsonOpt,
    ) -> None:
        call(lambda c: c.remove_tenant(kind, path, force=force), json=json)

    remove.__doc__ = (
        f"Remove an empty {noun} (nothing beneath it, no working key, file, batch or MCP"
        " grant), or with --force all of it."
    )
    if kind == "project":
        sub.command("retention")(_retention)
    return sub


def _retention(
    path: str = typer.Argument(..., help="ORG/TEAM/PROJECT, e.g. Acme/ml/search."),
    keep: str = typer.Argument(..., help="How long, e.g. 24h or 7d; off keeps none."),
    json: bool = JsonOpt,
) -> None:
    """How long the project keeps the /v1/responses answers its keys ask to store (store: true).

    Off by default: nothing is kept, and previous_response_id and GET /v1/responses/{id} are
    refused. Turning it off forgets what was kept.
    """
    try:
        seconds = parse_retention(keep)
    except UsageError as e:
        raise typer.Exit(code=output.fail(e)) from None
    call(lambda c: c.set_retention(path, seconds), json=json)


def _example(kind: str) -> str:
    return {"org": "Acme", "team": "Acme/ml", "project": "Acme/ml/search"}[kind]


org_app = _level_app("org")
team_app = _level_app("team")
project_app = _level_app("project")


@renders(TenantView)
def _tenant(v: TenantView):
    return Text(tenant_line(v))


@renders(ListTenantsReply)
def _tenants(reply: ListTenantsReply):
    if not reply.tenants:
        return Text(NO_TENANTS)
    t = Table(
        title=f"Organizations, teams and projects ({len(reply.tenants)})", title_justify="left"
    )
    for col in TENANT_COLUMNS:
        t.add_column(col)
    for v in reply.tenants:
        t.add_row(*tenant_cells(v))
    return t


@renders(RemoveTenantReply)
def _removed(reply: RemoveTenantReply):
    return Text(removed_line(reply))
