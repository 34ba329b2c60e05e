"""``llmgw server init`` and ``llmgw node cert``: the commands over llmgw.cluster_init.

Plain command functions; the app in llmgw/cli/main.py registers them.
"""

import os
import sys
from typing import Annotated, NoReturn

import typer
import yaml

from llmgw import cluster_init
from llmgw.cluster_init import InitResult, NodeBundle
from llmgw.config import AgentPki
from llmgw.errors import LlmgwError
from llmgw.paths import Paths, resolve

STORE_DSN_ENV = "LLMGW_STORE_DSN"

_ITEM_WORDS = {
    "ca": "CA certificate",
    "server_cert": "server certificate",
    "admin_token": "admin token",
    "server_yaml": "server.yaml",
    "store_dsn": "store DSN",
}


def server_init(
    host: Annotated[
        list[str] | None,
        typer.Option(
            "--host",
            help="A DNS name or IP address nodes dial to reach this server (repeat for each). "
            "Given, it replaces the server certificate's hosts; localhost, 127.0.0.1 and ::1 "
            "are always included.",
        ),
    ] = None,
    cluster_name: Annotated[str, typer.Option("--name", help="The cluster's name.")] = "llmgw",
    agent_port: Annotated[
        int | None,
        typer.Option("--agent-port", min=1, max=65535, help="Port agents dial (default 7070)."),
    ] = None,
    admin_port: Annotated[
        int | None,
        typer.Option(
            "--admin-port", min=1, max=65535, help="Admin API port on 127.0.0.1 (default 9090)."
        ),
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option("--http-port", min=1, max=65535, help="HTTP gateway port (default 8080)."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=1, max=65535, help="Metrics port (default 9091)."),
    ] = None,
    store_dsn: Annotated[
        str,
        typer.Option(
            "--store-dsn",
            envvar=STORE_DSN_ENV,
            show_envvar=True,
            help="postgresql://… for a PostgreSQL store (default: embedded SQLite). Prefer the "
            f"{STORE_DSN_ENV} environment variable: a command line is visible to every user.",
        ),
    ] = "",
    force_config: Annotated[
        bool, typer.Option("--force-config", help="Write server.yaml again from these flags.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Set this machine up as a control plane: CA, server certificate, admin token, server.yaml."""
    # Read once; child processes started later need not see a password.
    os.environ.pop(STORE_DSN_ENV, None)
    ports = {
        name: port
        for name, port in (
            ("agent", agent_port),
            ("admin", admin_port),
            ("http", http_port),
            ("metrics", metrics_port),
        )
        if port is not None
    }
    try:
        result = cluster_init.init_server(
            resolve(),
            hosts=host or [],
            cluster_name=cluster_name,
            ports=ports,
            store_dsn=store_dsn,
            force_config=force_config,
        )
    except LlmgwError as err:
        _fail(err)
    if json_output:
        typer.echo(result.model_dump_json(indent=2))
    else:
        _print_init(result)


def node_cert(
    node_id: Annotated[str, typer.Argument(help="The node's id: its certificate's common name.")],
    control_plane: Annotated[
        list[str] | None,
        typer.Option(
            "--control-plane",
            help="HOST:PORT the node dials (repeat for each control plane). Default: the "
            "server certificate's first host and the agent port.",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Issue a node's certificate, signed by the cluster CA, with the CA beside it."""
    try:
        bundle = cluster_init.issue_node_bundle(
            resolve(), node_id, control_planes=control_plane or []
        )
    except LlmgwError as err:
        _fail(err)
    if json_output:
        typer.echo(bundle.model_dump_json(indent=2))
    else:
        _print_bundle(bundle)


def _print_init(r: InitResult) -> None:
    if r.created:
        typer.echo(f'Cluster "{r.cluster_name}" in {r.config_dir}:')
    else:
        typer.echo(f'Cluster "{r.cluster_name}" in {r.config_dir} is set up; nothing changed:')
    for s in r.steps:
        line = f"  {s.action:<9} {_ITEM_WORDS[s.item]:<19} {s.path}"
        if s.reason:
            line += f"  ({s.reason})"
        typer.echo(line)
        if s.item == "ca":
            typer.echo(f"  {'':<9} {'':<19} SHA-256 {r.ca_fingerprint_sha256}")
        if s.item == "server_cert":
            typer.echo(f"  {'':<9} {'':<19} for {', '.join(r.server_hosts)}")
    for note in r.notes:
        typer.echo(f"note: {note}")
    typer.echo("Issue a node's certificate: llmgw node cert NODE_ID")
    typer.echo("Start it: llmgw server")


def _print_bundle(b: NodeBundle) -> None:
    # agent.yaml as it will read on the node, where the bundle lands in /etc/llmgw/pki.
    on_node = Paths.system()
    cfg = b.agent_config.model_copy(
        update={
            "pki": AgentPki(
                ca_cert=str(on_node.ca_cert),
                cert=str(on_node.pki_dir / "node.crt"),
                key=str(on_node.pki_dir / "node.key"),
            )
        }
    )
    typer.echo(f"Issued a certificate for node {b.node_id}, valid until {b.not_after:%Y-%m-%d}:")
    typer.echo(f"  {b.cert}")
    typer.echo(f"  {b.key}  (secret: copy it over SSH and keep it 0600)")
    typer.echo(f"  {b.ca_cert}")
    typer.echo(f"agent.yaml for {on_node.agent_yaml} on the node:")
    text = yaml.safe_dump(cfg.model_dump(mode="json", exclude_defaults=True), sort_keys=False)
    for line in text.splitlines():
        typer.echo(f"  {line}")
    for note in b.notes:
        typer.echo(f"note: {note}")
    typer.echo(
        f"Copy the three files to {on_node.pki_dir}/ on {b.node_id} and the agent.yaml above "
        f"to {on_node.agent_yaml}, then start it there: llmgw agent"
    )


def _fail(err: LlmgwError) -> NoReturn:
    print(f"error: {err.message}", file=sys.stderr)
    if err.hint:
        print(f"hint: {err.hint}", file=sys.stderr)
    raise typer.Exit(code=int(err.exit_code))
