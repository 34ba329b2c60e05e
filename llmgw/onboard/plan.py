"""What ``node add`` and ``node remove`` are asked to do, and what the control plane records of a node."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llmgw.fsutil import write_atomic
from llmgw.onboard.ssh import SshTarget
from llmgw.paths import Paths

# A package command that fails only on another apt/dpkg's lock is retried
# this long (cloud-init and unattended-upgrades hold it for minutes on a new machine).
LOCK_WAIT_S = 600.0
LOCK_RETRY_S = 5.0
REGISTER_TIMEOUT_S = 120.0


@dataclass
class AddPlan:
    """Everything ``node add`` needs; the CLI and the console's dialog fill it alike."""

    target: SshTarget
    paths: Paths  # the control plane's own
    node_id: str = ""
    control_planes: list[str] = field(default_factory=list)
    install_root: str = ""
    wheelhouse: str = ""
    python: str = "python3"
    lock_wait_s: float = LOCK_WAIT_S
    lock_retry_s: float = LOCK_RETRY_S
    register_timeout_s: float = REGISTER_TIMEOUT_S
    # Written into the node's agent.yaml (over the labels it has there already).
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class RemovePlan:
    """``node remove``: which node, and how to reach it (recorded by node add unless given)."""

    node_id: str
    paths: Paths
    target: SshTarget | None = None
    install_root: str | None = None
    drain_timeout_s: float = 600.0
    # Stop the agent over SSH; without it the certificate is still revoked.
    stop_agent: bool = True


@dataclass
class NodeRecord:
    """How node add reached a node, kept so node remove can reach it again."""

    node_id: str
    host: str
    port: int = 0
    user: str = ""
    identity: str = ""
    known_hosts: str = ""
    install_root: str = ""
    python: str = "python3"
    control_planes: list[str] = field(default_factory=list)
    cert_serial: str = ""
    cert_fingerprint_sha256: str = ""

    def target(self) -> SshTarget:
        return SshTarget(
            host=self.host,
            port=self.port,
            user=self.user,
            identity=self.identity,
            known_hosts=self.known_hosts,
        )


def nodes_dir(paths: Paths) -> Path:
    return paths.config_dir / "nodes"


def save_record(paths: Paths, rec: NodeRecord) -> Path:
    path = nodes_dir(paths) / f"{rec.node_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, json.dumps(asdict(rec), indent=2) + "\n", mode=0o600)
    return path


def load_record(paths: Paths, node_id: str) -> NodeRecord | None:
    path = nodes_dir(paths) / f"{node_id}.json"
    try:
        return NodeRecord(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None


def forget_record(paths: Paths, node_id: str) -> None:
    try:
        os.unlink(nodes_dir(paths) / f"{node_id}.json")
    except FileNotFoundError:
        pass
