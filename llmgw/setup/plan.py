"""A setup plan: the parts of an installation, and the ``llmgw server init`` command that makes it.

The setup screens edit a ``SetupPlan``, part by part. ``to_command`` gives the
same install as one command line, every setting a flag; ``check`` says, before
anything is installed, what would make the install fail on this machine and
which flags avoid it; ``steps`` lists what a run does, in order. Pure: the
facts of the machine come in as a ``Machine`` (``llmgw.setup.run`` reads them).
"""

from __future__ import annotations

import re
import shlex
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llmgw.config import (
    DEFAULT_ADMIN_PORT,
    DEFAULT_AGENT_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    DEFAULT_PROJECT,
    SetupConfig,
    check_name,
    split_host_port,
)
from llmgw.mirror.config import DEFAULT_MIRROR_PORT
from llmgw.modelplan import memory
from llmgw.modelplan.types import ModelFacts
from llmgw.present.keyfmt import money_text
from llmgw.setup import starter
from llmgw.setup.plan_gateway import GatewayPart, gateway_flags
from llmgw.tls import pki

STORE_DSN_ENV = "LLMGW_STORE_DSN"
PART_IDS = (
    "control_plane",
    "store",
    "node",
    "starter",
    "limits",
    "admin",
    "mirror",
    "gateway",
)
PORT_NAMES = ("agent", "admin", "http", "metrics")

# What gatewayd, agentd and `llmgw up` hold beside the engines: 0.23 GB was
# measured on an idle cluster with a SQLite store; twice that leaves room for
# a busy one.
CONTROL_PLANE_BYTES = 512 << 20

# The starter's GGUF as read by llmgw.modelplan.gguf_meta (a test reads the
# real file and compares), so the check needs neither the file nor the package.
STARTER_FACTS = ModelFacts(
    format="gguf",
    architecture="gemma3",
    layers=18,
    attention_heads=4,
    kv_heads=1,
    head_dim=256,
    embedding_length=640,
    trained_context=32768,
    quantisation="Q4_K_M",
    weights_bytes=253_113_024,
    parameters=268_098_176,
    active_weights_bytes=253_113_024,
    vocab_size=262_144,
)


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    on: bool = True


