"""The PostgreSQL store rides through a change of primary under Patroni, with no restart.

Real etcd, two PostgreSQL members under Patroni and HAProxy on loopback
(tests/faults/harness). The store is opened on the DSN a Patroni user writes,
every member listed; then the primary is stopped (or switched over) while the
store writes, and a gatewayd behind HAProxy answers chat completions.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest

from gatewayd.gateway.metering.usage import UsageRow
from gatewayd.store.postgres.connect import DIAL_TIMEOUT_S, Member
from gatewayd.store.postgres.store import COMMAND_TIMEOUT_S, PostgresStore
from llmgw.config import StoreConfig
from llmgw.errors import StoreError
from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster
from tests.faults.harness import PatroniCluster, haproxy, wait_until
from tests.faults.harness.haproxy import behind_haproxy
from tests.faults.harness.patroni import TEST_TTL_S

pytestmark = [
    pytest.mark.faults,
    # Its figures are how long failovers take: measured on a machine it has to itself.
    pytest.mark.alone,
    pytest.mark.postgres,
    pytest.mark.asyncio(loop_scope="module"),
]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# A clean stop hands Patroni's leader key over at once; its ttl bounds the rest.
STORE_BACK_WITHIN_S = TEST_TTL_S + 10
# The longest one write may take while the primary changes: every member dialled
# once, or a statement's own timeout, whichever a dead member costs.
WRITE_BOUND_S = max(2 * DIAL_TIMEOUT_S, COMMAND_TIMEOUT_S) + 2
PROJECT = "Acme/ml/search"
_ids = itertools.count()


@dataclass
class Writes:
    """A steady stream of single-row writes, each kept as it ended: stored, or StoreError."""

    store: PostgresStore
    prefix: str
    ok: list[tuple[str, float]] = field(default_factory=list)  # (row id, when it began)
    # (row id, when it began, the error's words)
    failed: list[tuple[str, float, str]] = field(default_factory=list)
    longest_s: float = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            row_id = f"{self.prefix}-{next(_ids)}"
            row = UsageRow(at=T0, key_id=self.prefix, project=PROJECT, model="m", row_id=row_id)
            began = time.monotonic()
            try:
                await self.store.record_usage([row])
                self.ok.append((row_id, began))
            except StoreError as e:  # anything else fails the test
                self.failed.append((row_id, began, str(e)))
            self.longest_s = max(self.longest_s, time.monotonic() - began)
            await asyncio.sleep(0.05)

    def ok_since(self, t: float) -> list[tuple[str, float]]:
        return [w for w in self.ok if w[1] >= t]

    def outage_s(self, since: float) -> float:
        """From the first write refused after ``since`` to the first stored after that."""
        refused = [w[1] for w in self.failed if w[1] >= since]
        if not refused:
            return 0.0
        return self.ok_since(refused[0])[0][1] - refused[0]


async def _stored_ids(patroni: PatroniCluster, prefix: str) -> set[str]:
    primary = await patroni.wait_primary()
    conn = await asyncpg.connect(patroni.members[primary].dsn(patroni.database))
    try:
        rows = await conn.fetch("SELECT row_id FROM usage_rows WHERE key_id = $1", prefix)
    finally:
        await conn.close()
    return {r["row_id"] for r in rows}


async def _gatewayd_connections(patroni: PatroniCluster, name: str) -> int:
    conn = await asyncpg.connect(patroni.members[name].dsn())
    try:
        return await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'llmgw-gatewayd'"
        )
    finally:
        await conn.close()


def _member(patroni: PatroniCluster, name: str) -> Member:
    return Member("127.0.0.1", patroni.members[name].pg_port)


async def _whole_again(patroni: PatroniCluster, stopped: str) -> None:
    """The next test finds every member running: the stopped one rejoins as a replica."""
    await patroni.start_member(stopped)
    await patroni.wait_replicas_streaming()


async def _writing_through(patroni: PatroniCluster, prefix: str, fault) -> tuple[Writes, float]:
    """Write steadily, apply ``fault`` (a coroutine function), wait for writes to succeed
    again; the writes and how long they were refused."""
    store = PostgresStore(patroni.dsn())
    await store.open()
    writes, stop = Writes(store, prefix), asyncio.Event()
    task = asyncio.create_task(writes.run(stop))
    try:
        await wait_until(lambda: len(writes.ok) >= 10, timeout_s=30, what="writes before")
        began = time.monotonic()
        await fault()
        # The fault has run its course (the old primary is down, or demoted): writes
        # stored from now on went to the new one.
        after = time.monotonic()
        await wait_until(
            lambda: len(writes.ok_since(after)) >= 10,
            timeout_s=STORE_BACK_WITHIN_S + 30,
            what="writes after the primary changed",
        )
        back_s = writes.outage_s(began)
    finally:
        stop.set()
        await task
    stored = await _stored_ids(patroni, prefix)
    # None lost silently: every write said to have succeeded is there.
    assert {row_id for row_id, _ in writes.ok} <= stored
    # And nothing is there that was never written.
    assert stored <= {w[0] for w in writes.ok} | {w[0] for w in writes.failed}
    assert writes.longest_s < WRITE_BOUND_S, writes.longest_s
    return writes, back_s


async def test_a_store_on_every_member_writes_on_the_new_primary_once_the_old_ones_patroni_stops(
    patroni: PatroniCluster,
):
    # Guards a control plane that had to be restarted after a failover: its pool kept
    # dead connections to the old primary, or a connect that never looked further.
    old = await patroni.wait_primary()

    async def stop_primary() -> None:
        await patroni.stop_primary()

    writes, back_s = await _writing_through(patroni, "stop", stop_primary)
    try:
        new = await patroni.wait_primary()
        assert new != old
        assert writes.store.member == _member(patroni, new)
        # The writes between are refused as StoreError, in words, never as a raw driver error.
        assert writes.failed, "the primary went away under no write at all"
        assert all("could not write 1 usage rows in PostgreSQL" in w[2] for w in writes.failed)
        assert back_s < STORE_BACK_WITHIN_S
        # What an operator asks, as docs/ha.md says to.
        listed = json.loads(await patroni.patronictl("list", "-f", "json"))
        assert {m["Member"]: m["Role"] for m in listed}[new] == "Leader"
        print(
            f"\nprimary {old} stopped: writes refused for {back_s:.2f} s, then stored on {new};"
            f" {len(writes.failed)} writes refused meanwhile, {len(writes.ok)} stored;"
            f" longest write {writes.longest_s:.2f} s"
        )
    finally:
        await writes.store.close()
        await _whole_again(patroni, old)


async def test_after_a_switchover_the_store_leaves_the_demoted_member_for_the_new_primary(
    patroni: PatroniCluster,
):
    # Guards connections kept or made to the old primary once it runs as a replica:
    # every write there would be refused as read-only for as long as the pool lived.
    old = await patroni.wait_primary()

    async def switchover() -> None:
        await patroni.switchover()

    writes, back_s = await _writing_through(patroni, "switch", switchover)
    try:
        new = await patroni.wait_primary()
        assert new != old
        assert writes.store.member == _member(patroni, new)
        assert back_s < STORE_BACK_WITHIN_S
    finally:
        await writes.store.close()
    # The demoted member back as a replica, listed first: it answers, takes no writes,
    # and a store opened now passes it over and keeps no connection there.
    await patroni.wait_replicas_streaming()
    store = PostgresStore(patroni.dsn(first=old))
    await store.open()
    try:
        row = UsageRow(at=T0, key_id="after", project=PROJECT, model="m", row_id="after-1")
        assert await store.record_usage([row]) == 1
        assert store.member == _member(patroni, new)
        assert await _gatewayd_connections(patroni, new) >= 1
        await wait_until(
            lambda: _no_gatewayd_connections(patroni, old),
            timeout_s=10,
            what=f"no store connection left on the demoted {old}",
        )
    finally:
        await store.close()
    print(
        f"\nswitchover {old} -> {new}: writes refused for {back_s:.2f} s;"
        f" {len(writes.failed)} refused meanwhile, {len(writes.ok)} stored"
    )


async def _no_gatewayd_connections(patroni: PatroniCluster, name: str) -> bool:
    return await _gatewayd_connections(patroni, name) == 0


def _sim_spec() -> ModelSpec:
    return ModelSpec(
        name="chat",
        source="/models/none.gguf",
        replicas_min=1,
        replicas_max=1,
        slots=16,
        profiles=[ModelProfile(name="default", engine="sim", startup_timeout_s=60)],
    )


@dataclass
class Load:
    """Open-loop chat completions through HAProxy, streamed and not, counted by outcome."""

    url: str
    secret: str
    rate_per_s: float = 20.0
    sent: int = 0
    answered: int = 0
    failed: dict[str, int] = field(default_factory=dict)

    async def one(self, client: httpx.AsyncClient, stream: bool) -> None:
        body = {
            "model": "chat",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 4,
            "stream": stream,
        }
        headers = {"authorization": f"Bearer {self.secret}"}
        try:
            async with client.stream(
                "POST", f"{self.url}/v1/chat/completions", json=body, headers=headers
            ) as r:
                text = (await r.aread()).decode()
            if r.status_code != 200:
                why = f"{r.status_code} {text[:120]}"
            elif stream and "data: [DONE]" not in text:
                why = "stream cut before [DONE]"
            elif not stream and '"choices"' not in text:
                why = "an answer without choices"
            else:
                self.answered += 1
                return
        except httpx.HTTPError as e:
            why = f"{type(e).__name__}: {e}"
        self.failed[why] = self.failed.get(why, 0) + 1

    async def run(self, stop: asyncio.Event) -> None:
        interval = 1.0 / self.rate_per_s
        async with httpx.AsyncClient(timeout=30.0) as client:
            pending: set[asyncio.Task] = set()
            next_at = time.monotonic()
            while not stop.is_set():
                # Open loop: one request every interval, whether or not earlier ones ended.
                task = asyncio.create_task(self.one(client, stream=self.sent % 2 == 1))
                pending.add(task)
                task.add_done_callback(pending.discard)
                self.sent += 1
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            await asyncio.gather(*pending)


async def test_a_gatewayd_behind_haproxy_answers_through_a_primary_change_and_accounts_each_once(
    patroni: PatroniCluster, tmp_path
):
    # Guards answers refused, or usage rows lost or doubled, while the store's primary
    # moves: the gateway serves from memory and its usage journal holds the rows.
    dsn = await patroni.create_database("llmgw_gateway")
    async with running_cluster(
        tmp_path, store=StoreConfig(dsn=dsn), configure=behind_haproxy
    ) as cluster:
        await cluster.start_agent("cpu-node")
        async with cluster.admin() as admin:
            await admin.put_model(_sim_spec())
            await admin.create_tenant("project", PROJECT, parents=True)
            key = await admin.create_key(PROJECT)

            async def replica_ready() -> bool:
                rs = (await admin.list_replicas("chat")).replicas
                return bool(rs) and rs[0].state == "ready"

            await wait_until(replica_ready, timeout_s=60, what="the sim replica ready")
        http = f"127.0.0.1:{cluster.server.ports['http']}"
        async with haproxy(tmp_path / "haproxy", [http]) as lb:
            await lb.wait_servers_up(1)
            load, stop = Load(lb.url, key.secret), asyncio.Event()
            task = asyncio.create_task(load.run(stop))
            try:
                await wait_until(lambda: load.answered >= 20, timeout_s=30, what="answers")
                began = time.monotonic()
                old = await patroni.stop_primary()
                new = await patroni.wait_primary(not_name=old, timeout_s=STORE_BACK_WITHIN_S)
                promoted_s = time.monotonic() - began
                store = cluster.server.store
                await wait_until(
                    lambda: store.member == _member(patroni, new),
                    timeout_s=STORE_BACK_WITHIN_S,
                    what="gatewayd's store on the new primary",
                )
                sent_at_change = load.sent
                await wait_until(
                    lambda: load.sent >= sent_at_change + 40, timeout_s=30, what="more load"
                )
            finally:
                stop.set()
                await task
        assert load.failed == {}, load.failed
        assert load.answered == load.sent

        async def accounted() -> list:
            rows = [
                r
                async for r in cluster.server.store.usage_rows(
                    datetime.now(UTC) - timedelta(hours=1),
                    datetime.now(UTC) + timedelta(hours=1),
                    key_id=key.key_id,
                )
            ]
            return rows if len(rows) >= load.answered else []

        rows = await wait_until(accounted, timeout_s=30, what="every answer's usage row stored")
        # Exactly once: as many rows as answers, every one an answered request's.
        assert len(rows) == load.answered
        assert {r.status for r in rows} == {200}
        print(
            f"\nthrough HAProxy: {load.sent} sent, {load.answered} answered, none failed;"
            f" primary {old} -> {new} in {promoted_s:.2f} s; {len(rows)} usage rows"
        )
    await _whole_again(patroni, old)


async def test_a_store_writes_again_once_patroni_replaces_a_primary_that_was_killed(
    patroni: PatroniCluster,
):
    # Guards acknowledged writes lost with a primary that died (power, kill -9): an
    # asynchronous replica promoted without them. The standby is synchronous, so every
    # write the store reported done is on it.
    old = await patroni.wait_primary()

    async def kill_primary() -> None:
        await patroni.stop_primary(kill=True)

    writes, back_s = await _writing_through(patroni, "kill", kill_primary)
    try:
        new = await patroni.wait_primary()
        assert new != old
        assert writes.store.member == _member(patroni, new)
        # Nobody released the leader key: the standby waits out its ttl.
        assert back_s < STORE_BACK_WITHIN_S
        print(
            f"\nprimary {old} killed: writes refused for {back_s:.2f} s, then stored on {new};"
            f" {len(writes.failed)} refused meanwhile, {len(writes.ok)} stored"
        )
    finally:
        # The module's last test: the killed member is left down (a rejoin costs a
        # pg_rewind, seconds no later test needs). A test after this one starts it.
        await writes.store.close()
