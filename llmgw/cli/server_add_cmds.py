"""``llmgw server add HOST``, and the standbys of ``llmgw server init --standbys HOST…``.

Plain command functions over llmgw.setup.server_add; llmgw/cli/main.py
registers ``server_add`` on the ``server`` group. People get a line per step
(the words node add prints, llmgw.onboard.words); ``--json`` prints one
object: the result, with every step event under ``steps``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Annotated

import typer
from rich.console import Console

from llmgw.cli import ssh_options as ssh
from llmgw.errors import ExitCode, UsageError
from llmgw.onboard import SshTarget
from llmgw.onboard.words import event_lines
from llmgw.paths import Paths, resolve
from llmgw.setup.server_add import ServerAddPlan, add_server, cluster_store_dsn
from llmgw.setup.server_add_checks import store_address

STORE_DSN_ENV = "LLMGW_STORE_DSN"


def server_add(
    host: ssh.Host,
    user: ssh.User = "",
    port: ssh.Port = 0,
    identity: ssh.Identity = "",
    accept_new_host_key: ssh.AcceptNewHostKey = False,
    known_hosts: ssh.KnownHosts = "",
    advertise: Annotated[
        str,
        typer.Option(
            "--advertise",
            help="The name or address agents and clients reach it by (default: HOST); "
            "its server certificate names both.",
        ),
    ] = "",
    store_dsn: Annotated[
        str,
        typer.Option(
            "--store-dsn",
            envvar=STORE_DSN_ENV,
            show_envvar=True,
            help="postgresql://… the new control plane reaches the store by (default: this "
            f"one's). Prefer {STORE_DSN_ENV}: a command line is visible to every user.",
        ),
    ] = "",
    install_root: Annotated[
        str, typer.Option("--install-root", help="Put everything there under this folder.")
    ] = "",
    wheelhouse: ssh.Wheelhouse = "",
    python: Annotated[
        str, typer.Option("--python", help="The machine's Python 3.11+ (default python3).")
    ] = "python3",
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object: the result and its steps.")
    ] = False,
) -> None:
    """Make another machine a control plane of this cluster, standing by (PostgreSQL store)."""
    # Read once; what it starts need not see a password.
    os.environ.pop(STORE_DSN_ENV, None)
    if problem := ssh.wheelhouse_problem(wheelhouse):
        _usage(problem, json_output)
    plan = ServerAddPlan(
        target=ssh.target(host, user, port, identity, known_hosts, accept_new_host_key),
        paths=resolve(),
        advertise=advertise,
        store_dsn=store_dsn,
        install_root=install_root,
        wheelhouse=wheelhouse,
        python=python,
    )
    result = asyncio.run(drive([plan], json_output=json_output))[0]
    if json_output:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    raise typer.Exit(code=int(result.get("exit_code", 1)))


def standby_plans(
    paths: Paths,
    hosts: list[str],
    *,
    user: str = "",
    identity: str = "",
    accept_new_host_key: bool = False,
) -> list[ServerAddPlan]:
    """``server init --standbys``: a plan per host (comma separated allowed), SSH as given.

    This control plane has just been set up and is not running yet: the wait
    asks each new one itself rather than this one's admin API.
    """
    named = [h.strip() for item in hosts for h in item.split(",") if h.strip()]
    if len(set(named)) != len(named):
        raise UsageError("a machine is named twice in --standbys")
    return [
        ServerAddPlan(
            target=SshTarget(
                host=h, user=user, identity=identity, accept_new_host_key=accept_new_host_key
            ),
            paths=paths,
            expect_running=False,
        )
        for h in named
    ]


def check_standbys(paths: Paths, hosts: list[str], store_dsn: str, force_config: bool) -> None:
    """``server init --standbys`` checked before init writes anything: each host named once,
    and a store they can share (the one given, else the one a kept server.yaml names)."""
    standby_plans(paths, hosts)
    dsn = store_dsn
    if not dsn and paths.server_yaml.exists() and not force_config:
        dsn = cluster_store_dsn(paths)[1]
    if dsn.startswith(("postgresql://", "postgres://")):
        if not store_address(dsn):
            raise UsageError(
                "the store's address is this machine's own (loopback or a unix socket): "
                "the standbys cannot reach it by that",
                hint="give the address every control plane reaches it by: --store-dsn "
                "postgresql://USER@DB-HOST:5432/DB; nothing was written",
            )
        return
    raise UsageError(
        "standby control planes share the cluster's store, and SQLite lives on this "
        "machine alone: --standbys needs a PostgreSQL store",
        hint=f"give one they all reach: --store-dsn postgresql://USER@DB-HOST:5432/DB "
        f"(or {STORE_DSN_ENV}, when it holds a password); nothing was written",
    )


def init_standbys(
    paths: Paths,
    hosts: list[str],
    user: str,
    identity: str,
    accept_new_host_key: bool,
    json_output: bool,
) -> tuple[list[dict], int]:
    """``server add`` each standby of ``server init``; their results and the exit code."""
    plans = standby_plans(
        paths, hosts, user=user, identity=identity, accept_new_host_key=accept_new_host_key
    )
    results = asyncio.run(drive(plans, json_output=json_output))
    failed = [r for r in results if not r.get("ok")]
    return results, int(failed[0].get("exit_code", 1)) if failed else 0


async def drive(plans: list[ServerAddPlan], *, json_output: bool) -> list[dict]:
    """Run each plan in turn, a line per event for people (stderr with ``json_output``);
    each one's result object, with its events under ``steps``."""
    console = Console(highlight=False, stderr=json_output)
    results = []
    for plan in plans:
        steps: list[dict] = []
        result: dict = {"ok": False, "exit_code": int(ExitCode.ERROR)}
        if len(plans) > 1 and not json_output:
            console.print(f"server add {plan.target.host}:")
        async for ev in add_server(plan):
            if not json_output:
                for line in event_lines(ev):
                    console.print(line)
            if ev.step == "result" and ev.result is not None:
                result = {**ev.result, "detail": ev.detail, "fix": ev.fix}
            else:
                steps.append(ev.model_dump(exclude_none=True))
        result["steps"] = steps
        results.append(result)
    return results


def _usage(message: str, json_output: bool) -> None:
    if json_output:
        sys.stdout.write(json.dumps({"ok": False, "exit_code": 2, "detail": message}) + "\n")
    else:
        print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code=2)
