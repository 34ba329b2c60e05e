"""The fault-injection suite: three control planes, Patroni, HAProxy, an agent, a steady load,
and one fault after another.

Real processes on loopback: etcd and two PostgreSQL members under Patroni
(tests/faults/conftest.py), three ``llmgw server`` on that store (each
through links of its own, so one can be cut from it), HAProxy in front with
deploy/haproxy/haproxy.cfg, one ``llmgw agent`` with two sim replicas, and an
open-loop load of chat completions (streamed and not) through HAProxy with
the official openai SDK. Each fault runs under that load with a key of its
own, and makes a row of the table (tests/faults/harness/report.py): requests
sent, answered, failed (status and words), usage rows against answered
requests, leader changes and how long they took, time back to full service.

The faults, in order: (a) kill -9 of the leader; (b) SIGSTOP of the leader for
30 s; (c) the PostgreSQL primary stopped; (d) the leader cut from the store;
(e) kill -9 of the agent; (f) kill -9 of an engine; (g) a clean restart of
each control plane in turn. Then: a key's budget spent through one control
plane stops it on every one, and ``ctl config`` set on one is in force on
the others and on the agent.

Each test leaves the cluster whole (three control planes, one leader, both
replicas ready) for the next. The table is printed at the end (``-s``) and
kept in the module's folder as fault-table.txt.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from llmgw.admin_client import AdminClient
from proto.llmgw.v1 import KeyView, ModelPrice, ModelSpec
from tests.e2e.helpers import llmgw
from tests.faults.harness import HAProxy, PatroniCluster, haproxy, wait_until
from tests.faults.harness.llmgw_cluster import ControlPlane, LlmgwCluster, llmgw_cluster
from tests.faults.harness.load import OpenLoad, Outcome
from tests.faults.harness.observe import (
    LeaderWatch,
    batch_usage_counts,
    leader_changes_since,
    usage_counts,
)
from tests.faults.harness.report import FaultRow, write_table
from tests.gatewayd.test_admin_ops import sim_model

pytestmark = [
    pytest.mark.faults,
    # Its figures are how long failovers take: measured on a machine it has to itself.
    pytest.mark.alone,
    pytest.mark.postgres,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(300),
]

MODEL = "sim-chat"
PROJECT = "acme/ops/faults"
REPLICAS = 2
RATE = 20.0  # requests a second through HAProxy, half of them streamed
LEASE_TTL_S = 10.0  # the production lease
# The steady load before a fault and after full service is back.
WARM_S, AFTER_S = 3.0, 3.0
FREEZE_S = 30.0
CRASH_HANDOVER_S, CLEAN_HANDOVER_S = 12.0, 3.0
# A fault is over, and service whole again, within this.
BACK_WITHIN_S = 90.0


@dataclass
class Suite:
    root: Path
    patroni: PatroniCluster
    cluster: LlmgwCluster
    lb: HAProxy
    rows: list[FaultRow] = field(default_factory=list)
    rounds: list[tuple[float, frozenset[str]]] = field(default_factory=list)
    keys: int = 0

    async def leader(self) -> ControlPlane:
        return await self.cluster.leader()

    async def admin(self) -> AdminClient:
        return (await self.leader()).admin()

    async def new_key(self, name: str, **limits) -> KeyView:
        self.keys += 1
        async with await self.admin() as admin:
            key = await admin.create_key(PROJECT, name=f"{name}-{self.keys}", **limits)
        # Standbys read keys from the store every 2 s: the key works on each before the load
        # (one answer on each: counted out of the key's usage rows below).
        for cp in self.cluster.control_planes:
            await wait_until(
                lambda cp=cp: _answers(cp.http_url, key.secret),
                timeout_s=30,
                what=f"the new key answered on {cp.name}",
            )
        return key

    async def replicas(self) -> list:
        async with await self.admin() as admin:
            reps = (await admin.list_replicas(MODEL)).replicas
        self.cluster.engine_pids.update(r.pid for r in reps if r.pid)
        return reps

    async def full_service(self) -> bool:
        """Every control plane in HAProxy's client pool, one leader, the node and both replicas
        ready on it, and an answer through the front."""
        if await self.lb.servers_up() != {cp.name for cp in self.cluster.control_planes}:
            return False
        leaders = await self.cluster.leaders()
        if len(leaders) != 1:
            return False
        async with leaders[0].admin() as admin:
            nodes = {n.node_id: n.state for n in (await admin.list_nodes()).nodes}
            reps = (await admin.list_replicas(MODEL)).replicas
        self.cluster.engine_pids.update(r.pid for r in reps if r.pid)
        return nodes == {"node-a": "ready"} and [r.state for r in reps] == ["ready"] * REPLICAS

    async def settled_usage(self, key_id: str, answered: int) -> int:
        """The key's usage rows (status 200) once they stop growing (or reach ``answered``)."""
        seen: list[int] = []

        async def settled() -> bool:
            ok = (await usage_counts(self.cluster.store_dsn, key_id)).get(200, 0)
            seen.append(ok)
            return ok >= answered and seen[-2:] == [ok, ok]

        try:
            await wait_until(settled, timeout_s=30, interval_s=0.5, what="usage rows settled")
        except AssertionError:
            pass  # the row says what is missing
        return seen[-1] if seen else 0

    async def run_fault(
        self, name: str, fault: Callable[[float], Awaitable[dict]]
    ) -> tuple[FaultRow, LeaderWatch, dict]:
        """Steady load with a key of its own, ``fault(t0)`` (which brings the cluster back
        too), load until full service and a little after; the fault's row."""
        assert await self.full_service(), "the cluster was not whole before the fault"
        key = await self.new_key(name.split()[0].strip("()"))
        load = OpenLoad(self.lb.url, key.secret, MODEL, rate=RATE)
        watch = LeaderWatch(self.cluster)
        stop = asyncio.Event()
        tasks = [asyncio.create_task(load.run(stop)), asyncio.create_task(watch.run(stop))]
        since = datetime.now(UTC) - timedelta(seconds=1)
        try:
            await asyncio.sleep(WARM_S)  # the load, steady, before the fault
            t0 = time.time()
            info = await fault(t0)
            # The fault's own moment where it says one: finding the leader to
            # kill takes an admin call first, longer on a busy machine, and
            # what began in between is not after the fault.
            t0 = info.get("at", t0)
            await wait_until(
                self.full_service, timeout_s=BACK_WITHIN_S, interval_s=0.2, what="full service"
            )
            back_s = time.time() - t0
            await asyncio.sleep(AFTER_S)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        answered = sum(o.answered for o in load.outcomes)
        warm_ups = len(self.cluster.control_planes)  # new_key's one answer on each
        usage_ok = await self.settled_usage(key.key_id, answered + warm_ups) - warm_ups
        changes = await leader_changes_since(self.cluster.store_dsn, since)
        names = {cp.control_plane_id: cp.name for cp in self.cluster.control_planes}
        row = FaultRow(
            name,
            load.outcomes,
            usage_ok,
            changes=[
                f"{names.get(c.previous, c.previous or '-')} → {names.get(c.holder, c.holder or '-')}"
                f" at +{(c.at.timestamp() - t0):.1f} s ({c.reason})"
                for c in changes
            ],
            handover_s=info.get("handover_s"),
            back_s=back_s,
            two_leaders_rounds=len(watch.two_at_once()),
            note=info.get("note", ""),
            t0=t0,
        )
        self.rows.append(row)
        self.rounds += watch.rounds
        write_table(self.rows, Path(__file__).with_name("fault-table.txt"))
        return row, watch, info


