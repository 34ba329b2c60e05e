"""The ``llmgw`` command."""

from __future__ import annotations

import json as _json
import sys
from pathlib import Path

import typer

# Each ctl module adds its commands to the ctl group as it is imported (ruff flags
# only the last of these as unused: they all bind the one name `llmgw`).
import llmgw.cli.ctl.batches
import llmgw.cli.ctl.config
import llmgw.cli.ctl.keys
import llmgw.cli.ctl.mcp
import llmgw.cli.ctl.mirror
import llmgw.cli.ctl.models
import llmgw.cli.ctl.tenancy
import llmgw.cli.ctl.usage
import llmgw.cli.ctl.weights  # noqa: F401
from llmgw import __version__, pidfile
from llmgw.cli.ctl.app import app as ctl_app
from llmgw.cli.doctor_cmd import doctor
from llmgw.cli.init_cmds import node_cert, server_init
from llmgw.cli.mirror_cmds import app as mirror_app
from llmgw.cli.node_cmds import node_add, node_remove
from llmgw.cli.server_add_cmds import server_add
from llmgw.cli.service_cmds import restart, start, stop
from llmgw.errors import LlmgwError, UsageError
from llmgw.paths import resolve
from llmgw.present import output

app = typer.Typer(
    help="Run LLMs on your own GPU and CPU servers, from the terminal.\n\n"
    "Without a command, opens the console.",
    add_completion=False,
)
server_app = typer.Typer(help="The control plane (gatewayd).")
node_app = typer.Typer(help="Nodes: certificates and onboarding.", no_args_is_help=True)
app.add_typer(server_app, name="server")
app.add_typer(node_app, name="node")
app.add_typer(ctl_app, name="ctl")
app.add_typer(mirror_app, name="mirror")
server_app.command(
    "init", help="Create the cluster CA, certificates, admin token, server.yaml and its unit."
)(server_init)
server_app.command("add")(server_add)
node_app.command("cert", help="Issue a node certificate bundle signed by the cluster CA.")(
    node_cert
)
node_app.command("add")(node_add)
node_app.command("remove")(node_remove)
for _cmd in (start, stop, restart):
    app.command()(_cmd)
app.command(help="Check this machine is ready to be a node (AVX2, driver, NVML, OS, disk, glibc).")(
    doctor
)


def _run_or_exit(fn, *args) -> None:
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


@app.command()
def console(
    kind: str = typer.Argument(
        "",
        help="cluster, node or setup (default: what this machine is — a control plane's"
        " console, a node's, or setup on a machine that is neither).",
    ),
) -> None:
    """Open a console: the cluster's, this node's, or setup."""
    if kind and kind not in ("cluster", "node", "setup"):
        raise typer.Exit(
            code=output.fail(UsageError(f"no console {kind!r}: say cluster, node or setup"))
        )
    _open_console(kind or which_console(resolve()))


@app.command()
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

    paths = resolve()
    with pidfile.held(paths.server_pid_file):
        _run_or_exit(gatewayd_main, paths, config)


@app.command()
def agent(
    config: Path = typer.Option(
        None, "--config", help="agent.yaml to use (default: the machine's)."
    ),
) -> None:
    """Run this node's agent until Ctrl-C or SIGTERM."""
    from agentd.main import main as agentd_main

    paths = resolve()
    with pidfile.held(paths.agent_pid_file):
        _run_or_exit(agentd_main, paths, config)


@app.command()
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
    """Run a whole cluster on this machine, without root: gatewayd + a local agent.

    Uses LLMGW_HOME (default ~/.llmgw); initialises it on first use.
    """
    from llmgw.cli.up import run_up

    _run_or_exit(run_up, host, mirror)


def main() -> None:
    app()
