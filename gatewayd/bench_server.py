"""The gateway alone in front of one fixed engine: what ``llmgw ctl bench overhead`` measures.

    python -m gatewayd.bench_server --upstream http://127.0.0.1:8001 \\
        --listen 127.0.0.1:0 --mode full --ready-file /tmp/gw.json

It serves the production ASGI app (``make_app`` around ``Gateway``) under
uvicorn as ``llmgw server`` does — uvloop, httptools, one worker, no access
log — but with no cluster behind it: the router's only replica of the model
is ``--upstream``. Nothing else runs in the process, so its CPU time is the
gateway's own. ``/v1/responses`` is served as gatewayd serves it (converted to
a chat completion on its way to the engine).

Modes:

- ``bare``: the least the gateway can do. ``Gateway`` has no switch to turn
  the key check off, so a key is still checked, from memory, but nothing
  has limits, the model is free, no metrics are kept, no usage is written
  and nothing refreshes the keys.
- ``full``: what a deployment does on every request: the key checked
  against a ``KeyCache`` over an SQLite store, refreshed and its last use
  written back as in gatewayd; requests, tokens and a monthly budget set on
  the key, its project, team and organization (high enough never to refuse);
  a priced model, so each answer is costed and charged to the budgets; the
  admission bands; the gateway's metrics; a usage row per request, made
  durable in the usage journal before the answer ends and written in batches.
  ``LLMGW_BENCH_USAGE_JOURNAL=off`` keeps the rows in memory only, as before
  the journal: what the durable usage path costs is the difference.
- ``relay``: no gateway at all, a yardstick: each connection's bytes copied
  to a connection of its own to the engine and back, unread. What it adds is
  the cost of one more process and hop on this machine (the kernel, the
  event loop), which no HTTP gateway in Python can go below; the gateway's
  own cost is what it adds beyond that. The client sends the engine's key.

The engine key comes from ``LLMGW_ENGINE_KEY`` (unset once read). When
listening, it writes ``{"port": …, "key": …, "pid": …}`` to the ready file
(0600, written then renamed), and runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from gatewayd.gateway.metering.journal import UsageJournal
from gatewayd.gateway.metering.metrics import GatewayMetrics
from gatewayd.gateway.metering.usage import UsageWriter
from gatewayd.gateway.policy.bands import BandPools
from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.gateway.policy.limits import Limits
from gatewayd.gateway.policy.pricing import BudgetTable
from gatewayd.gateway.policy.tenancy import ancestors
from gatewayd.gateway.protocol.responses.handler import PREFIX as RESPONSES
from gatewayd.gateway.protocol.responses.handler import Responses
from gatewayd.gateway.proxy import Gateway
from gatewayd.gateway.routing.router import Router, Target
from gatewayd.http.app import make_app
from gatewayd.http.guard import ConnectionBudget, PortGuard
from gatewayd.store import SqliteStore, Store
from llmgw.aio import run_loop
from llmgw.catalog.price import Price
from llmgw.config import AdmissionConfig, ConnectionsConfig

log = logging.getLogger(__name__)

KEY_ENV = "LLMGW_ENGINE_KEY"
# "off": the full mode without the usage journal (rows in memory until written).
JOURNAL_ENV = "LLMGW_BENCH_USAGE_JOURNAL"
MODES = ("bare", "full", "relay")
PROJECT = "bench/overhead/gateway"
# High enough that no benchmark rate is ever refused (2,000 req/s is 120,000 a
# minute), set so that the limiter and the budgets do their arithmetic on each request.
HIGH = Limits(rpm=10_000_000, tpm=1_000_000_000, budget_month_micros=10**15)
# Not free: a free model skips the budget check and the cost.
PRICE = Price(prompt_per_1k=150, completion_per_1k=600)
# The engine's parallel slots, as a replica's would be counted: never the bottleneck.
SLOTS = 4096


@dataclass
class BenchGateway:
    """A gateway made for the benchmark, and what has to run and close beside it."""

    gateway: Gateway
    keys: KeyCache
    store: Store
    secret: str
    background: list[asyncio.Task]
    usage: UsageWriter | None

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        await self.gateway.close()
        if self.usage is not None:
            await self.usage.close()
        await self.store.close()


async def build_gateway(
    mode: str, upstream: str, model: str, engine_key: str, store_path: Path
) -> BenchGateway:
    """The gateway for ``mode``, with one key made for it; the one place to follow Gateway's API.

    ``full`` passes what gatewayd passes (``gatewayd/server.py``): when
    ``Gateway`` takes something new that a deployment uses, it goes here.
    """
    store = SqliteStore(store_path)
    await store.open()
    keys = KeyCache(store)
    await keys.refresh()
    await keys.tenancy.create("project", PROJECT, parents=True)
    target = Target(replica_id="bench-upstream", base_url=upstream.rstrip("/"))
    ready = {model: [target]}
    router = Router(lambda name: ready.get(name, []))
    common = {
        "engine_key": engine_key,
        "models": lambda: [(model, True)],
        "known": ready.__contains__,
    }
    if mode == "bare":
        _, secret = await keys.create(PROJECT, "bench bare", [], 0)
        gateway = Gateway(keys, router, **common)
        await gateway.start()
        gateway.add_route(RESPONSES, Responses(gateway, store))
        return BenchGateway(gateway, keys, store, secret, [], None)

    # Limits at every level of the tree, so that each is looked up and spent.
    for path in ancestors(PROJECT):
        await keys.tenancy.set_limits(path, HIGH)
    _, secret = await keys.create(
        PROJECT,
        "bench full",
        [],
        0,
        rpm=HIGH.rpm,
        tpm=HIGH.tpm,
        budget_month_micros=HIGH.budget_month_micros,
    )
    await keys.refresh()
    journal = None
    if os.environ.get(JOURNAL_ENV, "on") != "off":
        journal = UsageJournal(store_path.parent / "usage-journal")
        await journal.open()
    usage = UsageWriter(store, journal=journal)
    gateway = Gateway(
        keys,
        router,
        **common,
        metrics=GatewayMetrics(known=ready.__contains__),
        prices=lambda _name: PRICE,
        budgets=BudgetTable(),
        bands=BandPools(AdmissionConfig(), lambda _name: SLOTS),
        usage=usage,
    )
    await gateway.start()
    # /v1/responses as gatewayd mounts it (protocol.responses.mount), minus the expiry loop:
    # the benchmark stores nothing.
    gateway.add_route(RESPONSES, Responses(gateway, store))
    # What gatewayd runs beside the gateway: key refresh and last-use writes, usage batches.
    background = [
        asyncio.create_task(keys.run(), name="keys"),
        asyncio.create_task(usage.run(), name="usage"),
    ]
    return BenchGateway(gateway, keys, store, secret, background, usage)


def _bench_protocol():
    cfg = ConnectionsConfig()
    cfg.max_per_address = cfg.max_total
    return PortGuard("http", cfg, ConnectionBudget.for_process(cfg)).http_protocol()


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: ``main`` owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


def _write_ready(path: Path, payload: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, path)


class _Pipe(asyncio.Protocol):
    """One side of a relayed connection: what arrives is written to the other side."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self._early: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self._early.append(data)  # the engine's connection is still being made

    def joined(self, peer: _Pipe) -> None:
        self.peer = peer
        for data in self._early:
            peer.transport.write(data)
        self._early.clear()

    def connection_lost(self, exc) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def serve_relay(host: str, port: int, upstream: str) -> asyncio.Server:
    """A byte relay to ``upstream``: one engine connection per client connection."""
    target = upstream.removeprefix("http://").rstrip("/")
    up_host, _, up_port = target.rpartition(":")
    loop = asyncio.get_running_loop()

    def client() -> _Pipe:
        side = _Pipe()

        async def join() -> None:
            try:
                _, engine = await loop.create_connection(_Pipe, up_host, int(up_port))
            except OSError:
                side.transport.close()
                return
            engine.peer = side
            side.joined(engine)

        loop.create_task(join())
        return side

    return await loop.create_server(client, host, port)


