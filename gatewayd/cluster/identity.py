"""A control plane's name among those sharing a store, the address others reach it by,
and the admin calls only the leader answers."""

from __future__ import annotations

import logging
import re
import secrets
import socket
from collections.abc import Callable

from grpclib.const import Status
from grpclib.events import RecvRequest
from grpclib.exceptions import GRPCError

from llmgw.config import ServerConfig, split_host_port
from llmgw.fsutil import write_secret
from llmgw.paths import Paths

log = logging.getLogger(__name__)

ID_FILE = "control-plane-id"

# Admin calls that change what the leader alone holds in memory (the nodes'
# streams, the reconciler's replicas, the catalog it places from): a standby
# refuses them naming the leader, rather than writing under the leader's feet.
# Everything else (keys, tenants, limits, usage, MCP, mirrors, reads) is the
# store's and answers on every control plane.
LEADER_ONLY = frozenset(
    {
        "CordonNode",
        "UncordonNode",
        "DrainNode",
        "LabelNode",
        "PutModel",
        "ScaleModel",
        "RemoveModel",
        "SetModelContext",
        "ReplicaLogs",
        "RemoveNode",
        "RevokeNode",
        "RestartReplica",
        "CancelBatch",
        "RotateEngineKeys",
    }
)


def control_plane_id(paths: Paths) -> str:
    """This control plane's id: made once (hostname and a random suffix), kept in its data dir.

    Kept, not derived from the hostname alone: two control planes on one
    machine (tests, a move) must not share one, and a restart must keep it
    so a leader that comes back at once is still the lease's holder.
    """
    path = paths.server_data_dir / ID_FILE
    try:
        kept = path.read_text().strip()
        if kept:
            return kept
    except FileNotFoundError:
        pass
    host = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().lower()).strip("-")[:40] or "cp"
    made = f"{host}-{secrets.token_hex(3)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_secret(path, made + "\n")
    return made


def advertise_host(cfg: ServerConfig) -> str:
    """The name other machines reach this control plane by (server.yaml cluster.advertise_host).

    Without one: the agent port's own address when it names one, else the hostname.
    """
    if cfg.cluster.advertise_host:
        return cfg.cluster.advertise_host
    host, _ = split_host_port(cfg.listen.agent)
    if host and host not in ("0.0.0.0", "::"):
        return host
    return socket.gethostname()


def leader_guard(leading: Callable[[], bool], leader_words: Callable[[], str]):
    """A grpclib RecvRequest listener: a standby refuses the leader's calls, naming the leader."""

    async def check(event: RecvRequest) -> None:
        method = event.method_name.rsplit("/", 1)[-1]
        if method in LEADER_ONLY and not leading():
            raise GRPCError(
                Status.FAILED_PRECONDITION,
                f"this control plane is standing by; {method} is the leader's to do "
                f"(the leader: {leader_words()}): run it on the leader's machine",
            )

    return check