class ControlPlanePart(_Part):
    """gatewayd on this machine: the cluster's name, the names nodes dial, its ports."""

    cluster_name: str = "llmgw"
    # Names or addresses nodes dial; empty: this machine's name (as server init does).
    hosts: tuple[str, ...] = ()
    agent_port: int = Field(default=DEFAULT_AGENT_PORT, ge=1, le=65535)
    admin_port: int = Field(default=DEFAULT_ADMIN_PORT, ge=1, le=65535)
    http_port: int = Field(default=DEFAULT_HTTP_PORT, ge=1, le=65535)
    metrics_port: int = Field(default=DEFAULT_METRICS_PORT, ge=1, le=65535)
    # Other machines made control planes too, standing by (server add's steps, over SSH);
    # they share the PostgreSQL store.
    standbys: tuple[str, ...] = ()

    @field_validator("cluster_name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v, what="cluster name")

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(pki.normalise_host(h) for h in v)

    @field_validator("standbys")
    @classmethod
    def _standbys(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        named = tuple(h.strip() for h in v if h.strip())
        if len(set(named)) != len(named):
            raise ValueError("a machine is named twice among the standbys")
        return named

    def ports(self) -> dict[str, int]:
        return {name: getattr(self, f"{name}_port") for name in PORT_NAMES}


class StorePart(_Part):
    """Where the control plane keeps its state: SQLite on this machine, or PostgreSQL."""

    kind: Literal["sqlite", "postgres"] = "sqlite"
    dsn: str = ""

    @field_validator("dsn")
    @classmethod
    def _dsn(cls, v: str) -> str:
        v = v.strip()
        if v and not v.startswith(("postgresql://", "postgres://")):
            raise ValueError("a PostgreSQL address starts with postgresql://")
        return v


class NodePart(_Part):
    """This machine as a node: an agent beside the control plane runs models here."""

    node_id: str = "local"

    @field_validator("node_id")
    @classmethod
    def _node_id(cls, v: str) -> str:
        return check_name(v, what="node id")


class StarterPart(_Part):
    """The starter model, served once the cluster has a node."""


class LimitsPart(_Part):
    """A project made at the first start, so a key can be made at once, and its limits."""

    project: str = DEFAULT_PROJECT
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    budget_month_micros: int | None = Field(default=None, ge=0)

    @field_validator("project")
    @classmethod
    def _project(cls, v: str) -> str:
        if not v:
            raise ValueError("a project path is needed: ORG/TEAM/PROJECT")
        SetupConfig(project=v)
        return v


class AdminPart(_Part):
    """Who may read the admin token (and so run the console) besides its owner: a group."""

    on: bool = False
    group: str = ""

    @field_validator("group")
    @classmethod
    def _group(cls, v: str) -> str:
        v = v.strip()
        if v and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?", v):
            raise ValueError(f"{v!r} is not a group name")
        return v


class MirrorPart(_Part):
    """A model mirror on this machine: weights and engine builds for the cluster's nodes."""

    on: bool = False
    listen: str = f"0.0.0.0:{DEFAULT_MIRROR_PORT}"
    # A quota in bytes; 0: the disk is the limit.
    max_bytes: int = Field(default=0, ge=0)
    # Plain HTTP instead of HTTPS with a certificate from the cluster CA: behind a TLS proxy.
    plain_http: bool = False

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        v = v.strip()
        try:
            split_host_port(v)
        except ValueError:
            raise ValueError(
                f"the mirror's address {v!r} is not HOST:PORT (0.0.0.0:7080)"
            ) from None
        return v

    @property
    def port(self) -> int:
        return split_host_port(self.listen)[1]


class SetupPlan(BaseModel):
    """The parts of one installation, each in or out, with its settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    control_plane: ControlPlanePart = ControlPlanePart()
    store: StorePart = StorePart()
    node: NodePart = NodePart()
    starter: StarterPart = StarterPart()
    limits: LimitsPart = LimitsPart()
    admin: AdminPart = AdminPart()
    mirror: MirrorPart = MirrorPart()
    gateway: GatewayPart = GatewayPart()

    def part(self, part_id: str) -> _Part:
        return getattr(self, part_id)

    def with_part(self, part_id: str, part: _Part) -> SetupPlan:
        return self.model_copy(update={part_id: part})

    def toggled(self, part_id: str) -> SetupPlan:
        """The plan with one part turned on or off, its settings kept."""
        p = self.part(part_id)
        return self.with_part(part_id, p.model_copy(update={"on": not p.on}))

    @property
    def serves_starter_here(self) -> bool:
        return self.node.on and self.starter.on


class Machine(BaseModel):
    """The facts of this machine a plan is checked against."""

    hostname: str = "localhost"
    memory_total_bytes: int = 0
    memory_available_bytes: int = 0
    starter_installed: bool = False
    # A gatewayd already answers here: this is a rerun, its models already run.
    gateway_running: bool = False
    # server.yaml exists: server init keeps it, so port and setup flags are not applied.
    configured: bool = False
    ports_in_use: tuple[int, ...] = ()
    groups: tuple[str, ...] = ()


class StoreCheck(BaseModel):
    """The answer of connecting to a PostgreSQL store: ok, or why not in plain words."""

    ok: bool
    message: str


class Refusal(BaseModel):
    """Why a plan cannot be installed here, and the flags that leave the cause out."""

    part: str
    message: str
    flags: list[str] = []

    def text(self) -> str:
        if not self.flags:
            return self.message
        return f"{self.message} — leave it out with {' or '.join(self.flags)}"


class Step(BaseModel):
    """One step a run of the plan performs."""

    key: str
    title: str


def plan_ports(plan: SetupPlan) -> tuple[int, ...]:
    """The ports a run of the plan listens on: the control plane's, and the mirror's."""
    ports = tuple(plan.control_plane.ports().values())
    return ports + ((plan.mirror.port,) if plan.mirror.on else ())


def default_node_id(hostname: str) -> str:
    """This machine's name as a node id: one path element, at most 63 characters."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", hostname).lstrip(".-_") or "local"
    return name[:63]


def default_plan(machine: Machine, ports: dict[str, int] | None = None) -> SetupPlan:
    """The install ``llmgw up`` would make here: every part in but a group's admin access,
    and the starter only where it is installed."""
    cp = ControlPlanePart(**{f"{n}_port": p for n, p in (ports or {}).items()})
    return SetupPlan(
        control_plane=cp,
        node=NodePart(node_id=default_node_id(machine.hostname)),
        starter=StarterPart(on=machine.starter_installed),
    )


def validation_text(err: ValidationError) -> str:
    """A part's settings refused, in the words of its checks."""
    return "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())


# -- the command ----------------------------------------------------------------


def dsn_password(dsn: str) -> str:
    try:
        return urlsplit(dsn).password or ""
    except ValueError:
        return ""


def masked_dsn(dsn: str) -> str:
    """The DSN with its password as ****, to be shown."""
    if not dsn_password(dsn):
        return dsn
    parts = urlsplit(dsn)
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:****@{host}"))


def to_command(plan: SetupPlan) -> list[str]:
    """The plan as one ``llmgw server init`` command line, every setting a flag.

    A PostgreSQL DSN with a password is not on it: a command line is visible to
    every user of the machine. It goes in ``LLMGW_STORE_DSN`` (``command_env``).
    """
    cp = plan.control_plane
    argv = ["llmgw", "server", "init", "--name", cp.cluster_name]
    for host in cp.hosts:
        argv += ["--host", host]
    for name, port in cp.ports().items():
        argv += [f"--{name}-port", str(port)]
    if plan.store.on and plan.store.kind == "postgres" and not dsn_password(plan.store.dsn):
        argv += ["--store-dsn", plan.store.dsn]
    argv += ["--node", "--node-id", plan.node.node_id] if plan.node.on else ["--no-node"]
    argv.append("--starter" if plan.starter.on else "--no-starter")
    for host in cp.standbys:
        argv += ["--standbys", host]
    if plan.limits.on:
        lim = plan.limits
        argv += ["--project", lim.project]
        if lim.rpm is not None:
            argv += ["--rpm", str(lim.rpm)]
        if lim.tpm is not None:
            argv += ["--tpm", str(lim.tpm)]
        if lim.budget_month_micros is not None:
            argv += ["--budget-month", money_text(lim.budget_month_micros)]
    else:
        argv.append("--no-project")
    if plan.admin.on and plan.admin.group:
        argv += ["--admin-group", plan.admin.group]
    if plan.mirror.on:
        argv += ["--mirror", "--mirror-listen", plan.mirror.listen]
        if plan.mirror.max_bytes:
            argv += ["--mirror-max-bytes", str(plan.mirror.max_bytes)]
        if plan.mirror.plain_http:
            argv.append("--mirror-plain-http")
    argv += gateway_flags(plan.gateway)
    return argv


def command_env(plan: SetupPlan) -> dict[str, str]:
    """What the command needs in its environment: a DSN that carries a password."""
    if plan.store.on and plan.store.kind == "postgres" and dsn_password(plan.store.dsn):
        return {STORE_DSN_ENV: plan.store.dsn}
    return {}


def shell_text(plan: SetupPlan, *, home: str = "") -> str:
    """The command as a person copies it: environment first, the password shown as ****."""
    env = {"LLMGW_HOME": home} if home else {}
    env.update({k: masked_dsn(v) for k, v in command_env(plan).items()})
    words = [f"{k}={shlex.quote(v)}" for k, v in env.items()]
    return " ".join(words + [shlex.quote(w) for w in to_command(plan)])


def dsn_place(dsn: str) -> str:
    """host:port/database of a DSN, never its user or password."""
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return ""
    return f"{host}{port}{parts.path}" if host else ""


# -- what would fail ------------------------------------------------------------------


def starter_need_bytes() -> int:
    """Memory the starter model takes on the CPU at its context, as placement counts it."""
    return memory.cpu_need_bytes(STARTER_FACTS, context=starter.CONTEXT)


def memory_need_bytes(plan: SetupPlan) -> int:
    """What this machine needs for the plan: the control plane, and what it would serve."""
    need = CONTROL_PLANE_BYTES if plan.control_plane.on else 0
    if plan.serves_starter_here:
        need += starter_need_bytes()
    return need


def check(plan: SetupPlan, machine: Machine, *, store: StoreCheck | None = None) -> list[Refusal]:
    """What makes the plan fail on this machine, found before anything is installed.

    ``store`` is the answer of connecting to a PostgreSQL store (None: not checked).
    Where a gatewayd already runs, the machine already serves what it serves, so
    its memory is not judged again (a rerun to fix a certificate is not refused).
    """
    out: list[Refusal] = []
    cp = plan.control_plane
    if not cp.on:
        out.append(
            Refusal(
                part="control_plane",
                message="this setup installs a control plane; a machine that is only a node "
                "is added from its control plane (llmgw node cert NODE_ID there, then "
                "llmgw agent here)",
            )
        )
    ports = cp.ports()
    seen: dict[int, str] = {}
    for name, port in ports.items():
        if port in seen:
            out.append(
                Refusal(
                    part="control_plane",
                    message=f"the {seen[port]} and {name} ports are both {port}",
                    flags=[f"--{name}-port"],
                )
            )
        seen.setdefault(port, name)
    if not machine.gateway_running:
        for name, port in ports.items():
            if port in machine.ports_in_use:
                out.append(
                    Refusal(
                        part="control_plane",
                        message=f"port {port} ({name}) is in use on this machine: "
                        f"choose another with --{name}-port",
                    )
                )
    if plan.mirror.on:
        mirror_port = plan.mirror.port
        taken = next((n for n, p in ports.items() if p == mirror_port), None)
        if taken is not None:
            out.append(
                Refusal(
                    part="mirror",
                    message=f"the mirror and the {taken} port are both {mirror_port}",
                    flags=["--mirror-listen"],
                )
            )
        elif not machine.gateway_running and mirror_port in machine.ports_in_use:
            out.append(
                Refusal(
                    part="mirror",
                    message=f"port {mirror_port} (mirror) is in use on this machine: "
                    "choose another with --mirror-listen",
                )
            )
    if cp.standbys and not (plan.store.on and plan.store.kind == "postgres"):
        out.append(
            Refusal(
                part="control_plane",
                message="standby control planes share the cluster's store: choose a "
                "PostgreSQL store they all reach (--store-dsn postgresql://…), or name no standbys",
            )
        )
    if plan.store.kind == "postgres":
        if not plan.store.dsn:
            out.append(
                Refusal(
                    part="store",
                    message="the PostgreSQL store has no address: give one like "
                    "postgresql://llmgw@db.example:5432/llmgw, or keep SQLite",
                )
            )
        elif store is not None and not store.ok:
            out.append(
                Refusal(
                    part="store",
                    message=f"{store.message}; fix the address, or keep SQLite (no --store-dsn)",
                )
            )
    if plan.starter.on and not machine.starter_installed:
        out.append(
            Refusal(
                part="starter",
                message=f"the starter model {starter.NAME} is not installed here "
                "(pip install 'llmgw[starter]')",
                flags=["--no-starter"],
            )
        )
    elif plan.serves_starter_here and not machine.gateway_running:
        need = memory_need_bytes(plan)
        usable = memory.usable_host_bytes(machine.memory_total_bytes)
        if need > usable:
            out.append(
                Refusal(
                    part="starter",
                    message=f"this machine would serve {starter.NAME}: it and the control plane "
                    f"need {memory.gb(need)} of memory, and this machine has "
                    f"{memory.gb(machine.memory_total_bytes)} ({memory.gb(usable)} usable)",
                    flags=["--no-starter", "--no-node"],
                )
            )
    if plan.admin.on:
        if not plan.admin.group:
            out.append(
                Refusal(
                    part="admin",
                    message="admin access names no group: name one, or leave the token "
                    "to its owner (no --admin-group)",
                )
            )
        elif machine.groups and plan.admin.group not in machine.groups:
            out.append(
                Refusal(
                    part="admin",
                    message=f"there is no group {plan.admin.group} on this machine "
                    f"(make it: groupadd {plan.admin.group}, or give no --admin-group)",
                )
            )
    return out


def notes(plan: SetupPlan, machine: Machine) -> list[str]:
    """What is worth knowing about the plan that does not stop it."""
    out = []
    if machine.configured:
        out.append(
            "a cluster is already set up here: its CA, token and server.yaml are kept, "
            "so the port, store and setup flags are not applied (--force-config would)"
        )
    if plan.serves_starter_here and not machine.gateway_running:
        need = memory_need_bytes(plan)
        if machine.starter_installed and need > machine.memory_available_bytes > 0:
            out.append(
                f"only {memory.gb(machine.memory_available_bytes)} of memory is free now; "
                f"the starter model and the control plane need {memory.gb(need)}"
            )
    if plan.store.kind == "postgres" and dsn_password(plan.store.dsn):
        out.append(
            f"the store's password goes in {STORE_DSN_ENV}, never on the command line; "
            "it is kept in a 0600 file"
        )
    return out


# -- what a run does ---------------------------------------------------------------------


def steps(plan: SetupPlan, *, start: bool = True) -> list[Step]:
    """The steps a run of the plan performs, in order.

    ``start``: the run starts the cluster (``llmgw up``) and waits for it;
    otherwise it ends once the files are written.
    """
    out = [
        Step(key="check", title="Check this machine against the plan"),
        Step(key="init", title="Write the CA, certificates, admin token and server.yaml"),
    ]
    if plan.node.on:
        out.append(Step(key="node", title="Write agent.yaml and this machine's certificate"))
    if plan.admin.on and plan.admin.group:
        out.append(Step(key="access", title=f"Let group {plan.admin.group} read the admin token"))
    if plan.mirror.on:
        out.append(
            Step(
                key="mirror",
                title="Write mirror.yaml, the mirror's tokens, its certificate and its unit",
            )
        )
    if not start:
        return out
    out += [
        Step(key="start", title="Start the cluster in the background (llmgw up)"),
        Step(key="api", title="Wait for the admin API to answer"),
    ]
    if plan.node.on:
        out.append(Step(key="node_ready", title=f"Wait for node {plan.node.node_id} to be ready"))
    if plan.limits.on:
        out.append(Step(key="project", title=f"Make project {plan.limits.project}"))
    if plan.serves_starter_here:
        out.append(Step(key="starter", title=f"Wait for the starter model {starter.NAME}"))
    return out


def setup_config(plan: SetupPlan) -> SetupConfig:
    """The ``setup`` section of server.yaml the plan's command records."""
    lim = plan.limits
    return SetupConfig(
        node=plan.node.on,
        starter=plan.starter.on,
        project=lim.project if lim.on else "",
        rpm=lim.rpm if lim.on else None,
        tpm=lim.tpm if lim.on else None,
        budget_month_micros=lim.budget_month_micros if lim.on else None,
        admin_group=plan.admin.group if plan.admin.on else "",
    )