async def serve(args: argparse.Namespace, engine_key: str, stop: asyncio.Event) -> None:
    host, _, port = args.listen.rpartition(":")
    if args.mode == "relay":
        server = await serve_relay(host or "127.0.0.1", int(port), args.upstream)
        bound = server.sockets[0].getsockname()[1]
        _write_ready(args.ready_file, {"port": bound, "key": "", "pid": os.getpid()})
        await stop.wait()
        server.close()
        return
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-") as tmp:
        bench = await build_gateway(
            args.mode, args.upstream, args.model, engine_key, Path(tmp) / "store.db"
        )
        try:
            app = make_app(
                is_leader=lambda: True, routable=lambda: (True, ""), gateway=bench.gateway
            )
            config = uvicorn.Config(
                app,
                host=host or "127.0.0.1",
                port=int(port),
                loop="uvloop",
                # gatewayd's own protocol (uvicorn's httptools with the connection
                # bounds); the per-address bound is lifted: the load is one address.
                http=_bench_protocol(),
                workers=1,
                lifespan="off",
                access_log=False,
                log_level="warning",
                proxy_headers=False,
                server_header=False,
            )
            server = _Uvicorn(config)
            task = asyncio.create_task(server.serve(), name="http")
            while not server.started:
                if task.done():
                    task.result()
                    raise OSError(f"could not listen on {args.listen}")
                await asyncio.sleep(0.01)
            bound = server.servers[0].sockets[0].getsockname()[1]
            _write_ready(args.ready_file, {"port": bound, "key": bench.secret, "pid": os.getpid()})
            log.info("bench gateway (%s) on %s:%s -> %s", args.mode, host, bound, args.upstream)
            await stop.wait()
            server.should_exit = True
            await task
        finally:
            await bench.close()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m gatewayd.bench_server",
        allow_abbrev=False,
        description="The gateway in front of one engine, for llmgw ctl bench overhead.",
    )
    p.add_argument("--upstream", required=True, help="the engine's base URL, without /v1")
    p.add_argument("--model", default="bench", help="the model name the engine serves")
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0 picks one)")
    p.add_argument("--mode", choices=MODES, default="full")
    p.add_argument("--ready-file", type=Path, required=True, help="where to write port and key")
    p.add_argument(
        "--cprofile",
        type=Path,
        help="run under cProfile (CPU time) and write its stats here on exit; "
        "the gateway is then several times slower",
    )
    args = p.parse_args(argv)
    if not args.listen.rpartition(":")[2].isdigit():
        p.error(f"--listen {args.listen!r} is not HOST:PORT")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s bench-gateway: %(message)s")
    # Read once and unset, so nothing started from here inherits it.
    engine_key = os.environ.pop(KEY_ENV, "")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(args, engine_key, stop)

    # Timed by CPU, not the wall: a write that wakes the engine or the client
    # may be preempted by it, and wall time would charge that to the write.
    profiler = cProfile.Profile(time.thread_time) if args.cprofile else None
    if profiler is not None:
        profiler.enable()
    try:
        run_loop(run())
    except OSError as e:
        print(f"bench gateway: {e}", file=sys.stderr)
        return 1
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
