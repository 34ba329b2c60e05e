"""What the supervisor is told and what it tells: launch specs, events, shard records."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmgw.errors import LlmgwError

ShardState = Literal["starting", "ready", "failed", "stopped"]
LIVE_STATES: frozenset[str] = frozenset({"starting", "ready"})


class SupervisorError(LlmgwError):
    """The supervisor was asked for something it cannot do (a shard id already running)."""


def check_shard_id(value: str) -> str:
    """A shard id, checked to be usable as one file name.

    It names the shard's state file and output file, and it comes from the
    control plane: one path element, not starting with a dot, so it can never
    point outside the agent's directories.
    """
    if not value or value.startswith(".") or "/" in value or "\0" in value:
        raise ValueError(f"a shard id must be one path element not starting with a dot: {value!r}")
    return value


def argv_hash(argv: list[str]) -> str:
    """A digest of an engine's command line, kept in its state file.

    A restarted agent compares it with what the control plane now asks for,
    so it can tell an adopted engine that still matches from a stale one
    without keeping the command line itself.
    """
    return hashlib.sha256("\0".join(argv).encode()).hexdigest()


class LaunchSpec(BaseModel):
    """Everything needed to start one engine process for one replica shard."""

    model_config = ConfigDict(frozen=True)

    shard_id: str
    replica_id: str
    argv: list[str] = Field(min_length=1)
    # The engine key travels here, never in argv (a command line is readable
    # by every user of the node through /proc); repr=False keeps it out of logs.
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    # Names in env whose values are secrets besides those named as one
    # (scrub.is_secret_name): taken out of every line of its output.
    secret_env: frozenset[str] = frozenset()
    cwd: str | None = None
    health_url: str
    startup_deadline_s: float = Field(default=600.0, gt=0)
    port: int = Field(ge=0, le=65535)
    # The units (cards, MIG instances) whose memory its processes must hold,
    # exactly, before it is ready; empty: not checked (a CPU shard, an engine
    # that never touches cards such as the sim).
    gpu_indexes: tuple[int, ...] = ()
    # The weights it runs on ("": none, as the sim's): kept in its record, so a
    # restarted agent never removes them from the cache under it.
    weights_path: str = ""

    @field_validator("shard_id")
    @classmethod
    def valid_shard_id(cls, value: str) -> str:
        return check_shard_id(value)

    @property
    def argv_hash(self) -> str:
        return argv_hash(self.argv)


class ShardRecord(BaseModel):
    """A running shard as written to ``<state_dir>/<shard_id>.json``.

    It is what a restarted agent needs to find and adopt the engine again;
    it holds no secret (the key is only in the engine's environment).
    """

    version: int = 1
    shard_id: str
    replica_id: str
    pid: int = Field(gt=1)
    pgid: int = Field(gt=1)
    # The process's start time (psutil's create_time, seconds since the
    # epoch): a pid the kernel has since given to another process has a
    # different one, so a record never adopts a stranger.
    start_time: float
    port: int
    argv_hash: str
    output_file: str
    health_url: str
    started_at: float
    startup_deadline_s: float
    user: str
    # LaunchSpec.gpu_indexes: an adopted GPU shard is checked on its cards again.
    gpu_indexes: list[int] = []
    # LaunchSpec.weights_path; None in a record of an agent that did not keep it
    # (what such an engine runs on is not known: the cache keeps everything).
    weights_path: str | None = None

    @field_validator("shard_id")
    @classmethod
    def valid_shard_id(cls, value: str) -> str:
        return check_shard_id(value)


@dataclass(frozen=True)
class ShardEvent:
    """A change of a shard's state, in the words the control plane shows operators.

    ``exit_code`` is the process's exit status when it ended: a negative value
    is the signal that killed it (as ``subprocess`` reports it), None when it
    is running or its status is unknown (an engine an earlier agent started).
    """

    shard_id: str
    state: ShardState
    reason: str
    pid: int | None = None
    port: int | None = None
    exit_code: int | None = None


@dataclass(frozen=True)
class ShardInfo:
    """What the supervisor knows of one shard right now."""

    shard_id: str
    replica_id: str
    state: ShardState
    reason: str
    pid: int | None
    pgid: int | None
    port: int | None
    user: str
    started_at: float | None
    adopted: bool
    health_url: str
    argv_hash: str
    output_file: str
    weights_path: str | None = ""
