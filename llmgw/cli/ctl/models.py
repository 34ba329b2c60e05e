"""``llmgw ctl`` commands for models, replicas, placement and engines."""

from __future__ import annotations

from pathlib import Path

import typer
import yaml
from pydantic import ValidationError

import llmgw.cli.ctl.render.models  # noqa: F401  (registers the renderers)
from llmgw.catalog import Model
from llmgw.cli.ctl.call import JsonOpt, call
from llmgw.errors import UsageError
from llmgw.labels import parse_assignments
from llmgw.present import output
from llmgw.present.modelfmt import serve_spec, to_spec, validation_text
from llmgw.present.resourcesfmt import model_resources
from proto.llmgw.v1 import ModelSpec, PlanModelRequest

model_app = typer.Typer(
    help="Models in the catalog: add, serve, scale, remove, plan.", no_args_is_help=True
)


def _spec(model: Model) -> ModelSpec:
    return to_spec(model)


def _usage(e: Exception) -> None:
    raise typer.Exit(code=output.fail(UsageError(validation_text(e))))


def models(json: bool = JsonOpt) -> None:
    """Every model in the catalog, with its replicas and why it is in its state."""
    call(lambda c: c.list_models(), json=json)


@model_app.command("show")
def model_show(name: str = typer.Argument(..., help="The model's name."), json: bool = JsonOpt):
    """One model's spec and state."""
    call(lambda c: c.get_model(name), json=json)


@model_app.command("add")
def model_add(
    file: Path = typer.Argument(None, help="A YAML file with the model's spec."),
    name: str = typer.Option("", "--name", help="The model's name (without a file)."),
    source: str = typer.Option("", "--source", help="Where the weights are (without a file)."),
    json: bool = JsonOpt,
) -> None:
    """Add a model to the catalog, or replace the one of that name."""
    try:
        if file is not None:
            data = yaml.safe_load(file.read_text())
            if not isinstance(data, dict):
                raise ValueError(f"{file}: expected a mapping with name, source, profiles …")
            model = Model.model_validate(data)
        elif name and source:
            model = Model(name=name, source=source)
        else:
            raise ValueError("give a YAML FILE, or both --name and --source")
    except (ValidationError, ValueError, OSError, yaml.YAMLError) as e:
        _usage(e)
    call(
        lambda c: c.put_model(_spec(model)),
        json=json,
        next_step=f"Watch it start: llmgw ctl replicas --model {model.name}",
    )


@model_app.command("serve")
def model_serve(
    source: str = typer.Argument(
        ..., help="A path, file://, https://, hf:org/repo[@rev] or hf:org/repo[@rev]:file"
    ),
    name: str = typer.Option("", "--name", help="The model's name (default: from the file name)."),
    engine: str = typer.Option("llama.cpp", "--engine", help="llama.cpp, vllm, sglang or sim."),
    replicas: int = typer.Option(1, "--replicas", min=0, max=1000),
    context: int = typer.Option(0, "--context", min=0, help="Context length in tokens."),
    gpus: int = typer.Option(0, "--gpus", min=0, max=64, help="GPUs per replica (0: planned)."),
    cpu: bool = typer.Option(False, "--cpu", help="Run on CPU only."),
    sha256: str = typer.Option("", "--sha256", help="Pin the weights' sha256."),
    label: list[str] = typer.Option(
        [],
        "--label",
        help="Place only on nodes with this label, KEY=VALUE (repeatable): zone=a;"
        " llmgw.role=judge for nodes kept for that role.",
        show_default=False,
    ),
    priority_class: str = typer.Option(
        "", "--class", help="Its priority class (high, normal, low, or the cluster's own)."
    ),
    cores: int = typer.Option(
        0,
        "--cores",
        min=0,
        max=1024,
        help="CPU cores each CPU replica reserves on its node, given to the engine as threads"
        " (0: none reserved).",
    ),
    fallback: list[str] = typer.Option(
        [],
        "--fallback",
        help="A model that answers in its place when it has no room or the budget is spent"
        " (repeatable, tried in order).",
        show_default=False,
    ),
    json: bool = JsonOpt,
) -> None:
    """Add a model and serve it now (refused if a model of that name exists)."""
    try:
        labels = parse_assignments(label, flag="--label")
        spec = serve_spec(
            source,
            name=name,
            engine=engine,
            replicas=replicas,
            context=context,
            gpus=gpus,
            cpu=cpu,
            sha256=sha256,
            priority_class=priority_class,
            fallbacks=fallback,
            cores=cores,
        )
        spec.labels = labels
    except UsageError as e:
        raise typer.Exit(code=output.fail(e)) from None
    call(
        lambda c: c.put_model(spec, create_only=True),
        json=json,
        next_step=f"Watch it start: llmgw ctl replicas --model {spec.name}",
    )