async def _answers(url: str, secret: str) -> bool:
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.post(
            url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {secret}"},
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
    if r.status_code != 200:
        raise AssertionError(f"{r.status_code}: {r.text[:300]}")  # wait_until names the last
    return True


def _sim_model() -> ModelSpec:
    spec = sim_model(MODEL, replicas=REPLICAS)
    spec.slots = 8
    # A micro-unit a token: what the budget test spends.
    spec.price = ModelPrice(prompt_per_thousand=1000, completion_per_thousand=1000)
    return spec


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def suite(ha_root: Path, patroni: PatroniCluster):
    async with llmgw_cluster(ha_root / "llmgw", patroni, lease_ttl_s=LEASE_TTL_S) as cluster:
        backends = [cp.http_address for cp in cluster.control_planes]
        async with haproxy(ha_root / "lb", backends) as lb:
            s = Suite(ha_root, patroni, cluster, lb)
            async with await s.admin() as admin:
                await admin.put_model(_sim_model(), create_only=True)
                await admin.create_tenant("project", PROJECT, parents=True)
            await wait_until(s.full_service, timeout_s=120, interval_s=0.2, what="the cluster up")
            try:
                yield s
            finally:
                print("\n" + write_table(s.rows, Path(__file__).with_name("fault-table.txt")))
                for cp in cluster.control_planes:
                    assert "Traceback" not in cp.log_text(), cp.log_text()[-6000:]


def _failed(row: FaultRow) -> list[Outcome]:
    return [o for o in row.outcomes if not o.answered]


def _accounted_exactly(row: FaultRow) -> None:
    assert row.missing == 0 and row.doubled == 0, (
        f"{row.fault}: {row.answered} answered, {row.usage_ok} usage rows"
    )


def _one_leader_at_a_time(watch: LeaderWatch) -> None:
    assert not watch.two_at_once(), f"two leaders answered at once: {watch.two_at_once()[:5]}"


async def test_a_kill_9_of_the_leader(suite: Suite):
    async def fault(t0: float) -> dict:
        leader = await suite.leader()
        at = time.time()
        leader.kill()
        await leader.reap()
        new = await suite.cluster.leader(timeout_s=30, other_than=leader)
        handover_s = time.time() - at
        assert new is not leader
        # Back as systemd would bring it (Restart=always): a standby now.
        await leader.start()
        return {"handover_s": handover_s, "killed": leader.name, "at": at}

    row, watch, _ = await suite.run_fault("(a) kill -9 the leader", fault)
    _one_leader_at_a_time(watch)
    assert row.handover_s is not None and row.handover_s <= CRASH_HANDOVER_S, row.handover_s
    _accounted_exactly(row)
    # Only requests in flight on the killed process may fail.
    late = [o for o in _failed(row) if o.began > row.t0 + 0.5]
    assert not late, late[:5]


async def test_b_the_leader_frozen_30_s(suite: Suite):
    async def fault(t0: float) -> dict:
        leader = await suite.leader()
        at = time.time()
        leader.freeze()
        # The others see the lease lapse and one takes it, while it is frozen.
        new = await suite.cluster.leader(timeout_s=30, other_than=leader)
        handover_s = time.time() - at
        assert new is not leader
        await asyncio.sleep(max(FREEZE_S - (time.time() - at), 0))
        leader.thaw()
        # Woken, it knows its lease is gone before it does anything as leader.
        assert await leader.probe("/leader") in (503, None)
        return {"handover_s": handover_s, "frozen": leader.name, "at": at}

    row, watch, _ = await suite.run_fault(f"(b) SIGSTOP the leader {FREEZE_S:g} s", fault)
    _one_leader_at_a_time(watch)
    assert row.handover_s is not None and row.handover_s <= CRASH_HANDOVER_S, row.handover_s
    assert not _failed(row), row.failed
    _accounted_exactly(row)


async def test_c_the_postgresql_primary_stopped(suite: Suite):
    async def fault(t0: float) -> dict:
        stopped = await suite.patroni.stop_primary()
        await suite.patroni.wait_primary(not_name=stopped)
        store_back_s = time.time() - t0
        await suite.patroni.start_member(stopped)
        await suite.patroni.wait_replicas_streaming()
        return {"note": f"primary {stopped} stopped; a writable primary again after "
                f"{store_back_s:.1f} s"}  # fmt: skip

    row, watch, _ = await suite.run_fault("(c) stop the PostgreSQL primary", fault)
    _one_leader_at_a_time(watch)
    assert not _failed(row), row.failed
    _accounted_exactly(row)


async def test_d_the_leader_cut_from_the_store(suite: Suite):
    async def fault(t0: float) -> dict:
        leader = await suite.leader()
        at = time.time()
        leader.cut_from_store()
        try:
            new = await suite.cluster.leader(timeout_s=30, other_than=leader)
            handover_s = time.time() - at
            assert new is not leader
            # The cut one goes on answering its clients (keys and routes in memory,
            # usage in its journal) a while longer.
            await asyncio.sleep(5)
        finally:
            leader.restore_store()
        return {"handover_s": handover_s, "cut": leader.name, "at": at}

    row, watch, _ = await suite.run_fault("(d) cut the leader from the store", fault)
    _one_leader_at_a_time(watch)
    assert row.handover_s is not None and row.handover_s <= CRASH_HANDOVER_S, row.handover_s
    assert not _failed(row), row.failed
    _accounted_exactly(row)


async def test_e_a_kill_9_of_the_agent(suite: Suite):
    pids = {r.pid for r in await suite.replicas()}

    async def fault(t0: float) -> dict:
        suite.cluster.agent.kill()
        await suite.cluster.agent.reap()
        await suite.cluster.agent.start()  # as systemd would
        return {}

    row, watch, _ = await suite.run_fault("(e) kill -9 the agent", fault)
    _one_leader_at_a_time(watch)
    assert not _failed(row), row.failed
    _accounted_exactly(row)
    # The engines ran on throughout: the same processes, adopted.
    assert {r.pid for r in await suite.replicas()} == pids


async def test_f_a_kill_9_of_an_engine(suite: Suite):
    victim = (await suite.replicas())[0].pid

    async def fault(t0: float) -> dict:
        os.killpg(victim, signal.SIGKILL)

        async def replaced() -> bool:
            reps = await suite.replicas()
            return victim not in {r.pid for r in reps} and all(r.state == "ready" for r in reps)

        await wait_until(replaced, timeout_s=60, interval_s=0.2, what="the engine replaced")
        return {}

    row, watch, _ = await suite.run_fault("(f) kill -9 an engine", fault)
    _one_leader_at_a_time(watch)
    _accounted_exactly(row)
    late = [o for o in _failed(row) if o.began > row.t0 + 0.5]
    assert not late, late[:5]


async def test_g_a_rolling_restart_of_every_control_plane(suite: Suite):
    async def fault(t0: float) -> dict:
        leader = await suite.leader()
        # Standbys first, the leader last, as an upgrade would go.
        order = [cp for cp in suite.cluster.control_planes if cp is not leader] + [leader]
        handover_s = None
        for cp in order:
            began = time.time()
            await cp.stop()
            if cp is leader:
                await suite.cluster.leader(timeout_s=30, other_than=leader)
                handover_s = time.time() - began
            await cp.start()
            await suite.lb.wait_servers_up(3)
        return {"handover_s": handover_s, "note": "restarted " + ", ".join(c.name for c in order)}

    row, watch, _ = await suite.run_fault("(g) rolling restart of each cp", fault)
    _one_leader_at_a_time(watch)
    assert row.handover_s is not None and row.handover_s <= CLEAN_HANDOVER_S, row.handover_s
    assert not _failed(row), row.failed
    _accounted_exactly(row)


async def test_a_spent_key_is_refused_on_every_control_plane(suite: Suite):
    key = await suite.new_key("budget", budget_month_micros=200)
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
    headers = {"Authorization": f"Bearer {key.secret}"}
    async with httpx.AsyncClient(timeout=30) as client:
        # Spent through the front (whichever control planes it picks) until refused.
        for _ in range(100):
            r = await client.post(suite.lb.url + "/v1/chat/completions", headers=headers, json=ask)
            if r.status_code != 200:
                break
        assert r.status_code == 429 and "budget" in r.text, r.text
        for cp in suite.cluster.control_planes:

            async def refused(cp=cp) -> bool:
                r = await client.post(
                    cp.http_url + "/v1/chat/completions", headers=headers, json=ask
                )
                return r.status_code == 429 and "budget" in r.text

            await wait_until(refused, timeout_s=5, what=f"the spent key refused on {cp.name}")


async def _ctl(cp: ControlPlane, *args: str) -> dict:
    """``llmgw ctl ARGS --json`` on ``cp``'s machine, in a thread: the suite's loop carries
    the store links and must never wait on a command."""
    res = await asyncio.to_thread(llmgw, cp.home, "ctl", *args, "--json")
    assert res.returncode == 0, f"{res.stderr}\n{cp.name}'s log:\n{cp.log_text()[-3000:]}"
    return json.loads(res.stdout)


async def test_a_setting_changed_on_one_control_plane_is_in_force_everywhere(suite: Suite):
    cp1, cp2, cp3 = suite.cluster.control_planes
    before = (await _ctl(cp1, "config", "get"))["version"]["version"]
    changed = await _ctl(
        cp2, "config", "set", "agents.default.log_level=debug", "--comment", "faults"
    )
    version = changed["version"]["version"]
    assert version > before
    began = time.monotonic()
    leader = await suite.leader()

    async def in_force(cp: ControlPlane) -> bool:
        got = await _ctl(cp, "config", "get")
        force = got["in_force"]
        if force["version"] != version:
            return False
        if cp is leader:  # the agent is the leader's: it says which version it runs
            return [a["version"] for a in force["agents"]] == [version]
        return True

    for cp in suite.cluster.control_planes:
        await wait_until(lambda cp=cp: in_force(cp), timeout_s=10,
                         interval_s=0.2, what=f"version {version} in force on {cp.name}")  # fmt: skip
    took_s = time.monotonic() - began
    assert took_s <= 5.0, f"in force everywhere after {took_s:.1f} s"

    back = await _ctl(cp3, "config", "rollback", str(before))
    assert back["version"]["version"] > version
    log_level = await _ctl(cp1, "config", "get", "agents.default.log_level")
    assert json.loads(log_level["value_json"]) is None

    bad = await asyncio.to_thread(
        llmgw, cp3.home, "ctl", "config", "set", "limits.key_default.rpm=lots"
    )
    assert bad.returncode != 0
    assert "limits.key_default.rpm" in bad.stderr, bad.stderr


async def _ready(cp: ControlPlane) -> tuple[int, dict]:
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.get(cp.http_url + "/ready")
    return r.status_code, r.json()


async def test_only_on_demand_models_all_idle_the_first_request_through_haproxy_is_answered(
    suite: Suite,
):
    # Guards /ready counting ready replicas: with every model idle on demand, each control
    # plane said 503, HAProxy took them all out, and the request that would start one never came.
    key = await suite.new_key("on-demand")  # known everywhere before the model goes idle
    cp1 = suite.cluster.control_planes[0]
    before = (await _ctl(cp1, "config", "get"))["version"]["version"]
    await _ctl(cp1, "config", "set", "on_demand.evict_after_idle_s=1",
               "on_demand.min_lifetime_s=0", "--comment", "faults: on demand")  # fmt: skip
    on_demand = _sim_model()
    on_demand.replicas_min, on_demand.replicas_max = 0, 1
    async with await suite.admin() as admin:
        await admin.put_model(on_demand)

    async def all_idle() -> bool:
        return all(r.state == "stopped" for r in await suite.replicas())

    try:
        await wait_until(all_idle, timeout_s=60, interval_s=0.2, what="every replica idle")
        for cp in suite.cluster.control_planes:
            status, body = await _ready(cp)
            assert status == 200, body
            assert body["replicas"]["ready"] is False, body  # reported apart, not counted
        names = {cp.name for cp in suite.cluster.control_planes}
        assert await suite.lb.wait_servers_up(len(names)) == names
        async with httpx.AsyncClient(timeout=90) as client:
            r = await client.post(
                suite.lb.url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {key.secret}"},
                json={
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 2,
                },
            )
        assert r.status_code == 200, r.text[:300]
        assert r.json()["choices"][0]["message"]["content"]
        # Idle again, the first request straight to a standby: held there, it keeps the
        # model wanted on the leader (once only asked, it was forgotten past the idle time).
        await wait_until(all_idle, timeout_s=60, interval_s=0.2, what="every replica idle again")
        leader = await suite.leader()
        standby = next(cp for cp in suite.cluster.control_planes if cp is not leader)
        async with httpx.AsyncClient(timeout=90) as client:
            r = await client.post(
                standby.http_url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {key.secret}"},
                json={
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 2,
                },
            )
        assert r.status_code == 200, f"through {standby.name}: {r.text[:300]}"
    finally:
        async with await suite.admin() as admin:
            await admin.put_model(_sim_model())
        await _ctl(cp1, "config", "rollback", str(before))
        await wait_until(suite.full_service, timeout_s=120, interval_s=0.2, what="full service")


async def test_no_two_leaders_acted_at_once_through_the_whole_suite(suite: Suite):
    assert suite.rounds, "no fault ran"
    two = [(at, names) for at, names in suite.rounds if len(names) > 1]
    assert not two, two[:5]
    # Each second of the suite: at most one control plane answered as leader.
    by_second: dict[int, set[str]] = {}
    for at, names in suite.rounds:
        by_second.setdefault(int(at), set()).update(names)
    overlapping = {s: n for s, n in by_second.items() if len(n) > 1}
    # A handover inside one second shows both names in it: that is one after the other,
    # never at once (above); the store's epochs say who held the lease in turn.
    print(f"\nseconds watched: {len(by_second)}, with a handover inside: {len(overlapping)}")


async def test_a_session_based_mcp_client_makes_50_calls_through_haproxy(suite: Suite):
    """A legacy (session) MCP client through the front: HAProxy sends every request that
    carries the session's ``Mcp-Session-Id`` back to the control plane that issued it."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.fakes.mcp_servers import ServerProcess

    async with ServerProcess("wiki") as wiki:
        leader = await suite.leader()
        await _ctl(leader, "mcp", "add", "wiki-fault", "--url", wiki.url)
        await _ctl(leader, "mcp", "grant", PROJECT, "wiki-fault")
        key = await suite.new_key("mcp-session")
        headers = {"Authorization": f"Bearer {key.secret}"}
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        async with http:

            async def granted_everywhere() -> bool:
                # Standbys read servers and grants from the store: each one lists the tool.
                for cp in suite.cluster.control_planes:
                    async with Client(
                        streamable_http_client(cp.http_url + "/mcp", http_client=http),
                        mode="legacy",
                    ) as c:
                        names = {t.name for t in (await c.list_tools()).tools}
                        if "wiki-fault.search" not in names:
                            return False
                return True

            await wait_until(granted_everywhere, timeout_s=30, what="the tool on every cp")
            failures = 0
            async with Client(
                streamable_http_client(suite.lb.url + "/mcp", http_client=http), mode="legacy"
            ) as c:
                for i in range(50):
                    got = await c.call_tool("wiki-fault.search", {"q": f"q{i}"})
                    failures += got.is_error
        await _ctl(leader, "mcp", "remove", "wiki-fault", "--yes")
    assert failures == 0


async def test_an_mcp_servers_rate_holds_in_total_across_the_three_control_planes(suite: Suite):
    """``--rate 60`` (a minute, per key and server): spent through one control plane, the
    others refuse too; calls spread over all three are let through at the rate once, not
    once per control plane."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    from tests.fakes.mcp_servers import ServerProcess

    per_minute = 60
    admitted = {"n": 0}
    async with ServerProcess("wiki") as wiki:
        leader = await suite.leader()
        await _ctl(leader, "mcp", "add", "wiki-rate", "--url", wiki.url,
                   "--rate", str(per_minute))  # fmt: skip
        await _ctl(leader, "mcp", "grant", PROJECT, "wiki-rate")
        key = await suite.new_key("mcp-rate")
        headers = {"Authorization": f"Bearer {key.secret}"}
        cps = suite.cluster.control_planes
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:

            async def call(cp: ControlPlane, i: int) -> bool:
                """True when the call was let through, False when the rate refused it."""
                async with Client(
                    streamable_http_client(cp.http_url + "/mcp", http_client=http), mode="legacy"
                ) as c:
                    try:
                        got = await c.call_tool("wiki-rate.search", {"q": f"q{i}"})
                    except MCPError as e:
                        assert e.error.code == -32001, e.error
                        assert f"at most {per_minute} calls a minute" in e.error.message
                        return False
                    assert not got.is_error, got
                    admitted["n"] += 1
                    return True

            async def listed_everywhere() -> bool:
                for cp in cps:
                    async with Client(
                        streamable_http_client(cp.http_url + "/mcp", http_client=http),
                        mode="legacy",
                    ) as c:
                        if "wiki-rate.search" not in {t.name for t in (await c.list_tools()).tools}:
                            return False
                return True

            await wait_until(listed_everywhere, timeout_s=30, what="the tool on every cp")
            began = time.monotonic()
            # The minute's allowance, spent through the first control plane alone.
            spent = 0
            while await call(cps[0], spent):
                spent += 1
            assert per_minute <= spent <= per_minute + 2, spent
            # The other two refuse as well, once they have heard (a sync, about a second);
            # kept apart, each would have let its own 60 through.
            for cp in cps[1:]:
                await wait_until(lambda cp=cp: _not(call(cp, 0)), timeout_s=10,
                                 what=f"the spent rate refused on {cp.name}")  # fmt: skip
            # Calls spread over the three for a while.
            i = 0
            while time.monotonic() - began < 12.0:
                await call(cps[i % 3], i)
                i += 1
            took_s = time.monotonic() - began
        await _ctl(leader, "mcp", "remove", "wiki-rate", "--yes")
    allowance = per_minute + per_minute / 60 * took_s
    # What slips is what the others let through before a sync told them, a few calls
    # each; kept apart, the three would have let through three allowances.
    print(f"\nmcp --rate {per_minute}/min over three cps: {admitted['n']} let through in"
          f" {took_s:.1f} s ({i} spread calls); one allowance is {allowance:.0f}")  # fmt: skip
    assert admitted["n"] <= allowance + 3 * 10, (admitted, allowance, i)


async def _not(aw: Awaitable[bool]) -> bool:
    return not await aw


async def test_a_batch_uploaded_through_haproxy_completes_across_a_kill_9_of_the_leader(
    suite: Suite,
):
    """Files and batches on any control plane: the input goes in through the front (to
    whichever control plane HAProxy picks), the leader that runs the batch is killed -9
    half-way, the new leader goes on where it stopped; every line is answered and metered
    once, and the output reads back the same through each control plane."""
    import io

    import openai

    lines_n, model = 400, "sim-batch"
    spec = sim_model(model, replicas=1, args=["--itl-ms", "20"])
    spec.slots = 8
    async with await suite.admin() as admin:
        await admin.put_model(spec, create_only=True)

    async def ready() -> bool:
        async with await suite.admin() as admin:
            return [r.state for r in (await admin.list_replicas(model)).replicas] == ["ready"]

    await wait_until(ready, timeout_s=60, what=f"{model} ready")
    key = await suite.new_key("batch")
    rows = [
        {"custom_id": f"line-{i}", "method": "POST", "url": "/v1/chat/completions",
         "body": {"model": model, "max_tokens": 16,
                  "messages": [{"role": "user", "content": f"question {i}"}]}}
        for i in range(lines_n)
    ]  # fmt: skip
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    front = openai.AsyncOpenAI(base_url=suite.lb.url + "/v1", api_key=key.secret, max_retries=0)
    up = await front.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    # Every control plane serves the file, whichever one took the upload.
    for cp in suite.cluster.control_planes:
        direct = openai.AsyncOpenAI(base_url=cp.http_url + "/v1", api_key=key.secret)
        assert (await direct.files.content(up.id)).content == data, cp.name
        await direct.close()
    batch = await front.batches.create(
        input_file_id=up.id, endpoint="/v1/chat/completions", completion_window="24h"
    )

    async def completed() -> int:
        return (await front.batches.retrieve(batch.id)).request_counts.completed

    await wait_until(lambda: _at_least(completed(), 30), timeout_s=60, what="the batch under way")
    leader = await suite.leader()
    leader.kill()
    await leader.reap()
    before = await completed()
    await suite.cluster.leader(timeout_s=30, other_than=leader)
    await leader.start()

    async def ended():
        b = await front.batches.retrieve(batch.id)
        return b if b.status in ("completed", "failed", "expired", "cancelled") else None

    done = await wait_until(ended, timeout_s=180, interval_s=0.5, what="the batch ended")
    print(f"\nbatch of {lines_n} across a kill -9 of {leader.name}: {before} answered before")
    assert before < lines_n, "the batch ended before the leader was killed"
    assert done.status == "completed", done
    assert done.request_counts.completed == lines_n and done.request_counts.failed == 0
    outputs = set()
    for cp in suite.cluster.control_planes:
        direct = openai.AsyncOpenAI(base_url=cp.http_url + "/v1", api_key=key.secret)
        outputs.add((await direct.files.content(done.output_file_id)).content)
        await direct.close()
    assert len(outputs) == 1, "the output differs between control planes"
    answers = [json.loads(x) for x in outputs.pop().splitlines()]
    ids = [a["custom_id"] for a in answers]
    assert sorted(ids) == sorted(r["custom_id"] for r in rows), f"{len(ids)} lines"
    assert all(a["response"]["status_code"] == 200 for a in answers)
    # Metered once a line: no request answered twice across the handover.
    assert await batch_usage_counts(suite.cluster.store_dsn, batch.id) == {200: lines_n}
    await front.close()
    async with await suite.admin() as admin:
        await admin.remove_model(model)
    await wait_until(suite.full_service, timeout_s=BACK_WITHIN_S, what="full service")


async def _at_least(aw: Awaitable[int], n: int) -> bool:
    return await aw >= n
