"""Reading the whole cluster for the header and the Overview, and what arrives after.

``read_cluster`` makes the calls ``llmgw ctl status``, ``nodes``, ``models``,
``replicas``, ``engines`` and ``warnings`` make, together. After that the
console follows ``Watch``; what no event carries (the gateway's counters in
Status, the warnings, the engines) is read again when events say something
happened, at most every ``SLOW_READ_EVERY_S`` — node heartbeats are events,
so requests per second keep coming from successive Status samples without a
polling loop.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from textual.message import Message

from llmgw.admin_client import AdminClient
from llmgw.errors import LlmgwError
from proto.llmgw.v1 import (
    ListEnginesReply,
    ListModelsReply,
    ListNodesReply,
    ListReplicasReply,
    StatusReply,
    WarningsReply,
    WatchEvent,
)

# The topics the header and the Overview follow.
TOPICS = ["nodes", "models", "replicas", "engines"]
# 5 s: requests per second stay current, and a thousand heartbeats a second
# still mean one Status and one Warnings call per 5 s.
SLOW_READ_EVERY_S = 5.0


class ClusterRead(Message):
    """Everything the Overview shows, read at once."""

    def __init__(
        self,
        status: StatusReply,
        nodes: ListNodesReply,
        models: ListModelsReply,
        replicas: ListReplicasReply,
        engines: ListEnginesReply,
        warnings: WarningsReply,
    ) -> None:
        super().__init__()
        self.status = status
        self.nodes = nodes
        self.models = models
        self.replicas = replicas
        self.engines = engines
        self.warnings = warnings


class ClusterChanged(Message):
    """``Watch`` events were recorded in the summary (``event``: the first of them)."""

    def __init__(self, event: WatchEvent) -> None:
        super().__init__()
        self.event = event


class CountersRead(Message):
    """What no event carries, read again: Status (the counters), warnings and engines."""

    def __init__(
        self, status: StatusReply, warnings: WarningsReply, engines: ListEnginesReply
    ) -> None:
        super().__init__()
        self.status = status
        self.warnings = warnings
        self.engines = engines


class FeedFailed(Message):
    """The app's watch was cut or refused, or the cluster could not be read."""

    def __init__(self, error: LlmgwError, retry_in_s: float | None) -> None:
        super().__init__()
        self.error = error
        self.retry_in_s = retry_in_s


class FeedListener(Protocol):
    """A screen kept live by the app's one ``Watch`` (``LlmgwApp.listen``).

    Called in the app's worker, in the order things happen: record what
    changed where the screen keeps it, and post the screen a message to draw.
    """

    def feed_read(self, read: ClusterRead) -> None:
        """The whole cluster was read (at start, and after a cut watch reopened)."""

    def feed_event(self, event: WatchEvent) -> None:
        """One change."""

    def feed_failed(self, error: LlmgwError, retry_in_s: float | None) -> None:
        """gatewayd could not be read or followed; ``retry_in_s`` when it is tried again."""


async def read_cluster(client: AdminClient) -> ClusterRead:
    """The whole cluster, as the ctl commands read it."""
    status, nodes, models, replicas, engines, warnings = await asyncio.gather(
        client.status(),
        client.list_nodes(),
        client.list_models(),
        client.list_replicas(),
        client.list_engines(),
        client.warnings(),
    )
    return ClusterRead(status, nodes, models, replicas, engines, warnings)


async def read_counters(client: AdminClient, delay_s: float) -> CountersRead:
    """Status, warnings and engines, after ``delay_s`` (so that reads stay spaced)."""
    await asyncio.sleep(delay_s)
    status, warnings, engines = await asyncio.gather(
        client.status(), client.warnings(), client.list_engines()
    )
    return CountersRead(status, warnings, engines)
