"""RemoveNode, RestartReplica, Warnings and Status's counters, against a real gatewayd and agents."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from agentd.discovery.fake import resolve_fixture
from gatewayd.admin.ops import cluster_warnings
from gatewayd.admin.service import AdminService
from gatewayd.controller.replica import Replica, utcnow
from llmgw.errors import NotFoundError, UsageError
from proto.llmgw.v1 import GpuNeed, ModelProfile, ModelSpec, StatusRequest
from tests.cluster_fixture import Cluster, running_cluster, wait_for

READY_TRIES = 600


@pytest.fixture
async def cluster(tmp_path):
    async with running_cluster(tmp_path) as c:
        yield c


def sim_model(name: str = "sim-chat", replicas: int = 1, **profile) -> ModelSpec:
    profile.setdefault("startup_timeout_s", 60)
    return ModelSpec(
        name=name,
        source="/models/none.gguf",
        profiles=[ModelProfile(name="default", engine="sim", **profile)],
        replicas_min=replicas,
        replicas_max=replicas,
        slots=1,
    )


async def node_states(cluster: Cluster) -> dict[str, str]:
    async with cluster.admin() as admin:
        return {n.node_id: n.state for n in (await admin.list_nodes()).nodes}


async def start_ready(cluster: Cluster, *node_ids: str, fixture: str = "cpu_only_16c") -> None:
    for node_id in node_ids:
        await cluster.start_agent(node_id, fixture=fixture)

    async def all_ready():
        states = await node_states(cluster)
        return all(states.get(n) == "ready" for n in node_ids)

    await wait_for(all_ready)


async def replicas(cluster: Cluster, model: str = "sim-chat"):
    async with cluster.admin() as admin:
        return list((await admin.list_replicas(model)).replicas)


async def ready_ids(cluster: Cluster) -> set[str]:
    return {r.replica_id for r in await replicas(cluster) if r.state == "ready"}


# ---- RemoveNode ----------------------------------------------------------------


async def test_a_connected_node_is_removed_only_once_drained_and_comes_back_as_new(cluster):
    await start_ready(cluster, "cpu-a")
    async with cluster.admin() as admin:
        with pytest.raises(UsageError) as refused:
            await admin.remove_node("cpu-a")
        assert "drain it first (llmgw ctl drain cpu-a)" in refused.value.message

        await admin.drain_node("cpu-a")
        reply = await admin.remove_node("cpu-a")
        assert reply.removed and reply.was_connected
        assert "systemctl stop llmgw-agent" in reply.note
        assert await node_states(cluster) == {}
        # Its heartbeats do not bring it back.
        seq = cluster.server.registry.live("cpu-a").record.heartbeat_seq
        await wait_for(lambda: cluster.server.registry.live("cpu-a").record.heartbeat_seq > seq)
        assert await node_states(cluster) == {}

    # Its next connection registers it anew, with no cordon or drain left over.
    await cluster.stop_agents()
    await start_ready(cluster, "cpu-a")
    async with cluster.admin() as admin:
        node = await admin.get_node("cpu-a")
        assert not node.cordoned and not node.draining


async def test_a_node_that_runs_replicas_is_refused_with_what_to_do(cluster):
    await start_ready(cluster, "cpu-a")
    async with cluster.admin() as admin:
        await admin.put_model(sim_model(), create_only=True)
        await wait_for(lambda: ready_ids(cluster), attempts=READY_TRIES)
        (rid,) = await ready_ids(cluster)
        # Drained, but the replica has nowhere to move: it stays, and so does the node.
        await admin.drain_node("cpu-a")
        with pytest.raises(UsageError) as refused:
            await admin.remove_node("cpu-a")
        assert f"cpu-a still runs 1 replica ({rid})" in refused.value.message
        assert "wait until they have moved" in refused.value.message
        assert "cpu-a" in await node_states(cluster)


async def test_a_node_whose_agent_stopped_is_forgotten_everywhere(cluster):
    await start_ready(cluster, "cpu-a", "cpu-b")
    _, stop, _ = cluster.agents[1]
    stop.set()
    await wait_for(lambda: _state_is(cluster, "cpu-b", "not_ready"))
    async with cluster.admin() as admin:
        reply = await admin.remove_node("cpu-b")
        assert reply.removed and not reply.was_connected
        assert list(await node_states(cluster)) == ["cpu-a"]
        status = await admin.status()
        assert (status.nodes_total, status.nodes_ready, status.nodes_not_ready) == (1, 1, 0)
        with pytest.raises(NotFoundError):
            await admin.get_node("cpu-b")
        with pytest.raises(NotFoundError):
            await admin.remove_node("cpu-b")
        with pytest.raises(NotFoundError) as unknown:
            await admin.remove_node("nope")
        assert "no node named 'nope'" in unknown.value.message

    # It comes back: registered as it would be the first time.
    await cluster.start_agent("cpu-b", fixture="cpu_only_16c")
    await wait_for(lambda: _state_is(cluster, "cpu-b", "ready"))


async def _state_is(cluster: Cluster, node_id: str, state: str) -> bool:
    return (await node_states(cluster)).get(node_id) == state


async def test_watchers_hear_of_a_removed_node_as_forgotten(cluster):
    await start_ready(cluster, "cpu-a")
    _, stop, _ = cluster.agents[0]
    stop.set()
    await wait_for(lambda: _state_is(cluster, "cpu-a", "not_ready"))
    subs = cluster.server.registry.watch._subs
    before = len(subs)
    async with cluster.admin() as admin, cluster.admin() as watcher:
        events = watcher.watch(["nodes"])
        first = asyncio.ensure_future(anext(events))
        await wait_for(lambda: len(subs) > before)
        await admin.remove_node("cpu-a")
        event = await asyncio.wait_for(first, 10)
        assert event.key == "cpu-a" and event.node is None
        assert await node_states(cluster) == {}
        await events.aclose()


async def test_a_watch_asked_to_say_so_says_when_it_follows_and_misses_nothing_after(cluster):
    await start_ready(cluster, "cpu-a")
    subs = cluster.server.registry.watch._subs
    before = len(subs)
    async with cluster.admin() as admin, cluster.admin() as watcher:
        events = watcher.watch(["nodes"], opened=True)
        opened = await asyncio.wait_for(anext(events), 10)
        # Empty, and only once the watch follows: a list read now misses no change after it.
        assert (opened.topic, opened.key) == ("", "")
        assert len(subs) == before + 1
        await admin.cordon_node("cpu-a")

        async def cordoned():
            # A heartbeat may change the node first: it comes as an event too.
            async for event in events:
                if event.key == "cpu-a" and event.node.cordoned:
                    return event

        assert await asyncio.wait_for(cordoned(), 10)
        await events.aclose()


# ---- RestartReplica ------------------------------------------------------------


async def test_a_running_replica_restarts_as_a_new_one_in_its_place(cluster):
    await start_ready(cluster, "cpu-a")
    async with cluster.admin() as admin:
        await admin.put_model(sim_model(), create_only=True)
        await wait_for(lambda: ready_ids(cluster), attempts=READY_TRIES)
        (old,) = await ready_ids(cluster)

        reply = await admin.restart_replica(old)
        assert reply.action == "replace" and reply.replica.state == "draining"
        assert reply.replica.reason == "restarted by the operator"
        assert "llmgw ctl replicas --model sim-chat" in reply.note

        async def replaced():
            ids = await ready_ids(cluster)
            return ids if ids and old not in ids else None

        (new,) = await wait_for(replaced, attempts=READY_TRIES)
        assert new != old
        gone = next(r for r in await replicas(cluster) if r.replica_id == old)
        assert gone.state in ("draining", "stopped")
        assert "restarted by the operator" in [e.reason for e in gone.history]

        # Twice is refused: it is on its way out already.
        with pytest.raises(UsageError) as again:
            await admin.restart_replica(old)
        assert f"{old} is " in again.value.message and "already" in again.value.message
        with pytest.raises(NotFoundError):
            await admin.restart_replica("nope")


async def test_an_unplaced_replica_is_tried_again_at_once(cluster):
    await start_ready(cluster, "cpu-a")
    async with cluster.admin() as admin:
        # It wants a GPU on a CPU-only cluster: placement refuses it and retries later.
        await admin.put_model(sim_model(gpu=GpuNeed(count=1)), create_only=True)
        (pending,) = await wait_for(lambda: _pending_tried(cluster), attempts=READY_TRIES)
        reply = await admin.restart_replica(pending.replica_id)
        assert reply.action == "retry" and reply.replica.state == "pending"
        assert "tried again now" in reply.note


async def _pending_tried(cluster: Cluster):
    found = [r for r in await replicas(cluster) if r.state == "pending" and len(r.history) > 1]
    return found or None


# ---- Warnings ------------------------------------------------------------------


async def test_warnings_name_what_is_wrong_and_what_to_do(cluster, tmp_path):
    # A machine without AVX2 (a recorded inventory with the flag taken out).
    fixture = json.loads(_fixture_text("cpu_only_16c"))
    fixture["host"]["cpu_flags"] = [f for f in fixture["host"]["cpu_flags"] if f != "avx2"]
    fixture["host"]["avx2"] = False
    path = tmp_path / "no_avx2.json"
    path.write_text(json.dumps(fixture))
    await start_ready(cluster, "old-cpu", fixture=str(path))
    await start_ready(cluster, "cpu-b")
    _, stop, _ = cluster.agents[1]
    stop.set()
    await wait_for(lambda: _state_is(cluster, "cpu-b", "not_ready"))

    async with cluster.admin() as admin:
        await admin.put_model(sim_model("big", gpu=GpuNeed(count=1)), create_only=True)

        async def unplaceable():
            found = (await admin.warnings()).warnings
            return found if any(w.kind == "replica" for w in found) else None

        found = await wait_for(unplaceable, attempts=READY_TRIES)
        by_kind = {(w.kind, w.subject): w for w in found}
        down = by_kind[("node", "cpu-b")]
        assert down.severity == "error" and down.current
        assert down.message.startswith("not ready: agent disconnected")
        assert "llmgw ctl node rm cpu-b" in down.hint
        avx2 = by_kind[("host", "old-cpu")]
        assert "AVX2" in avx2.message and avx2.severity == "warning"
        (replica,) = [w for w in found if w.kind == "replica"]
        assert replica.message.startswith("big: cannot be placed:")
        assert "llmgw ctl explain-placement big" in replica.hint
        # Errors come first.
        assert found[0].severity == "error"
        assert (await admin.warnings(since_s=60)).since > (await admin.warnings()).since
        with pytest.raises(UsageError):
            await admin.warnings(since_s=-1)


async def test_a_failure_that_passed_stays_a_warning_for_the_period(cluster):
    await start_ready(cluster, "cpu-a")
    async with cluster.admin() as admin:
        # Never ready within its deadline: it fails, and is restarted after a backoff.
        await admin.put_model(
            sim_model("slow", args=["--load-ms", "30000"], startup_timeout_s=1), create_only=True
        )

        async def failed(current: bool):
            found = [
                w
                for w in (await admin.warnings()).warnings
                if w.subject.startswith("slow") and w.current is current
            ]
            return found or None

        (now, *_) = await wait_for(lambda: failed(True), attempts=READY_TRIES)
        assert now.kind == "replica" and now.severity == "error"
        assert now.message.startswith("slow: failed:") and "restarting in" in now.message
        assert f"llmgw ctl logs {now.subject}" in now.hint
        # Restarted after its backoff: the failure has passed but is still listed.
        (passed, *_) = await wait_for(lambda: failed(False), attempts=READY_TRIES)
        assert passed.severity == "warning" and passed.message.startswith("slow: failed:")


def _fixture_text(name: str) -> str:
    return resolve_fixture(name).read_text()


# ---- Status --------------------------------------------------------------------


async def test_status_counts_the_gateways_requests_and_errors(cluster):
    server = cluster.server
    admin = AdminService(
        server.registry,
        server.catalog,
        server.reconciler,
        server.keys,
        store=server.store,
        info=server.info,
        metrics=server.metrics,
    )
    before = await admin.status(StatusRequest())
    server.metrics.observe("nope", 200, 0.1, 0.001)
    server.metrics.observe("nope", 200, 0.1, 0.001)
    server.metrics.observe("nope", 503, 0.1, 0.001)
    after = await admin.status(StatusRequest())
    assert after.requests_total - before.requests_total == 3
    assert after.errors_total - before.errors_total == 1


def test_a_stop_reported_twice_is_not_a_failure_to_warn_of():
    # Regression guard: the node reports a requested stop twice, and the second
    # report moved the stopped replica to failed for a moment (then stopped again);
    # an hour of "failed" warnings after every scale-down would be noise.
    r = Replica(replica_id="chat-1", model="chat")
    for state, reason in [
        ("ready", "answers"),
        ("draining", "scaled to 0"),
        ("stopped", "stopped on request"),
        ("failed", "scaled to 0; restarting in 2 s"),
        ("stopped", "scaled to 0"),
    ]:
        r.move(state, reason)
    assert cluster_warnings([], [r], utcnow() - timedelta(hours=1)) == []

    # A real failure, restarted since: it passed, and it is still listed.
    other = Replica(replica_id="chat-2", model="chat")
    other.move("starting", "starting")
    other.move("failed", "the engine exited with code 1; restarting in 2 s")
    other.move("ready", "answers")
    (passed,) = cluster_warnings([], [r, other], utcnow() - timedelta(hours=1))
    assert not passed.current and "exited with code 1" in passed.message
