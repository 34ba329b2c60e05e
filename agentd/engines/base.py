"""What every engine adapter is: a shard's settings in, a command line and environment out.

An adapter knows one engine's command line. It is pure: it reads no files,
starts nothing and asks no network; the supervisor runs what it returns. The
engine key travels in the environment only, because every user of the node
can read a process's command line (``ps``, ``/proc/<pid>/cmdline``).
"""

from __future__ import annotations

import ipaddress
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from llmgw.engines.flags import check_args, check_env
from llmgw.errors import UsageError

LOOPBACK = "127.0.0.1"


class EngineSpecError(UsageError):
    """A shard's settings that the engine cannot be started with."""


@dataclass(frozen=True)
class ShardSpec:
    """The settings of one shard, as the agent has them from StartShard and the weights."""

    # The name clients ask for; the engine serves the model under it.
    model_name: str
    # A file or directory the agent fetched or found, or (vLLM, SGLang) a
    # Hugging Face id the engine downloads itself; "" for the sim.
    model_path: str
    port: int
    host: str = LOOPBACK
    # Tokens one request may hold, prompt and answer: the model's
    # context_length as StartShard carries it. Per request, not per engine:
    # the llama.cpp adapter multiplies it by the slots itself.
    # 0: the engine's own default (the context the model was trained for).
    context_length: int = 0
    # Requests the engine runs at once; more wait in its queue.
    slots: int = 1
    # NVML indexes; empty runs on CPU. A MIG instance is a unit numbered
    # after the cards (agentd/discovery/nvml.py).
    gpu_indexes: tuple[int, ...] = ()
    # The uuids of gpu_indexes, in the same order, where the agent knows
    # them ("GPU-…", "MIG-…"): CUDA reaches a MIG instance only by its uuid.
    gpu_uuids: tuple[str, ...] = ()
    # 0: as many as gpu_indexes (over the pipeline stages).
    tensor_parallel: int = 0
    # Pipeline stages the plan chose; 0 or 1: none. tensor x pipeline cards.
    pipeline_parallel: int = 0
    # The plan spread a mixture of experts' experts over the cards.
    expert_parallel: bool = False
    # The share of each card the engine may take (vLLM's
    # --gpu-memory-utilization), from the plan's per-card need over the
    # card's memory; 0: the engine's own default.
    gpu_memory_fraction: float = 0.0
    # "" (as the weights are), "bf16", or "fp8" (the engine quantizes).
    precision: str = ""
    # CPU cores the shard reserves, given to the engine as its threads;
    # 0: the engine's own default.
    threads: int = 0
    # The node's weights cache, where an engine that downloads would write.
    download_dir: str = ""
    extra_args: tuple[str, ...] = ()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # A secret: kept out of repr so it never reaches a log line.
    engine_key: str = field(default="", repr=False)
    allow_pickle: bool = False

    @property
    def pp(self) -> int:
        return max(1, self.pipeline_parallel)

    @property
    def tp(self) -> int:
        return self.tensor_parallel or max(1, len(self.gpu_indexes) // self.pp)


@dataclass(frozen=True)
class EngineCommand:
    """How to start a shard's engine and where to check on it.

    ``env`` holds only what the agent adds to the engine's environment; the
    supervisor lays it over its own base environment.
    """

    argv: list[str]
    env: dict[str, str]
    health_url: str
    metrics_url: str
    # Names in env whose values are secrets: shown as *** in logs.
    secret_env: frozenset[str] = frozenset()

    def redacted_env(self) -> dict[str, str]:
        """``env`` fit for a log line."""
        return {k: ("***" if k in self.secret_env else v) for k, v in self.env.items()}


def url_host(host: str) -> str:
    """The address to reach an engine bound to ``host`` from this node, as a URL writes it."""
    if host in ("", "0.0.0.0"):
        return LOOPBACK
    if host == "::":
        return "[::1]"
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host


def gpu_env(spec: ShardSpec) -> dict[str, str]:
    """The variables that give an engine exactly the shard's GPUs.

    CUDA numbers cards fastest first unless told otherwise, while NVML (and
    so placement) numbers them by PCI bus: on a node with mixed cards GPU 1
    would be another card. An empty CUDA_VISIBLE_DEVICES keeps a CPU shard
    off the cards other shards were given. A MIG instance has no CUDA index
    of its own: it is named by its "MIG-…" uuid, and then every unit is
    (indexes and uuids cannot be mixed in one list).
    """
    uuids = spec.gpu_uuids
    by_uuid = len(uuids) == len(spec.gpu_indexes) and any(u.startswith("MIG-") for u in uuids)
    visible = uuids if by_uuid else [str(i) for i in spec.gpu_indexes]
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(visible)}


