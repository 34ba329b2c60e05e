"""What the agent runs on of the settings it can change while it runs, and where each comes from.

Three layers, the later winning, key by key:

    agent.yaml       the node's own file (bootstrap; log_level and hub_url here)
    the cluster      AgentSettings, sent by the control plane on register and on
                     every change (agents.default with agents.nodes.<id> over it;
                     the heartbeat, otherwise, the control plane's own pace)
    the environment  LLMGW_LOG_LEVEL, LLMGW_HEARTBEAT_INTERVAL_MS, LLMGW_HUB_URL,
                     LLMGW_WEIGHTS_CACHE_PERCENT, LLMGW_WEIGHTS_CACHE_MAX_BYTES
                     in the agent's environment: an operator on the node wins

An environment value that hides the cluster's is said in the log (and so in
the node's status warnings) once per value, and ``sources()`` names where
each value in force comes from.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from llmgw.config import AgentConfig, check_hub_url
from proto.llmgw.v1 import AgentSettings

log = logging.getLogger(__name__)

LOG_LEVELS = ("debug", "info", "warning", "error")
# The fastest heartbeat taken: a faster one would only load the control plane.
MIN_HEARTBEAT_MS = 100
MAX_HEARTBEAT_MS = 60_000
# Where a value in force came from.
FILE, CLUSTER, ENV, BUILT_IN = "agent.yaml", "cluster", "environment", "built in"
KEYS = (
    "heartbeat_interval_ms",
    "log_level",
    "hub_url",
    "weights_cache_percent",
    "weights_cache_max_bytes",
)
ENV_NAMES = {key: f"LLMGW_{key.upper()}" for key in KEYS}
DEFAULT_HEARTBEAT_MS = 2000
# Half the disk the weights cache is on, and no cap in bytes, unless told otherwise.
DEFAULT_WEIGHTS_CACHE_PERCENT = 50
BUILT_IN_VALUES: dict[str, str | int] = {
    "heartbeat_interval_ms": DEFAULT_HEARTBEAT_MS,
    "weights_cache_percent": DEFAULT_WEIGHTS_CACHE_PERCENT,
    "weights_cache_max_bytes": 0,
}


def _whole(key: str, value: str | int) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{key} {value!r} is not a whole number") from None


def _check(key: str, value: str | int) -> str | int:
    """A value of ``key`` as the agent takes it; ValueError in words when it cannot."""
    if key == "log_level":
        if str(value).lower() not in LOG_LEVELS:
            raise ValueError(f"log_level {value!r} is not one of {', '.join(LOG_LEVELS)}")
        return str(value).lower()
    if key == "weights_cache_percent":
        percent = _whole(key, value)
        if not 1 <= percent <= 100:
            raise ValueError(f"weights_cache_percent {percent} is not between 1 and 100")
        return percent
    if key == "weights_cache_max_bytes":
        cap = _whole(key, value)
        if cap < 0:
            raise ValueError(f"weights_cache_max_bytes {cap} is below 0")
        return cap
    if key == "heartbeat_interval_ms":
        ms = _whole(key, value)
        if not MIN_HEARTBEAT_MS <= ms <= MAX_HEARTBEAT_MS:
            raise ValueError(
                f"heartbeat_interval_ms {ms} is not between {MIN_HEARTBEAT_MS} and "
                f"{MAX_HEARTBEAT_MS}"
            )
        return ms
    return check_hub_url(str(value))


@dataclass(frozen=True)
class InForce:
    """One live setting's value and the layer it came from."""

    key: str
    value: str | int
    source: str


class LiveSettings:
    """The agent's live settings: agent.yaml, under the cluster's, under the environment."""

    def __init__(self, cfg: AgentConfig, env: Mapping[str, str]) -> None:
        self._file: dict[str, str | int] = {"log_level": cfg.log_level, "hub_url": cfg.hub_url}
        for key in ("weights_cache_percent", "weights_cache_max_bytes"):
            if (value := getattr(cfg, key)) is not None:
                self._file[key] = value
        self._cluster: dict[str, str | int] = {}
        self._env: dict[str, str | int] = {}
        self.version = 0
        for key, name in ENV_NAMES.items():
            raw = env.get(name, "").strip()
            if not raw:
                continue
            try:
                self._env[key] = _check(key, raw)
            except ValueError as e:
                log.warning("%s in the environment is ignored: %s", name, e)
        # The control plane's pace, from its answer to Register: under the cluster's settings.
        self._registered: dict[str, str | int] = {}
        self._told: set[tuple[str, str | int]] = set()
        # The log level this put on the root logger (None: left as agentd's start set it).
        self._level_applied: str | None = None

    def registered(self, heartbeat_interval_ms: int) -> None:
        """The control plane's own heartbeat pace, sent with its answer to Register."""
        if heartbeat_interval_ms:
            self._registered["heartbeat_interval_ms"] = max(heartbeat_interval_ms, MIN_HEARTBEAT_MS)

    def take(self, msg: AgentSettings) -> tuple[bool, str]:
        """Keep what the cluster sent (every key it sets checked first); (taken, why not)."""
        sent: dict[str, str | int] = {}
        for key in KEYS:
            value = getattr(msg, key)
            if not value:
                continue
            try:
                sent[key] = _check(key, value)
            except ValueError as e:
                return False, str(e)
        self._cluster = sent
        self.version = msg.settings_version
        for key, value in sent.items():
            hidden_by = self._env.get(key)
            if hidden_by is not None and hidden_by != value and (key, value) not in self._told:
                self._told.add((key, value))
                log.warning(
                    "%s=%s in this agent's environment wins over the cluster's %s=%s "
                    "(settings version %d)",
                    ENV_NAMES[key],
                    hidden_by,
                    key,
                    value,
                    self.version,
                )
        return True, ""

    def sources(self) -> list[InForce]:
        """Every live setting's value in force and where it comes from."""
        out = []
        layers = (
            (ENV, self._env),
            (CLUSTER, self._cluster),
            (CLUSTER, self._registered),
            (FILE, self._file),
        )
        for key in KEYS:
            for source, layer in layers:
                if key in layer:
                    out.append(InForce(key, layer[key], source))
                    break
            else:
                out.append(InForce(key, BUILT_IN_VALUES[key], BUILT_IN))
        return out

    def in_force(self, key: str) -> InForce:
        return next(s for s in self.sources() if s.key == key)

    def apply(self, agent) -> None:
        """Put the values in force on the running agent: its heartbeat, logging, hub and
        weights cache limit."""
        agent.heartbeat_interval_s = int(self.in_force("heartbeat_interval_ms").value) / 1000
        level = self.in_force("log_level")
        # agentd's start set agent.yaml's level; the root logger is left alone until
        # another layer says otherwise (in-process tests share it with everything else).
        if level.value != self._level_applied and (
            self._level_applied is not None or level.source != FILE
        ):
            logging.getLogger().setLevel(str(level.value).upper())
            self._level_applied = str(level.value)
        agent.shards.fetcher.hf_base_url = str(self.in_force("hub_url").value)
        agent.weights.set_limit(
            int(self.in_force("weights_cache_percent").value),
            int(self.in_force("weights_cache_max_bytes").value),
        )
