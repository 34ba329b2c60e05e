"""How a setup plan reads to people: its parts' titles, what each is for, what to do next.

The setup screens and ``llmgw server init`` say a plan in these words; pure,
like ``llmgw.setup.plan`` whose models they describe.
"""

from __future__ import annotations

import shlex

from llmgw.modelplan import memory
from llmgw.present.keyfmt import money_text
from llmgw.setup import starter
from llmgw.setup.mirror_init import bytes_text
from llmgw.setup.plan import (
    PART_IDS,
    LimitsPart,
    SetupPlan,
    dsn_place,
    starter_need_bytes,
)
from llmgw.setup.plan_gateway import describe_gateway

PART_TITLES = {
    "control_plane": "Control plane",
    "store": "Store",
    "node": "This machine as a node",
    "starter": "Starter model",
    "limits": "Limits",
    "admin": "Admin access",
    "mirror": "Model mirror",
    "gateway": "Gateway TLS and proxies",
}

# What each part is for, and what is missing without it.
PART_HELP = {
    "control_plane": "gatewayd: the API endpoint (OpenAI and Anthropic compatible), the admin "
    "API the console uses, and the port nodes dial with mutual TLS. Without it this machine "
    "has nothing of its own to serve.",
    "store": "Where the control plane keeps nodes, models, keys and usage. SQLite needs "
    "nothing else; PostgreSQL is for several control planes and is checked by connecting.",
    "node": "An agent beside the control plane, so models run on this machine's GPUs or CPU. "
    "Without it, models wait for nodes added later (llmgw node cert, llmgw agent).",
    "starter": "A small real model served at once, so the endpoint answers from the start. "
    "Without it the cluster serves nothing until a model is added.",
    "limits": "A project made at the first start, with its requests and tokens a minute and "
    "a monthly budget, so a key can be made at once. Without it, make a project first.",
    "admin": "Who may read the admin token and so run the console and llmgw ctl: its owner, "
    "and a group if you name one.",
    "mirror": "A model mirror here: pinned, checked weights and engine builds the nodes fetch, "
    "and llmgw's own wheels, so nodes need no internet. Without it nodes fetch from the "
    "internet (or from a mirror named in server.yaml later).",
    "gateway": "HTTPS on the API port itself (a certificate from the cluster CA, or yours), "
    "and the proxies in front of it (HAProxy) whose word on the client is believed, so each "
    "client is bounded and counted by its own address. Without it the port is plain HTTP.",
}


def describe_part(plan: SetupPlan, part_id: str) -> str:
    """One line: what the part does as set, or what is missing without it."""
    p = plan.part(part_id)
    if part_id == "control_plane":
        cp = plan.control_plane
        if not cp.on:
            return "none here: this setup would have nothing to install"
        ports = cp.ports()
        hosts = ", ".join(cp.hosts) or "this machine"
        standbys = f" · standing by: {', '.join(cp.standbys)}" if cp.standbys else ""
        return (
            f"cluster {cp.cluster_name} · API :{ports['http']} · nodes dial "
            f"{hosts}:{ports['agent']} · admin :{ports['admin']}{standbys}"
        )
    if part_id == "store":
        if plan.store.kind == "postgres":
            return f"PostgreSQL at {dsn_place(plan.store.dsn) or '(no address yet)'}"
        return "SQLite on this machine (embedded, nothing to run)"
    if part_id == "node":
        if not p.on:
            return "models run only on nodes added later (llmgw node cert)"
        return f"node {plan.node.node_id}: an agent here runs models on this machine"
    if part_id == "starter":
        if not p.on:
            return "no model until one is added (llmgw ctl models add)"
        where = "here" if plan.node.on else "on the first node that joins"
        return f"{starter.NAME} ({memory.gb(starter_need_bytes())}), served {where} at once"
    if part_id == "limits":
        if not p.on:
            return "no project is made: make one before the first key"
        return f"project {plan.limits.project}: {_limits_words(plan.limits)}"
    if part_id == "admin":
        if not p.on or not plan.admin.group:
            return "only the user that installs it reads the admin token"
        return f"group {plan.admin.group} may read the admin token (and run the console)"
    if part_id == "mirror":
        if not p.on:
            return "nodes fetch weights and engines from the internet"
        quota = (
            f"quota {bytes_text(plan.mirror.max_bytes)}" if plan.mirror.max_bytes else "no quota"
        )
        served = "plain HTTP behind a TLS proxy" if plan.mirror.plain_http else "HTTPS"
        return f"a mirror on {plan.mirror.listen} ({quota}), {served}, used by every node"
    if part_id == "gateway":
        return describe_gateway(plan.gateway)
    raise KeyError(part_id)


def in_and_out(plan: SetupPlan) -> tuple[list[str], list[str]]:
    """The parts that are in and those left out, each as "Title: what it means"."""
    ins, outs = [], []
    for part_id in PART_IDS:
        line = f"{PART_TITLES[part_id]}: {describe_part(plan, part_id)}"
        on = plan.part(part_id).on and (part_id != "admin" or bool(plan.admin.group))
        (ins if on or part_id == "store" else outs).append(line)
    return ins, outs


def _limits_words(lim: LimitsPart) -> str:
    words = []
    if lim.rpm is not None:
        words.append(f"{lim.rpm} requests/min")
    if lim.tpm is not None:
        words.append(f"{lim.tpm} tokens/min")
    if lim.budget_month_micros is not None:
        words.append(f"budget {money_text(lim.budget_month_micros)} a month")
    return ", ".join(words) or "no limits"


def what_next(
    plan: SetupPlan, *, started: bool, home: str = "", up_pid: int | None = None
) -> list[str]:
    """What to do once a run ended well, each line a command or a fact."""
    env = f"LLMGW_HOME={shlex.quote(home)} " if home else ""
    lines = []
    if started and up_pid is not None:
        lines.append(f"The cluster runs in the background (llmgw up, pid {up_pid}): kill {up_pid}")
    if not started:
        if home:
            lines.append(f"Start the cluster: {env}llmgw up")
        else:
            lines.append("Start the control plane: sudo llmgw server")
            if plan.node.on:
                lines.append("and this machine's agent: sudo llmgw agent")
    if plan.limits.on:
        lines.append(f"An API key: {env}llmgw ctl keys create --project {plan.limits.project}")
    if plan.serves_starter_here:
        lines.append(f"The starter model's replica: {env}llmgw ctl replicas")
    lines.append(f"The cluster console: {env}llmgw")
    return lines