def is_hub_id(model_path: str) -> bool:
    """Whether a model path is a Hugging Face id (org/name) the engine would download itself.

    The agent always passes absolute paths for weights it fetched or found,
    so anything relative with one slash is an id. ``org/name:Q4_K_M`` is a
    GGUF inside a repository, which vLLM reads differently: not an id here.
    """
    return (
        bool(model_path)
        and not model_path.startswith(("/", ".", "~"))
        and "://" not in model_path
        and ":" not in model_path
        and model_path.count("/") == 1
    )


class EngineAdapter(ABC):
    """One engine's command line, environment, health and metrics paths."""

    # The engine's name in the catalog (llmgw.catalog.model.ENGINES).
    name: ClassVar[str]
    # The variable the engine reads its key from.
    key_env: ClassVar[str]
    health_path: ClassVar[str] = "/health"
    metrics_path: ClassVar[str] = "/metrics"
    # Whether the engine can run without a GPU.
    runs_on_cpu: ClassVar[bool] = True
    # Whether a shard of it given cards holds memory on them once it serves:
    # it is ready only then (agentd/supervisor/gpu_hold.py). False for an
    # engine that never touches a card, which is never checked.
    holds_gpu_memory: ClassVar[bool] = True
    # Whether the engine loads weights (the sim has none: its model path may be empty).
    needs_weights: ClassVar[bool] = True

    def command(self, spec: ShardSpec) -> EngineCommand:
        """The command line and environment that start ``spec``'s engine.

        Raises EngineArgsRefused for a refused operator flag or variable and
        EngineSpecError for settings the engine cannot run with.
        """
        self.validate(spec)
        check_args(self.name, spec.extra_args)
        check_env(self.name, spec.extra_env)
        # The operator's arguments come last so they can tune what the agent
        # did not set; what it did set, they may not repeat (flags.py).
        argv = [*self.launcher(), *self.agent_args(spec), *spec.extra_args]
        env = {**spec.extra_env, **gpu_env(spec), **self.agent_env(spec)}
        secret: frozenset[str] = frozenset()
        if spec.engine_key:
            env[self.key_env] = spec.engine_key
            secret = frozenset({self.key_env})
        return EngineCommand(
            argv=argv,
            env=env,
            health_url=self.health_url(spec),
            metrics_url=self.metrics_url(spec),
            secret_env=secret,
        )

    def health_url(self, spec: ShardSpec) -> str:
        return f"http://{url_host(spec.host)}:{spec.port}{self.health_path}"

    def metrics_url(self, spec: ShardSpec) -> str:
        return f"http://{url_host(spec.host)}:{spec.port}{self.metrics_path}"

    def validate(self, spec: ShardSpec) -> None:
        """Raise EngineSpecError for settings no engine can start with."""
        if not spec.model_name:
            raise EngineSpecError("the shard has no model name")
        if self.needs_weights and not spec.model_path:
            raise EngineSpecError(f"{spec.model_name}: the shard has no model path")
        if not 1 <= spec.port <= 65535:
            raise EngineSpecError(f"{spec.model_name}: port {spec.port} is not a TCP port")
        if spec.precision not in ("", "bf16", "fp8"):
            raise EngineSpecError(
                f"{spec.model_name}: precision {spec.precision!r} is not one of bf16, fp8"
            )
        if not 0 <= spec.gpu_memory_fraction <= 1:
            raise EngineSpecError(
                f"{spec.model_name}: a card's share {spec.gpu_memory_fraction:g} is not "
                "between 0 and 1"
            )
        if spec.slots < 1 or spec.context_length < 0 or spec.tensor_parallel < 0:
            raise EngineSpecError(
                f"{spec.model_name}: slots must be at least 1 and the context length "
                "and tensor parallelism not negative"
            )
        if not spec.gpu_indexes and not self.runs_on_cpu:
            raise EngineSpecError(
                f"{self.name} needs GPUs and this shard was given none",
                hint="use llama.cpp for a model served on CPU",
            )

    def agent_env(self, spec: ShardSpec) -> dict[str, str]:
        """Variables the agent sets besides the GPUs and the key (none by default)."""
        return {}

    @abstractmethod
    def launcher(self) -> list[str]:
        """The program (and its first arguments) that starts the engine."""

    @abstractmethod
    def agent_args(self, spec: ShardSpec) -> list[str]:
        """The arguments the agent sets: model, address, context, slots, GPUs."""