@model_app.command("scale")
def model_scale(
    name: str = typer.Argument(...),
    replicas: int | None = typer.Argument(
        None, min=0, help="Run exactly this many (min and max both)."
    ),
    low: int | None = typer.Option(
        None, "--min", min=0, help="Never fewer; 0 starts the model on its first request."
    ),
    high: int | None = typer.Option(
        None, "--max", min=0, help="Never more; replicas are added up to it when load stays high."
    ),
    json: bool = JsonOpt,
) -> None:
    """Run N replicas of a model, or between --min and --max as its load asks."""
    if replicas is not None and (low is not None or high is not None):
        raise typer.Exit(code=output.fail(UsageError("give a count, or --min and --max, not both")))
    if replicas is None and low is None and high is None:
        raise typer.Exit(
            code=output.fail(UsageError("say how many replicas (N), or --min and --max"))
        )
    call(lambda c: c.scale_model(name, replicas or 0, low=low, high=high), json=json)


@model_app.command("rm")
def model_rm(name: str = typer.Argument(...), json: bool = JsonOpt) -> None:
    """Remove a model; its replicas are stopped."""
    call(lambda c: c.remove_model(name), json=json)


@model_app.command("context")
def model_context(
    name: str = typer.Argument(...),
    tokens: int = typer.Argument(..., min=0, help="The new context length."),
    slots: int = typer.Option(0, "--slots", min=0, help="Parallel sequences sharing it."),
    json: bool = JsonOpt,
) -> None:
    """Change a model's context; replicas restart one at a time to take it."""
    call(lambda c: c.set_model_context(name, tokens, slots), json=json)


@model_app.command("resources")
def model_resources_cmd(
    name: str = typer.Argument(...),
    cores: int | None = typer.Option(
        None,
        "--cores",
        min=0,
        max=1024,
        help="Reserve this many CPU cores per CPU replica (0: none); replicas restart one at a"
        " time to take it.",
    ),
    profile: str = typer.Option(
        "", "--profile", help="The profile to change (default: the first)."
    ),
    json: bool = JsonOpt,
) -> None:
    """What a model's replicas hold on their nodes (cores, host memory, cards), and the
    cores free on each node; --cores changes what its CPU replicas reserve."""

    async def go(c):
        if cores is not None:
            await c.set_model_resources(name, cores=cores, profile=profile)
        return model_resources(
            await c.get_model(name), await c.list_replicas(name), await c.list_nodes()
        )

    after = f"Replicas restart one at a time to take it: llmgw ctl replicas --model {name}"
    call(go, json=json, next_step=after if cores is not None else "")


@model_app.command("plan")
def model_plan(
    source: str = typer.Argument(..., help="A catalog model's name or a source to plan."),
    context: int = typer.Option(0, "--context", min=0),
    slots: int = typer.Option(0, "--slots", min=0),
    engine: str = typer.Option("", "--engine"),
    precision: str = typer.Option(
        "",
        "--precision",
        help="bf16 or fp8: plan the weights as vLLM or SGLang load them at it.",
    ),
    json: bool = JsonOpt,
) -> None:
    """What the model needs: every layout that fits, per-card memory and speed."""
    if precision not in ("", "bf16", "fp8"):
        raise typer.Exit(code=output.fail(UsageError(f"--precision {precision!r}: bf16 or fp8")))
    is_source = source.startswith(("/", "file://", "https://", "hf:"))
    request = PlanModelRequest(
        name="" if is_source else source,
        source=source if is_source else "",
        engine=engine,
        context_length=context,
        slots=slots,
        precision=precision,
    )
    call(lambda c: c.plan_model(request), json=json)


def explain_placement(model: str = typer.Argument(...), json: bool = JsonOpt) -> None:
    """Where one more replica of MODEL would go, and every node's reason."""
    call(lambda c: c.explain_placement(model), json=json)


def replicas(
    model: str = typer.Option("", "--model", help="Only this model's."), json: bool = JsonOpt
) -> None:
    """Replicas with their state, reason, deadline and history."""
    call(lambda c: c.list_replicas(model), json=json)


def logs(
    replica_id: str = typer.Argument(..., help="The replica (see llmgw ctl replicas)."),
    lines: int = typer.Option(100, "--lines", "-n", min=1, max=500),
    json: bool = JsonOpt,
) -> None:
    """The last lines its engine wrote, fetched from its node."""
    call(lambda c: c.replica_logs(replica_id, lines), json=json)


def drain(node_id: str = typer.Argument(...), json: bool = JsonOpt) -> None:
    """Move a node's replicas elsewhere, then stop them there."""
    call(
        lambda c: c.drain_node(node_id),
        json=json,
        renderers="llmgw.cli.ctl.render.cluster",  # the node, as `ctl node show` draws it
        next_step=f"Follow it: llmgw ctl replicas · undo: llmgw ctl uncordon {node_id}",
    )


engines_app = typer.Typer(
    help="The recipes in force (and where each came from), then engines on every node:\n"
    "installed, installing, failed (in the node's words)."
)


@engines_app.callback(invoke_without_command=True)
def engines(ctx: typer.Context, json: bool = JsonOpt) -> None:
    """The recipes in force (and where each came from), then engines on every node:
    installed, installing, failed (in the node's words)."""
    if ctx.invoked_subcommand is not None:
        return
    call(lambda c: c.list_engines(), json=json)


@engines_app.command("rotate-key")
def rotate_key(json: bool = JsonOpt) -> None:
    """Give every replica a new engine key; the old one is refused seconds later.

    Every control plane moves to the new key first; answers under way go on."""
    call(
        lambda c: c.rotate_engine_keys(),
        json=json,
        next_step="Check it: llmgw ctl replicas",
    )
