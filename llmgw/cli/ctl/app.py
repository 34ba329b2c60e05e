"""``llmgw ctl``: scriptable operations against a running control plane.

Each command calls one AdminClient method and hands its reply to
``output.emit``: a table for people, the reply itself with ``--json``.

The group names every command and the module it lives in; a module is
imported when one of its commands is called (llmgw/cli/lazy.py), so that
``llmgw ctl status`` does not import the MCP, mirror or usage presenters.
"""

from __future__ import annotations

import typer

from llmgw.cli.lazy import Lazy, lazy_group

# Every command of `llmgw ctl`, in the order its --help lists them.
COMMANDS = {
    "status": Lazy(
        "llmgw.cli.ctl.cluster:status",
        "The control plane: version, role, store, node counts.",
    ),
    "nodes": Lazy(
        "llmgw.cli.ctl.cluster:nodes",
        "Every node with its state and the reason for it.",
    ),
    "cordon": Lazy(
        "llmgw.cli.ctl.cluster:cordon",
        "Place nothing new on a node (what runs there stays).",
    ),
    "uncordon": Lazy(
        "llmgw.cli.ctl.cluster:uncordon",
        "Let placement use a cordoned node again.",
    ),
    "warnings": Lazy(
        "llmgw.cli.ctl.cluster:warnings",
        "What is wrong now (nodes, engines, replicas) and what went wrong since then.",
    ),
    "models": Lazy(
        "llmgw.cli.ctl.models:models",
        "Every model in the catalog, with its replicas and why it is in its state.",
    ),
    "explain-placement": Lazy(
        "llmgw.cli.ctl.models:explain_placement",
        "Where one more replica of MODEL would go, and every node's reason.",
    ),
    "replicas": Lazy(
        "llmgw.cli.ctl.models:replicas",
        "Replicas with their state, reason, deadline and history.",
    ),
    "logs": Lazy(
        "llmgw.cli.ctl.models:logs",
        "The last lines its engine wrote, fetched from its node.",
    ),
    "drain": Lazy(
        "llmgw.cli.ctl.models:drain",
        "Move a node's replicas elsewhere, then stop them there.",
    ),
    "engines": Lazy(
        "llmgw.cli.ctl.models:engines_app",
        "The recipes in force (and where each came from), then engines on every node:\n"
        "installed, installing, failed (in the node's words).",
    ),
    "node": Lazy(
        "llmgw.cli.ctl.cluster:node_app",
        "One node.",
    ),
    "replica": Lazy(
        "llmgw.cli.ctl.cluster:replica_app",
        "One replica.",
    ),
    "bench": Lazy(
        "llmgw.cli.ctl.bench:bench_app",
        "Benchmarks of the gateway on this machine.",
    ),
    "batches": Lazy(
        "llmgw.cli.ctl.batches:batches_app",
        "Batches of the Batch API: list them with their progress, show one, cancel one.",
    ),
    "config": Lazy(
        "llmgw.cli.ctl.config:config_app",
        "The cluster's kept settings: get, set, edit, history, diff, rollback.",
    ),
    "keys": Lazy(
        "llmgw.cli.ctl.keys:keys_app",
        "API keys: create (shown once), list, revoke, rotate, limits.",
    ),
    "usage": Lazy(
        "llmgw.cli.ctl.usage:usage_app",
        "Requests, errors, tokens, cost, average latency and TTFT over the last 24 hours,\n"
        "or over --from/--to (UTC). `export` writes every request as CSV.",
    ),
    "mcp": Lazy(
        "llmgw.cli.ctl.mcp:mcp_app",
        "MCP servers agents reach at /mcp with their own key: add, test, grant, usage.",
    ),
    "mirror": Lazy(
        "llmgw.cli.ctl.mirror:mirror_app",
        "The model mirrors: what they hold, add, remove, disk use, peers.",
    ),
    "model": Lazy(
        "llmgw.cli.ctl.models:model_app",
        "Models in the catalog: add, serve, scale, remove, plan.",
    ),
    "org": Lazy(
        "llmgw.cli.ctl.tenancy:org_app",
        "Organizations: create, list, rename, rm (named ORG).",
    ),
    "team": Lazy(
        "llmgw.cli.ctl.tenancy:team_app",
        "Teams: create, list, rename, rm (named ORG/TEAM).",
    ),
    "project": Lazy(
        "llmgw.cli.ctl.tenancy:project_app",
        "Projects: create, list, rename, rm (named ORG/TEAM/PROJECT).",
    ),
    "weights": Lazy(
        "llmgw.cli.ctl.weights:weights_app",
        "The model weights each node keeps on its disk: size, last use, which replicas use them.",
    ),
}

app = typer.Typer(
    cls=lazy_group(COMMANDS),
    help="Operate a running control plane (what the console does, scriptable).",
    no_args_is_help=True,
)
