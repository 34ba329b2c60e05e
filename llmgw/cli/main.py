"""The ``llmgw`` command.

Every command is named in a table below, by where it lives and what it does;
its module is imported only when it is called (llmgw/cli/lazy.py), so that
``llmgw version`` or ``llmgw ctl status`` import no more than they run.
"""

from __future__ import annotations

import json as _json
import sys
from pathlib import Path

import typer

from llmgw import __version__
from llmgw.cli.lazy import Lazy, lazy_group
from llmgw.paths import resolve

# Every command of `llmgw`, in the order its --help lists them.
COMMANDS = {
    "start": Lazy(
        "llmgw.cli.service_cmds:start",
        "Start what llmgw runs here: mirror, control plane, agent (each when set up).",
    ),
    "stop": Lazy(
        "llmgw.cli.service_cmds:stop",
        "Stop what llmgw runs here: agent (its engines keep running), control plane, mirror.",
    ),
    "restart": Lazy("llmgw.cli.service_cmds:restart", "Stop, then start, what llmgw runs here."),
    "doctor": Lazy(
        "llmgw.cli.doctor_cmd:doctor",
        "Check this machine is ready to be a node (AVX2, driver, NVML, OS, disk, glibc).",
        summary_is_help=True,
    ),
    "console": Lazy(
        "llmgw.cli.main:console", "Open a console: the cluster's, this node's, or setup."
    ),
    "version": Lazy("llmgw.cli.main:version", "Print the llmgw version."),
    "agent": Lazy("llmgw.cli.main:agent", "Run this node's agent until Ctrl-C or SIGTERM."),
    "up": Lazy(
        "llmgw.cli.main:up",
        "Run a whole cluster on this machine: gatewayd + a local agent.",
    ),
    "server": Lazy("llmgw.cli.main:server_app", "The control plane (gatewayd)."),
    "node": Lazy("llmgw.cli.main:node_app", "Nodes: certificates and onboarding."),
    "ctl": Lazy(
        "llmgw.cli.ctl.app:app",
        "Operate a running control plane (what the console does, scriptable).",
    ),
    "mirror": Lazy(
        "llmgw.cli.mirror_cmds:app",
        "The model mirror: weights and engine builds for the cluster.",
    ),
}


SERVER_COMMANDS = {
    "init": Lazy(
        "llmgw.cli.init_cmds:server_init",
        "Create the cluster CA, certificates, admin token, server.yaml and its unit.",
        summary_is_help=True,
    ),
    "add": Lazy(
        "llmgw.cli.server_add_cmds:server_add",
        "Make another machine a control plane of this cluster, standing by (PostgreSQL store).",
    ),
}


NODE_COMMANDS = {
    "cert": Lazy(
        "llmgw.cli.init_cmds:node_cert",
        "Issue a node certificate bundle signed by the cluster CA.",
        summary_is_help=True,
    ),
    "add": Lazy(
        "llmgw.cli.node_cmds:node_add",
        "Add a machine over SSH: check it, install llmgw and its agent, join it to the cluster.",
    ),
    "remove": Lazy(
        "llmgw.cli.node_cmds:node_remove",
        "Remove a node: drain it, stop and disable its agent, revoke its certificate.",
    ),
}


app = typer.Typer(
    cls=lazy_group(COMMANDS),
    help="Run LLMs on your own GPU and CPU servers, from the terminal.\n\n"
    "Without a command, opens the console.",
    add_completion=False,
)
server_app = typer.Typer(cls=lazy_group(SERVER_COMMANDS), help="The control plane (gatewayd).")
node_app = typer.Typer(
    cls=lazy_group(NODE_COMMANDS), help="Nodes: certificates and onboarding.", no_args_is_help=True
)


def _run_or_exit(fn, *args) -> None:
    from llmgw.errors import LlmgwError
    from llmgw.present import output

    try:
        fn(*args)
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None


def which_console(paths) -> str:
    """The console bare ``llmgw`` opens here: "cluster" on a control plane (its
    server.yaml is here), "node" on a machine that is only a node, else "setup"."""
    if paths.server_yaml.exists():
        return "cluster"
    if paths.agent_yaml.exists():
        return "node"
    return "setup"


def _open_console(kind: str) -> None:
    paths = resolve()
    if kind == "setup":
        from tui.setup import run_setup

        if not run_setup(paths):
            return
        kind = "cluster"
    if kind == "node":
        from tui.node import run_node_console

        _run_or_exit(run_node_console, paths)
        return
    from tui.app import run_console

    _run_or_exit(run_console, paths)


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        _open_console(which_console(resolve()))


def console(
    kind: str = typer.Argument(
        "",
        help="cluster, node or setup (default: what this machine is — a control plane's"
        " console, a node's, or setup on a machine that is neither).",
    ),
) -> None:
    """Open a console: the cluster's, this node's, or setup."""
    if kind and kind not in ("cluster", "node", "setup"):
        from llmgw.errors import UsageError
        from llmgw.present import output

        raise typer.Exit(
            code=output.fail(UsageError(f"no console {kind!r}: say cluster, node or setup"))
        )
    _open_console(kind or which_console(resolve()))


def version(json: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """Print the llmgw version."""
    if json:
        sys.stdout.write(_json.dumps({"version": __version__}) + "\n")
    else:
        typer.echo(f"llmgw {__version__}")


@server_app.callback(invoke_without_command=True)
def server(
    ctx: typer.Context,
    config: Path = typer.Option(
        None, "--config", help="server.yaml to use (default: the machine's)."
    ),
) -> None:
    """Run the control plane until Ctrl-C or SIGTERM."""
    if ctx.invoked_subcommand is not None:
        return
    from gatewayd.main import main as gatewayd_main
    from llmgw import pidfile

    paths = resolve()
    with pidfile.held(paths.server_pid_file):
        _run_or_exit(gatewayd_main, paths, config)


def agent(
    config: Path = typer.Option(
        None, "--config", help="agent.yaml to use (default: the machine's)."
    ),
) -> None:
    """Run this node's agent until Ctrl-C or SIGTERM."""
    from agentd.main import main as agentd_main
    from llmgw import pidfile

    paths = resolve()
    with pidfile.held(paths.agent_pid_file):
        _run_or_exit(agentd_main, paths, config)


def up(
    host: list[str] = typer.Option(
        [], "--host", help="Extra name/address for the server certificate."
    ),
    mirror: bool = typer.Option(
        False,
        "--mirror",
        help="Run a model mirror here too (set up on first use; later runs start it "
        "whenever its mirror.yaml is there).",
    ),
) -> None:
    """Run a whole cluster on this machine: gatewayd + a local agent.

    Uses LLMGW_HOME (default ~/.llmgw; as root, /var/lib/llmgw-up, and engines run as
    llmgw-engine); initialises it on first use.
    """
    from llmgw.cli.up import run_up

    _run_or_exit(run_up, host, mirror)


def main() -> None:
    app()
