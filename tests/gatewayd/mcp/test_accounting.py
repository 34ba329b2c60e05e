"""MCP accounting: a row per call written in batches, and Prometheus series named by the registry."""

from __future__ import annotations

import asyncio
import inspect
import logging
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gatewayd.mcp.accounting import McpCallWriter, McpMetrics
from gatewayd.store import Store
from gatewayd.store.mcp_records import McpCallRow
from llmgw.errors import StoreError

T0 = datetime(2026, 7, 28, 12, tzinfo=UTC)


def _row(i: int = 0, **changes) -> McpCallRow:
    fields = {
        "at": T0 + timedelta(seconds=i),
        "key_id": "key_a",
        "project": "Acme/ml/search",
        "server": "hr",
        "tool": "lookup",
        "status": "ok",
        "latency_ms": 1.5,
        "bytes_in": 120,
        "bytes_out": i,
    }
    fields.update(changes)
    return McpCallRow(**fields)


class FakeStore:
    """Takes call batches, or refuses them while ``down``; ``gate`` holds a write open."""

    def __init__(self) -> None:
        self.batches: list[list[McpCallRow]] = []
        self.down = False
        self.gate: asyncio.Event | None = None

    async def record_mcp_calls(self, rows) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.down:
            raise StoreError("could not write MCP call rows: the database is gone", hint="retry")
        self.batches.append(list(rows))

    @property
    def written(self) -> list[int]:
        return [r.bytes_out for batch in self.batches for r in batch]


# --- the writer ---------------------------------------------------------------------------------


def test_adding_a_row_is_plain_synchronous_code():
    # The hot path must never await the store.
    assert not inspect.iscoroutinefunction(McpCallWriter.add)
    writer = McpCallWriter(FakeStore())  # type: ignore[arg-type]
    assert writer.add(_row()) is None and len(writer) == 1


async def test_many_calls_are_written_in_one_store_call():
    store = FakeStore()
    writer = McpCallWriter(store)  # type: ignore[arg-type]
    for i in range(500):
        writer.add(_row(i))
    assert await writer.flush() == 500
    assert len(store.batches) == 1 and store.written == list(range(500))
    assert await writer.flush() == 0 and len(store.batches) == 1  # no empty write


async def test_a_backlog_is_written_in_bounded_transactions():
    store = FakeStore()
    writer = McpCallWriter(store, rows_per_write=10)  # type: ignore[arg-type]
    for i in range(25):
        writer.add(_row(i))
    await writer.flush()
    assert [len(b) for b in store.batches] == [10, 10, 5] and store.written == list(range(25))


async def test_rows_survive_a_store_outage_in_their_order():
    store = FakeStore()
    store.down = True
    writer = McpCallWriter(store)  # type: ignore[arg-type]
    writer.add(_row(0))
    writer.add(_row(1))
    with pytest.raises(StoreError):
        await writer.flush()
    assert len(writer) == 2 and store.batches == []
    writer.add(_row(2))
    store.down = False
    await writer.flush()
    assert store.written == [0, 1, 2]


async def test_rows_added_during_a_failed_write_come_after_the_batch():
    store = FakeStore()
    store.down, store.gate = True, asyncio.Event()
    writer = McpCallWriter(store)  # type: ignore[arg-type]
    writer.add(_row(0))
    flush = asyncio.create_task(writer.flush())
    await asyncio.sleep(0)  # the write is in flight
    writer.add(_row(1))
    store.gate.set()
    with pytest.raises(StoreError):
        await flush
    store.down, store.gate = False, None
    await writer.flush()
    assert store.written == [0, 1]


async def test_the_buffer_is_bounded_and_drops_the_oldest_with_a_count(caplog):
    store = FakeStore()
    store.down = True
    writer = McpCallWriter(store, max_rows=5)  # type: ignore[arg-type]
    for i in range(8):
        writer.add(_row(i))
    assert len(writer) == 5 and writer.dropped == 3
    store.down = False
    with caplog.at_level(logging.WARNING, logger="gatewayd.mcp.accounting"):
        await writer.flush()
    assert store.written == [3, 4, 5, 6, 7]
    assert "dropped the 3 oldest MCP call rows" in caplog.text


async def test_a_batch_the_store_cannot_take_is_dropped_not_retried_forever(caplog):
    # Guards: one malformed row retried on every flush would stop every later row.
    class Refusing(FakeStore):
        async def record_mcp_calls(self, rows) -> None:
            if any(r.at.tzinfo is None for r in rows):
                raise ValueError("datetime has no timezone")
            await super().record_mcp_calls(rows)

    store = Refusing()
    writer = McpCallWriter(store)  # type: ignore[arg-type]
    writer.add(_row(at=datetime(2026, 1, 1)))
    with caplog.at_level(logging.ERROR, logger="gatewayd.mcp.accounting"):
        assert await writer.flush() == 0
    assert len(writer) == 0 and "dropped 1 MCP call rows" in caplog.text
    writer.add(_row(7))
    await writer.flush()
    assert store.written == [7]


