"""What ``llmgw server init`` prints of what it did: files, setup, mirror, gateway port, units."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
import yaml

from llmgw.config import AgentPki, SetupConfig
from llmgw.paths import Paths
from llmgw.present.keyfmt import money_text
from llmgw.setup.cluster_init import InitResult, NodeBundle
from llmgw.setup.mirror_init import MIRROR_UNIT_NAME, MirrorInit
from llmgw.setup.server_unit import ServerUnitStep

if TYPE_CHECKING:
    from llmgw.cli.init_cmds import LocalNode
    from llmgw.setup.http_init import HttpStep

ITEM_WORDS = {
    "ca": "CA certificate",
    "server_cert": "server certificate",
    "admin_token": "admin token",
    "server_yaml": "server.yaml",
    "store_dsn": "store DSN",
}


def print_init(r: InitResult) -> None:
    if r.created:
        typer.echo(f'Cluster "{r.cluster_name}" in {r.config_dir}:')
    else:
        typer.echo(f'Cluster "{r.cluster_name}" in {r.config_dir} is set up; nothing changed:')
    for s in r.steps:
        line = f"  {s.action:<9} {ITEM_WORDS[s.item]:<19} {s.path}"
        if s.reason:
            line += f"  ({s.reason})"
        typer.echo(line)
        if s.item == "ca":
            typer.echo(f"  {'':<9} {'':<19} SHA-256 {r.ca_fingerprint_sha256}")
        if s.item == "server_cert":
            typer.echo(f"  {'':<9} {'':<19} for {', '.join(r.server_hosts)}")
    for note in r.notes:
        typer.echo(f"note: {note}")


def print_setup(paths: Paths, setup: SetupConfig, agent: LocalNode | None) -> None:
    if agent is not None:
        typer.echo(f"  {agent.action:<9} {'agent.yaml':<19} {agent.agent_yaml}")
        typer.echo(f"  {'':<9} {'':<19} node {agent.node_id}, dials {agent.control_plane}")
    if setup.admin_group:
        typer.echo(f"  {'':<9} {'admin token':<19} readable by group {setup.admin_group}")
    typer.echo(f"  {setup_words(setup)}")
    if agent is None:
        typer.echo("Issue a node's certificate: llmgw node cert NODE_ID")


_MIRROR_WORDS = {
    "mirror_yaml": "mirror.yaml",
    "read_token": "mirror read token",
    "admin_token": "mirror admin token",
    "tls_cert": "mirror certificate",
    "mirror_urls": "mirror.urls",
    "unit": "mirror service",
}


def print_mirror(paths: Paths, m: MirrorInit) -> None:
    for s in m.steps:
        line = f"  {s.action:<9} {_MIRROR_WORDS[s.item]:<19} {s.path}"
        if s.reason:
            line += f"  ({s.reason})"
        typer.echo(line)
    typer.echo(f"  {'':<9} {'':<19} the cluster reaches the mirror at {m.url}")
    if paths.home is None:
        typer.echo(
            "Start the mirror: systemctl daemon-reload && systemctl enable --now "
            f"{MIRROR_UNIT_NAME}  (or: llmgw mirror serve)"
        )
    else:
        typer.echo(f"Start the mirror: llmgw mirror serve  (or systemctl link {m.unit_file})")


_HTTP_WORDS = {"http_cert": "gateway certificate", "http_yaml": "server.yaml http:"}


def print_http(steps: list[HttpStep]) -> None:
    for s in steps:
        line = f"  {s.action:<9} {_HTTP_WORDS[s.item]:<19} {s.path}"
        if s.reason:
            line += f"  ({s.reason})"
        typer.echo(line)


def print_server_unit(u: ServerUnitStep) -> None:
    what = "control plane" if u.item == "server_unit" else "agent"
    line = f"  {u.action:<9} {what + ' unit':<19} {u.path}"
    typer.echo(line)
    if u.enabled:
        typer.echo(f"  {'':<9} {'':<19} enabled: the {what} starts at boot")
    else:
        why = f"{u.reason}; " if u.reason else ""
        typer.echo(f"  {'':<9} {'':<19} not enabled ({why}to start it at boot: {u.to_run})")


def print_bundle(b: NodeBundle) -> None:
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


# --- the setup flags: this machine as a node, the starter, the project, admin access ---


def setup_words(setup: SetupConfig) -> str:
    """The recorded setup, as the line ``server init`` prints under its files."""
    project = setup.project or "none"
    limits = [
        f"{name} {value}"
        for name, value in (("rpm", setup.rpm), ("tpm", setup.tpm))
        if value is not None
    ]
    if setup.budget_month_micros is not None:
        limits.append(f"budget {money_text(setup.budget_month_micros)} a month")
    if limits:
        project += f" ({', '.join(limits)})"
    return (
        f"{'recorded':<9} {'setup':<19} agent here: {'yes' if setup.node else 'no'}; "
        f"starter model: {'yes' if setup.starter else 'no'}; first project: {project}"
    )
