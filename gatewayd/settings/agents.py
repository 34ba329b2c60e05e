"""Each node's agent settings, sent down its stream: when it registers and when they change.

What a node is sent is ``agents.default`` with ``agents.nodes.<id>`` over it
(the heartbeat, when neither sets one, is ``nodes.heartbeat_interval_s``).
The registry announces every registration and every heartbeat on its
"nodes" topic; a node whose session is new, or whose settings differ from
what its session was last sent, is sent them once through the registry's
command path, which only the leader may use — a standby holds no streams.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from gatewayd.nodes.registry import NodeRegistry
from llmgw.settings import ClusterSettings
from proto.llmgw.v1 import AgentSettings, ControlMessage

log = logging.getLogger(__name__)

# An agent answers a command as soon as it has read it.
ACK_TIMEOUT_S = 10.0


@dataclass
class AgentSent:
    """The settings a node was last sent and what its agent answered."""

    version: int
    ok: bool
    error: str
    at: datetime


def agent_settings(settings: ClusterSettings, version: int, node_id: str) -> AgentSettings:
    """What node ``node_id``'s agent is to run on, as the message that carries it."""
    mine = settings.agents.for_node(node_id)
    beat_ms = mine.heartbeat_interval_ms or round(settings.nodes.heartbeat_interval_s * 1000)
    return AgentSettings(
        heartbeat_interval_ms=beat_ms,
        log_level=mine.log_level or "",
        settings_version=version,
        hub_url=mine.hub_url or "",
        weights_cache_percent=mine.weights_cache_percent or 0,
        weights_cache_max_bytes=mine.weights_cache_max_bytes or 0,
    )


class AgentSettingsPush:
    """Keeps every connected agent on the settings in force."""

    def __init__(self, registry: NodeRegistry, *, ack_timeout_s: float = ACK_TIMEOUT_S) -> None:
        self._registry = registry
        self._ack_timeout_s = ack_timeout_s
        self._settings: ClusterSettings | None = None
        self._version = 0
        # node id -> (session id, the message's bytes) last sent on that session.
        self._sent: dict[str, tuple[int, bytes]] = {}
        self._sending: dict[str, asyncio.Task] = {}
        self.states: dict[str, AgentSent] = {}

    def update(self, settings: ClusterSettings, version: int) -> None:
        """The settings in force changed: send every connected node what differs for it."""
        self._settings, self._version = settings, version
        for live in self._registry.live_nodes():
            self._consider(live.record.node_id)

    async def run(self) -> None:
        """Follow registrations (and heartbeats, cheaply) until cancelled."""
        sub = self._registry.watch.subscribe(["nodes"])
        try:
            for live in self._registry.live_nodes():
                self._consider(live.record.node_id)
            async for _topic, node_id in sub.changes():
                self._consider(node_id)
        finally:
            self._registry.watch.unsubscribe(sub)
            for task in self._sending.values():
                task.cancel()

    def _consider(self, node_id: str) -> None:
        settings = self._settings
        live = self._registry.live(node_id)
        if settings is None or live is None or not live.connected or live.send is None:
            return
        if node_id in self._sending:
            return  # the answer is awaited; what follows is looked at after it
        msg = agent_settings(settings, self._version, node_id)
        mark = (live.session_id, bytes(msg))
        if self._sent.get(node_id) == mark:
            return
        self._sending[node_id] = asyncio.create_task(
            self._send(node_id, mark, msg), name=f"agent-settings-{node_id}"
        )

    async def _send(self, node_id: str, mark: tuple[int, bytes], msg: AgentSettings) -> None:
        try:
            ack = await self._registry.command(
                node_id, ControlMessage(agent_settings=msg), timeout_s=self._ack_timeout_s
            )
        finally:
            self._sending.pop(node_id, None)
        if not ack.command_id:
            return  # never sent (the node went, this control plane stopped leading)
        # Answered (or not in time): not sent again on this session unless the settings change.
        self._sent[node_id] = mark
        self.states[node_id] = AgentSent(msg.settings_version, ack.ok, ack.error, datetime.now(UTC))
        if not ack.ok:
            log.warning(
                "node %s did not take settings version %d: %s",
                node_id,
                msg.settings_version,
                ack.error,
            )
        # The settings may have changed while the answer was awaited.
        self._consider(node_id)