async def test_run_writes_batches_as_they_come_and_close_writes_the_rest():
    store = FakeStore()
    store.gate = asyncio.Event()
    writer = McpCallWriter(store, interval_s=0.001)  # type: ignore[arg-type]
    for i in range(3):
        writer.add(_row(i))
    task = asyncio.create_task(writer.run())
    try:
        while len(writer):  # the batch has left the buffer: the write is in flight
            await asyncio.sleep(0.001)
        writer.add(_row(3))
        store.gate.set()
        while len(store.batches) < 2:
            await asyncio.sleep(0.001)
        assert [len(b) for b in store.batches] == [3, 1]
        writer.add(_row(4))
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await writer.close()
    assert store.written == [0, 1, 2, 3, 4]


async def test_a_stop_during_a_write_neither_loses_nor_repeats_the_batch():
    store = FakeStore()
    store.gate = asyncio.Event()
    writer = McpCallWriter(store, interval_s=0.001)  # type: ignore[arg-type]
    writer.add(_row(1))
    task = asyncio.create_task(writer.run())
    while len(writer):
        await asyncio.sleep(0.001)
    writer.add(_row(2))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.gate.set()
    await writer.close()
    assert store.written == [1, 2]


async def test_close_with_the_store_down_reports_what_is_lost(caplog):
    store = FakeStore()
    store.down = True
    writer = McpCallWriter(store)  # type: ignore[arg-type]
    writer.add(_row())
    with caplog.at_level(logging.ERROR, logger="gatewayd.mcp.accounting"):
        await writer.close()
    assert "lost 1 MCP call rows at shutdown" in caplog.text


async def test_written_calls_reach_the_real_store(store: Store):
    writer = McpCallWriter(store)
    for i in range(30):
        writer.add(_row(i, status="tool_error" if i % 10 == 0 else "ok"))
    await writer.close()
    rows = await store.list_mcp_calls(server="hr")
    assert len(rows) == 30
    assert sorted(r.bytes_out for r in rows) == list(range(30))
    assert sum(r.status == "tool_error" for r in rows) == 3


# --- the metrics --------------------------------------------------------------------------------

KNOWN = {("hr", "lookup"), ("llmgw:admin", "list_nodes")}


def _known(server: str, tool: str) -> bool:
    if not tool:
        return any(s == server for s, _ in KNOWN)
    return (server, tool) in KNOWN


def _samples(registry: CollectorRegistry) -> dict[str, list]:
    """Every sample of the /metrics text, parsed as Prometheus reads it."""
    text = generate_latest(registry).decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_calls_are_counted_by_server_tool_and_status_and_timed_by_server():
    registry = CollectorRegistry()
    metrics = McpMetrics(registry, _known)
    metrics.observe("hr", "lookup", "ok", 0.0004)
    metrics.observe("hr", "lookup", "ok", 0.002)
    metrics.observe("hr", "lookup", "timeout", 30.0)
    metrics.observe("llmgw:admin", "list_nodes", "ok", 0.01)
    samples = _samples(registry)
    calls = {
        (s.labels["server"], s.labels["tool"], s.labels["status"]): s.value
        for s in samples["llmgw_mcp_calls_total"]
    }
    assert calls == {
        ("hr", "lookup", "ok"): 2,
        ("hr", "lookup", "timeout"): 1,
        ("llmgw:admin", "list_nodes", "ok"): 1,
    }
    counts = {s.labels["server"]: s.value for s in samples["llmgw_mcp_call_seconds_count"]}
    assert counts == {"hr": 3, "llmgw:admin": 1}
    # Sub-millisecond buckets: an instant tool's 0.4 ms lands below 0.5 ms.
    le = {
        s.labels["le"]: s.value
        for s in samples["llmgw_mcp_call_seconds_bucket"]
        if s.labels["server"] == "hr"
    }
    assert le["0.0001"] == 0 and le["0.0005"] == 1 and le["+Inf"] == 3


def test_made_up_servers_and_tools_are_counted_as_unknown_and_add_no_series():
    # Guards: a caller naming a thousand invented tools would grow a thousand series.
    registry = CollectorRegistry()
    metrics = McpMetrics(registry, _known)
    for i in range(50):
        metrics.observe(f"invented-{i}", "lookup", "not_found", 0.0001)
        metrics.observe("hr", f"made_up_{i}", "not_found", 0.0001)
    metrics.observe("", "", "not_found", 0.0001)
    text = generate_latest(registry).decode()
    assert "invented" not in text and "made_up" not in text
    calls = {
        (s.labels["server"], s.labels["tool"]): s.value
        for s in _samples(registry)["llmgw_mcp_calls_total"]
    }
    assert calls == {("unknown", "unknown"): 51, ("hr", "unknown"): 50}


def test_the_metrics_share_the_gateways_registry_beside_its_own_series():
    from gatewayd.gateway.metering.metrics import GatewayMetrics

    gateway = GatewayMetrics(known=lambda name: name == "chat")
    McpMetrics(gateway.registry, _known).observe("hr", "lookup", "ok", 0.001)
    gateway.observe("chat", 200, 0.2, 0.0003)
    samples = _samples(gateway.registry)
    assert samples["llmgw_mcp_calls_total"][0].value == 1
    assert "llmgw_requests_total" in samples
