"""The cluster's kept settings: one versioned document in the store, the same on every control plane.

What operators change while the cluster runs lives here; server.yaml keeps
what a control plane needs before it can read the store (listen addresses,
the store, PKI, the cluster's name, data dirs). The sections reuse
server.yaml's own schemas, so a value means the same in both places:

    router:   admission bands and the default band (llmgw.config.RouterConfig)
    engines:  the engine releases nodes converge to (llmgw.config.EngineRelease)
    mirror:   the model mirrors, tried in order, and how often they are probed
    limits:   key_default — the limits of every API key that sets none of its own
    nodes:    liveness timings (llmgw.config.NodesConfig)
    agents:   default, and nodes.<node id> over it: what each node's agent runs on
    scaling:  when a model between its min and max gets a replica more or fewer
    on_demand: how long a min-0 model keeps its replica when nobody asks for it
    classes:  priority classes, name to priority (a model's priority_class)

Pure: no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmgw.config import (
    EngineRelease,
    NodesConfig,
    RouterConfig,
    ServerConfig,
    check_hub_url,
    check_name,
)
from llmgw.mirror.config import check_mirror_url
from llmgw.scaling import Classes, OnDemandConfig, ScalingConfig, default_classes

LogLevel = Literal["debug", "info", "warning", "error"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MirrorSettings(_Strict):
    """The cluster's model mirrors (``llmgw mirror serve``), tried in order.

    The token files stay in server.yaml (``mirror.read_token_file``,
    ``admin_token_file``): they are paths on one machine, not the cluster's.
    """

    urls: list[str] = Field(default_factory=list)
    probe_interval_s: Annotated[float, Field(gt=0, le=3600)] = 15.0

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        out = [check_mirror_url(u) for u in v]
        if len(set(out)) != len(out):
            raise ValueError("a mirror is named twice")
        return out


class KeyLimitsDefault(_Strict):
    """The limits of an API key that sets none of its own, field by field; None is unlimited.

    A key's own limit of a field wins over this one; its project's, team's
    and organization's limits still narrow what it may do.
    """

    rpm: Annotated[int | None, Field(ge=1)] = None
    tpm: Annotated[int | None, Field(ge=1)] = None
    budget_day_micros: Annotated[int | None, Field(ge=0)] = None
    budget_month_micros: Annotated[int | None, Field(ge=0)] = None


class LimitsSettings(_Strict):
    key_default: KeyLimitsDefault = KeyLimitsDefault()


class AgentLiveSettings(_Strict):
    """What the cluster says of a node's agent, applied while it runs; None leaves it to the node.

    On the node, agent.yaml's value is under this and an ``LLMGW_`` variable
    in the agent's environment over it (``LLMGW_LOG_LEVEL``,
    ``LLMGW_HEARTBEAT_INTERVAL_MS``, ``LLMGW_HUB_URL``,
    ``LLMGW_WEIGHTS_CACHE_PERCENT``, ``LLMGW_WEIGHTS_CACHE_MAX_BYTES``).
    """

    # How often the agent sends a heartbeat; None: nodes.heartbeat_interval_s.
    heartbeat_interval_ms: Annotated[int | None, Field(ge=100, le=60_000)] = None
    log_level: LogLevel | None = None
    # Where hf: weights are fetched from when a shard names no mirror.
    hub_url: str | None = None
    # The weights cache's share of the node's disk, in percent, and a cap in
    # bytes; unused weights past the lower are removed, oldest first. None (or
    # a cap of 0): the node's own (agent.yaml's, else 50 % and no cap).
    weights_cache_percent: Annotated[int | None, Field(ge=1, le=100)] = None
    weights_cache_max_bytes: Annotated[int | None, Field(ge=0)] = None

    @field_validator("hub_url")
    @classmethod
    def _hub(cls, v: str | None) -> str | None:
        return None if v is None else check_hub_url(v)

    def over(self, under: AgentLiveSettings) -> AgentLiveSettings:
        """These settings with ``under``'s filling what these leave unset."""
        mine = self.model_dump(exclude_none=True)
        return AgentLiveSettings.model_validate(under.model_dump(exclude_none=True) | mine)


class AgentsSettings(_Strict):
    """``agents.default`` for every node, ``agents.nodes.<node id>`` over it for one."""

    default: AgentLiveSettings = AgentLiveSettings()
    nodes: dict[str, AgentLiveSettings] = Field(default_factory=dict)

    @field_validator("nodes", mode="before")
    @classmethod
    def _node_ids(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for node_id in v:
                check_name(str(node_id), what="node id")
            # An entry written as nothing (``gpu-1:``) holds nothing of its own.
            return {k: ({} if s is None else s) for k, s in v.items()}
        return v

    def for_node(self, node_id: str) -> AgentLiveSettings:
        """What node ``node_id``'s agent is to run on: its own entry over the default."""
        own = self.nodes.get(node_id)
        return self.default if own is None else own.over(self.default)


class ClusterSettings(_Strict):
    """The kept settings document (one version of it)."""

    router: RouterConfig = RouterConfig()
    engines: list[EngineRelease] = Field(default_factory=list)
    mirror: MirrorSettings = MirrorSettings()
    limits: LimitsSettings = LimitsSettings()
    nodes: NodesConfig = NodesConfig()
    agents: AgentsSettings = AgentsSettings()
    scaling: ScalingConfig = ScalingConfig()
    on_demand: OnDemandConfig = OnDemandConfig()
    classes: Classes = Field(default_factory=default_classes)

    @classmethod
    def from_server_config(cls, cfg: ServerConfig) -> ClusterSettings:
        """The settings server.yaml holds: what a cluster's first version is made of."""
        return cls(
            router=cfg.router.model_copy(deep=True),
            engines=[e.model_copy(deep=True) for e in cfg.engines],
            mirror=MirrorSettings(
                urls=list(cfg.mirror.urls), probe_interval_s=cfg.mirror.probe_interval_s
            ),
            nodes=cfg.nodes.model_copy(deep=True),
            scaling=cfg.scaling.model_copy(deep=True),
            on_demand=cfg.on_demand.model_copy(deep=True),
            classes=dict(cfg.classes),
        )

    def as_dict(self) -> dict[str, Any]:
        """The document as plain JSON values, every key present."""
        return self.model_dump(mode="json")


# Each section, and where it stands in server.yaml (None: nowhere there).
SECTIONS: dict[str, str | None] = {
    "router": "router",
    "engines": "engines",
    "mirror": "mirror",
    "limits": None,
    "nodes": "nodes",
    "agents": None,
    "scaling": "scaling",
    "on_demand": "on_demand",
    "classes": "classes",
}

# server.yaml's keys that are no setting kept here: read once, at start.
BOOTSTRAP_KEYS = frozenset(ServerConfig.model_fields) - frozenset(SECTIONS)

# agent.yaml's keys an agent needs before it can reach the cluster, or that
# only its machine can say: never kept in the cluster's settings.
AGENT_BOOTSTRAP_KEYS = frozenset(
    {
        "node_id",
        "control_planes",
        "pki",
        "data_dir",
        "hardware",
        "engine_user",
        "engine_host",
        "labels",
    }
)
