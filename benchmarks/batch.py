"""Benchmark: a 10,000-request batch beside interactive load at 100 req/s, over sim replicas.

A whole cluster on this machine as a user runs it: ``llmgw up`` (gatewayd and
a local agent, each a process of its own) under a temporary LLMGW_HOME, on
free ports of 127.0.0.1, serving one ``sim`` chat model whose replicas take a
fixed time per request (``--ttft-ms`` + ``--tokens`` × ``--itl-ms``) and run
``--slots`` requests at once each: the replicas' capacity is known, replicas
× slots / service time, and checked against the service time measured at
idle. server.yaml gets a second admission band below the default one
(``bulk``, ``--batch-ceiling`` of the slots): the lowest band, where batch
requests wait for room.

Three windows of the same open-loop interactive load (``--rate`` chat
requests a second through the gateway, a key of the default band):

1. interactive alone, before;
2. beside the batch: ``--requests`` chat requests uploaded with ``POST
   /v1/files`` and run with ``POST /v1/batches``; the window opens once the
   batch is running and closes ``--window-s`` later, while it still runs;
3. interactive alone, after (with 1, the noise between two quiet windows).

Figures: the interactive p50/p99 of each window; the batch's requests
answered per second in window 2 (from its counts, polled every 0.2 s), as a
share of the replicas' capacity, and with the interactive requests as the
replicas' use; the batch's rate over its whole run (10 % to 90 % answered)
and how it ended; gatewayd's CPU over each window. gatewayd's memory (its
RSS, sampled every 0.2 s): just before and just after the upload, as 10, 50
and 90 % were answered, its peak and median from the upload to the batch's
end, and ``AFTER_S`` after it ended, with the input file's size: the runner
reads the input from the store a window at a time, so the leader's RSS
should stay flat however big the batch is.

Printed, never judged: ``python benchmarks/batch.py [--requests 10000]
[--rate 100] [--json batch.json]``. Exit status 0 when the batch completed
with every request answered and no interactive request failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gatewayd.gateway.routing.engine_access import replica_key
from llmgw.admin_client import AdminClient
from llmgw.cli.ctl.bench_load import machine, percentile
from llmgw.config import BandConfig, dump_yaml, load_server_config
from llmgw.errors import LlmgwError
from llmgw.fsutil import write_atomic
from llmgw.paths import Paths
from proto.llmgw.v1 import ModelProfile, ModelSpec

MODEL = "bench-chat"
PROJECT = "bench/load/batch"
START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 60.0
POLL_S = 0.2
IDLE_SAMPLES = 30
# gatewayd's RSS is read this often; "after" is read this long after the batch ended (its
# last requests' buffers freed, before the next window's load starts).
RSS_EVERY_S = 0.2
AFTER_S = 3.0
MB = 10**6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the cluster: llmgw up with a sim model ------------------------------------------


@dataclass
class Cluster:
    paths: Paths
    up: subprocess.Popen
    http: str
    env: dict[str, str]

    def gatewayd(self) -> psutil.Process | None:
        for child in psutil.Process(self.up.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "server" in child.cmdline()[-1:]:
                    return child
        return None

    def stop(self) -> None:
        if self.up.poll() is None:
            self.up.send_signal(signal.SIGTERM)
            try:
                self.up.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.up.kill()
                self.up.wait()


def start_cluster(workdir: Path, args, input_bytes: int) -> Cluster:
    paths = Paths.under(workdir / "home")
    env = dict(os.environ)
    env["LLMGW_HOME"] = str(paths.home)
    # Everything here runs as whoever runs the benchmark, root on a throwaway VM too.
    env.setdefault("LLMGW_ALLOW_ROOT_ENGINES", "1")
    ports = {name: free_port() for name in ("agent", "admin", "http", "metrics")}
    init = [sys.executable, "-m", "llmgw", "server", "init", "--host", "localhost"]
    init += [f"--{name}-port={port}" for name, port in ports.items()]
    init += ["--no-starter", "--no-project"]
    subprocess.run(init, env=env, check=True, capture_output=True)
    cfg = load_server_config(paths.server_yaml)
    # Batches run in the lowest band: bulk, below the default band of the interactive key.
    cfg.router.admission.bands = [
        BandConfig(name="default", priority=100),
        BandConfig(
            name="bulk", priority=10, saturation_ceiling=args.batch_ceiling, queue_ttl=600.0
        ),
    ]
    cfg.batches.max_in_flight = args.batch_in_flight
    cfg.batches.headroom_sigmas = args.headroom_sigmas
    # A big batch must pass the caps on one upload and one batch (200 MB, 50,000 requests
    # by default): raised to fit it, never lowered.
    cfg.files.max_bytes = max(cfg.files.max_bytes, input_bytes)
    cfg.batches.max_requests = max(cfg.batches.max_requests, args.requests)
    cfg.batches.max_queued_bytes_per_project = max(
        cfg.batches.max_queued_bytes_per_project, input_bytes
    )
    write_atomic(paths.server_yaml, dump_yaml(cfg))
    log = (workdir / "up.log").open("wb")
    up = subprocess.Popen(
        [sys.executable, "-m", "llmgw", "up"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    return Cluster(paths, up, f"http://127.0.0.1:{ports['http']}", env)


async def until(what: str, check, cluster: Cluster, timeout_s: float = START_TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cluster.up.poll() is not None:
            raise LlmgwError(f"llmgw up exited while waiting for {what}")
        with contextlib.suppress(LlmgwError):
            value = await check()
            if value:
                return value
        await asyncio.sleep(0.2)
    raise LlmgwError(f"gave up after {timeout_s:g} s waiting for {what}")


def sim_spec(args) -> ModelSpec:
    sim_args = ["--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms)]
    sim_args += ["--tokens", str(args.tokens)]
    return ModelSpec(
        name=MODEL,
        source="/models/none.gguf",
        profiles=[ModelProfile(name="default", engine="sim", args=sim_args, startup_timeout_s=60)],
        replicas_min=args.replicas,
        replicas_max=args.replicas,
        slots=args.slots,
    )


async def prepare(cluster: Cluster, args) -> tuple[str, str, list[str], str]:
    """The model ready; (interactive key, batch key, replica endpoints, engine key)."""
    async with AdminClient.from_paths(cluster.paths) as admin:

        async def nodes_ready():
            return [n.state for n in (await admin.list_nodes()).nodes] == ["ready"]

        await until("the local node", nodes_ready, cluster)
        await admin.put_model(sim_spec(args), create_only=True)

        async def replicas_ready():
            ready = [r for r in (await admin.list_replicas(MODEL)).replicas if r.state == "ready"]
            return ready if len(ready) == args.replicas else None

        ready = await until("the sim replicas", replicas_ready, cluster)
        await admin.create_tenant("project", PROJECT, parents=True)
        interactive = await admin.create_key(PROJECT, name="interactive")
        batch = await admin.create_key(PROJECT, name="batch")
    # The first replica asked at its door with its own key, as the gateway asks it.
    secret = (cluster.paths.secrets_dir / "engine-key").read_text().strip()
    engine_key = replica_key(secret, ready[0].replica_id, ready[0].restarts, 0)
    return interactive.secret, batch.secret, [r.endpoint for r in ready], engine_key


# ---- the loads ------------------------------------------------------------------------


def chat_body(i: int) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": f"question {i}"}]}


@dataclass
class Window:
    """One window of interactive load: what was asked and what came back."""

    rate: int
    seconds: float
    latency_s: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    sent: int = 0
    lag_s: list[float] = field(default_factory=list)
    gateway_cpu_s: float | None = None

    def figures(self) -> dict:
        failed = sum(self.failures.values())
        ms = [v * 1000 for v in self.latency_s]
        return {
            "rate": self.rate,
            "seconds": self.seconds,
            "sent": self.sent,
            "failed": failed,
            "failures": self.failures,
            "p50_ms": _round(percentile(ms, 50)),
            "p90_ms": _round(percentile(ms, 90)),
            "p99_ms": _round(percentile(ms, 99)),
            "max_ms": _round(max(ms, default=None)),
            "load_lag_p99_ms": _round(percentile([v * 1000 for v in self.lag_s], 99)),
            "gatewayd_cpu_pct": None
            if self.gateway_cpu_s is None
            else round(self.gateway_cpu_s / self.seconds * 100, 1),
        }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


async def _one(http: aiohttp.ClientSession, url: str, headers: dict, body: bytes, w: Window):
    t0 = time.perf_counter()
    why = ""
    try:
        async with http.post(url, data=body, headers=headers) as resp:
            await resp.read()
            if resp.status != 200:
                why = str(resp.status)
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        why = e.__class__.__name__
    if why:
        w.failures[why] = w.failures.get(why, 0) + 1
    else:
        w.latency_s.append(time.perf_counter() - t0)


async def interactive(
    http: aiohttp.ClientSession, base: str, key: str, rate: int, seconds: float, cluster: Cluster
) -> Window:
    """``rate`` chat requests a second for ``seconds``, open loop, through the gateway."""
    w = Window(rate, seconds)
    url = f"{base}/v1/chat/completions"
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    gw = cluster.gatewayd()
    cpu0 = _cpu(gw)
    n = max(1, round(rate * seconds))
    start = time.perf_counter() + 0.01
    tasks = []
    for i in range(n):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0.0005:
            await asyncio.sleep(delay)
        w.lag_s.append(max(0.0, time.perf_counter() - due))
        body = json.dumps(chat_body(i)).encode()
        tasks.append(asyncio.create_task(_one(http, url, headers, body, w)))
        w.sent += 1
    await asyncio.gather(*tasks)
    cpu1 = _cpu(gw)
    if cpu0 is not None and cpu1 is not None:
        w.gateway_cpu_s = cpu1 - cpu0
    return w


def _cpu(p: psutil.Process | None) -> float | None:
    if p is None:
        return None
    with contextlib.suppress(psutil.Error):
        t = p.cpu_times()
        return t.user + t.system
    return None


async def idle_service_s(http: aiohttp.ClientSession, endpoint: str, engine_key: str) -> float:
    """The median time one request takes straight at a replica with nothing else running."""
    headers = {"authorization": f"Bearer {engine_key}", "content-type": "application/json"}
    times = []
    for i in range(IDLE_SAMPLES):
        t0 = time.perf_counter()
        async with http.post(
            f"{endpoint}/v1/chat/completions", json=chat_body(i), headers=headers
        ) as resp:
            await resp.read()
            resp.raise_for_status()
        times.append(time.perf_counter() - t0)
    return percentile(times, 50) or 0.0


def batch_input(n: int) -> bytes:
    """The batch's input file: ``n`` chat requests, one JSON line each."""
    lines = (
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": chat_body(i),
        }
        for i in range(n)
    )
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def upload_timeout_s(n: int) -> float:
    """How long the upload and the batch's creation may take: the gateway reads and checks
    every line, 100,000 of them in seconds; 60 s and 1 s more per 500 lines is far above."""
    return 60.0 + n / 500


async def create_batch(
    http: aiohttp.ClientSession, base: str, key: str, data: bytes, n: int
) -> str:
    headers = {"authorization": f"Bearer {key}"}
    timeout = aiohttp.ClientTimeout(total=upload_timeout_s(n))
    form = aiohttp.FormData()
    form.add_field("purpose", "batch")
    form.add_field("file", data, filename="requests.jsonl", content_type="application/jsonl")
    async with http.post(f"{base}/v1/files", data=form, headers=headers, timeout=timeout) as resp:
        f = await resp.json()
        if resp.status != 200:
            raise LlmgwError(f"the upload was refused: {f}")
    request = {
        "input_file_id": f["id"],
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    async with http.post(
        f"{base}/v1/batches", json=request, headers=headers, timeout=timeout
    ) as resp:
        made = await resp.json()
        if resp.status != 200:
            raise LlmgwError(f"the batch was refused: {made}")
    return made["id"]


@dataclass
class Progress:
    """The batch's answered count over time, as GetBatch says it."""

    samples: list[tuple[float, int]] = field(default_factory=list)
    status: str = ""
    total: int = 0
    completed: int = 0
    failed: int = 0

    def at(self, t: float) -> int:
        """Requests answered by ``t`` (the last sample at or before it)."""
        done = 0
        for ts, d in self.samples:
            if ts > t:
                break
            done = d
        return done

    def when(self, done: int) -> float | None:
        """The first sample with at least ``done`` answered."""
        return next((ts for ts, d in self.samples if d >= done), None)


async def follow(admin: AdminClient, batch_id: str, p: Progress, finished: asyncio.Event) -> None:
    while True:
        view = await admin.get_batch(batch_id)
        c = view.request_counts
        p.status, p.total = view.status, c.total if c else 0
        p.completed, p.failed = (c.completed, c.failed) if c else (0, 0)
        p.samples.append((time.perf_counter(), p.completed + p.failed))
        if view.status in ("completed", "failed", "expired", "cancelled"):
            finished.set()
            return
        await asyncio.sleep(POLL_S)


@dataclass
class Rss:
    """gatewayd's resident memory over time, read every ``RSS_EVERY_S``."""

    samples: list[tuple[float, int]] = field(default_factory=list)

    def between(self, t0: float, t1: float) -> list[int]:
        return [rss for ts, rss in self.samples if t0 <= ts <= t1]

    def at(self, t: float | None) -> int | None:
        """The last sample at or before ``t``."""
        if t is None:
            return None
        return next((rss for ts, rss in reversed(self.samples) if ts <= t), None)


def _rss(p: psutil.Process | None) -> int | None:
    if p is None:
        return None
    with contextlib.suppress(psutil.Error):
        return p.memory_info().rss
    return None


async def sample_rss(p: psutil.Process | None, rss: Rss) -> None:
    while True:
        value = _rss(p)
        if value is not None:
            rss.samples.append((time.perf_counter(), value))
        await asyncio.sleep(RSS_EVERY_S)


def batch_timeout_s(args) -> float:
    """How long the batch may take to end: ``--batch-timeout-s``, else 10 minutes and 1 s
    more per 25 requests (a rate far below the replicas' 300 req/s by default), so a
    100,000-request batch is given 70 minutes."""
    if args.batch_timeout_s is not None:
        return args.batch_timeout_s
    return 600.0 + args.requests / 25


# ---- the run ---------------------------------------------------------------------------


async def run(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-batch-") as tmp:
        data = batch_input(args.requests)
        cluster = start_cluster(Path(tmp), args, len(data))
        try:
            return await measure(cluster, args, data)
        except BaseException:
            log = Path(tmp) / "up.log"
            if log.exists():
                print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
            raise
        finally:
            cluster.stop()


async def measure(cluster: Cluster, args, data: bytes) -> dict:
    say = (lambda *a: None) if args.quiet else (lambda *a: print("bench:", *a, file=sys.stderr))
    say("starting llmgw up and the sim replicas")
    ikey, bkey, endpoints, engine_key = await prepare(cluster, args)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    async with (
        aiohttp.ClientSession(timeout=timeout, connector=connector) as http,
        AdminClient.from_paths(cluster.paths) as admin,
    ):
        service_s = await idle_service_s(http, endpoints[0], engine_key)
        nominal_s = (args.ttft_ms + args.tokens * args.itl_ms) / 1000
        slots = args.replicas * args.slots
        capacity = slots / service_s
        say(f"service time at idle {service_s * 1000:.1f} ms: capacity {capacity:.0f} req/s")
        # A second of load not counted: connections made, code paths warm.
        await interactive(http, cluster.http, ikey, args.rate, 1.0, cluster)
        say(f"interactive alone at {args.rate}/s for {args.window_s:g} s")
        before = await interactive(http, cluster.http, ikey, args.rate, args.window_s, cluster)

        rss = Rss()
        sampler = asyncio.create_task(sample_rss(cluster.gatewayd(), rss))
        await asyncio.sleep(2 * RSS_EVERY_S)
        deadline = time.monotonic() + batch_timeout_s(args)
        rss_before = _rss(cluster.gatewayd())
        say(f"uploading a batch of {args.requests:,} requests ({len(data) / MB:.1f} MB)")
        t_upload = time.perf_counter()
        batch_id = await create_batch(http, cluster.http, bkey, data, args.requests)
        rss_uploaded = _rss(cluster.gatewayd())
        progress, finished = Progress(), asyncio.Event()
        follower = asyncio.create_task(follow(admin, batch_id, progress, finished))
        # The window opens once the batch runs at its pace (2 % answered).
        warm = max(1, args.requests // 50)
        while progress.at(time.perf_counter()) < warm and not finished.is_set():
            if time.monotonic() > deadline or follower.done():
                _gave_up(follower, "the batch to start", batch_timeout_s(args))
            await asyncio.sleep(POLL_S)
        say(f"interactive beside the batch for {args.window_s:g} s")
        t_open = time.perf_counter()
        done_open = progress.samples[-1][1] if progress.samples else 0
        beside = await interactive(http, cluster.http, ikey, args.rate, args.window_s, cluster)
        t_close = time.perf_counter()
        done_close = progress.samples[-1][1] if progress.samples else 0
        ended_inside = finished.is_set()
        say("waiting for the batch to finish")
        try:
            await asyncio.wait_for(finished.wait(), max(1.0, deadline - time.monotonic()))
        except TimeoutError:
            _gave_up(follower, "the batch to end", batch_timeout_s(args))
        await follower
        t_end = progress.samples[-1][0]
        await asyncio.sleep(AFTER_S)
        rss_after = _rss(cluster.gatewayd())
        sampler.cancel()
        say(f"interactive alone again for {args.window_s:g} s")
        after = await interactive(http, cluster.http, ikey, args.rate, args.window_s, cluster)

    batch_rps = (done_close - done_open) / (t_close - t_open)
    during = rss.between(t_upload, t_end)
    interactive_rps = len(beside.latency_s) / args.window_s
    t10, t90 = progress.when(args.requests // 10), progress.when(args.requests * 9 // 10)
    # After the window the batch has the replicas to itself, up to its last 5 % (its tail
    # runs out of requests to fill the slots with).
    t95 = progress.when(args.requests * 95 // 100)
    alone_rps = (
        (progress.at(t95) - done_close) / (t95 - t_close)
        if t95 is not None and t95 - t_close >= 2.0
        else None
    )
    whole_rps = (
        round(args.requests * 0.8 / (t90 - t10), 1)
        if t10 is not None and t90 and t90 > t10
        else None
    )
    return {
        "machine": machine(),
        "settings": {
            "requests": args.requests,
            "rate": args.rate,
            "window_s": args.window_s,
            "replicas": args.replicas,
            "slots": args.slots,
            "ttft_ms": args.ttft_ms,
            "itl_ms": args.itl_ms,
            "tokens": args.tokens,
            "batch_ceiling": args.batch_ceiling,
            "batch_in_flight": args.batch_in_flight,
        },
        "capacity": {
            "slots": slots,
            "service_ms_nominal": round(nominal_s * 1000, 2),
            "service_ms_idle": round(service_s * 1000, 2),
            "capacity_rps_nominal": round(slots / nominal_s, 1),
            "capacity_rps": round(capacity, 1),
        },
        "interactive_before": before.figures(),
        "interactive_beside": beside.figures(),
        "interactive_after": after.figures(),
        "batch": {
            "id": batch_id,
            "status": progress.status,
            "total": progress.total,
            "completed": progress.completed,
            "failed": progress.failed,
            "rps_in_window": round(batch_rps, 1),
            "share_of_capacity_pct": round(batch_rps / capacity * 100, 1),
            "replicas_used_pct": round((batch_rps + interactive_rps) / capacity * 100, 1),
            "share_of_room_left_pct": round(batch_rps / (capacity - interactive_rps) * 100, 1)
            if capacity > interactive_rps
            else None,
            "rps_10_to_90_pct": whole_rps,
            "rps_alone": None if alone_rps is None else round(alone_rps, 1),
            "alone_share_of_capacity_pct": None
            if alone_rps is None
            else round(alone_rps / capacity * 100, 1),
            "ended_inside_window": ended_inside,
            "seconds": round(t_end - t_upload, 1),
        },
        "memory": {
            "input_bytes": len(data),
            "gatewayd_rss_before_mb": _mb(rss_before),
            "gatewayd_rss_during_peak_mb": _mb(max(during, default=None)),
            "gatewayd_rss_during_median_mb": _mb(percentile(during, 50)),
            "gatewayd_rss_after_mb": _mb(rss_after),
            # Where the growth came from: taking the upload in, or running the batch.
            "gatewayd_rss_after_upload_mb": _mb(rss_uploaded),
            # Flat, or creeping with the lines read: its RSS as 10, 50 and 90 % were answered.
            **{
                f"gatewayd_rss_at_{pct}_pct_mb": _mb(
                    rss.at(progress.when(args.requests * pct // 100))
                )
                for pct in (10, 50, 90)
            },
            "after_s": AFTER_S,
            "samples_during": len(during),
        },
    }


def _mb(v: float | None) -> float | None:
    return None if v is None else round(v / MB, 1)


def _gave_up(follower: asyncio.Task, what: str, timeout_s: float) -> NoReturn:
    """Raise why waiting for ``what`` stopped: the follower's error, or the timeout."""
    if follower.done() and follower.exception() is not None:
        raise LlmgwError(f"following the batch failed while waiting for {what}") from (
            follower.exception()
        )
    follower.cancel()
    raise LlmgwError(
        f"gave up after {timeout_s:g} s waiting for {what}: raise --batch-timeout-s "
        "or lower --requests"
    )


def render(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console()
    cap, b = report["capacity"], report["batch"]
    out.print(
        f"Replicas: {report['settings']['replicas']} × {report['settings']['slots']} slots, "
        f"{cap['service_ms_idle']} ms a request at idle ({cap['service_ms_nominal']} nominal): "
        f"capacity {cap['capacity_rps']} req/s ({cap['capacity_rps_nominal']} nominal)"
    )
    t = Table(title="Interactive requests (ms)", title_justify="left")
    for col in ("window", "sent", "failed", "p50", "p90", "p99", "max", "gw CPU%"):
        t.add_column(col, justify="right" if col != "window" else "left")
    for name in ("before", "beside", "after"):
        f = report[f"interactive_{name}"]
        label = "beside batch" if name == "beside" else name
        t.add_row(
            label,
            str(f["sent"]),
            str(f["failed"]),
            *(str(f[k]) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "gatewayd_cpu_pct")),
        )
    out.print(t)
    out.print(
        f"Batch {b['id']}: {b['status']}, {b['completed']:,} completed and {b['failed']:,} failed "
        f"of {b['total']:,}. Beside the interactive load: {b['rps_in_window']} req/s, "
        f"{b['share_of_capacity_pct']} % of the capacity ({b['share_of_room_left_pct']} % of the "
        f"room the interactive load left; replicas {b['replicas_used_pct']} % used). "
        f"Over its run (10–90 %): {b['rps_10_to_90_pct']} req/s; alone after the window "
        f"(to 95 %): {b['rps_alone']} req/s, {b['alone_share_of_capacity_pct']} % of the capacity."
    )
    if b["ended_inside_window"]:
        out.print("[yellow]The batch ended inside the window: its rate there is too low.[/yellow]")
    m = report["memory"]
    t = Table(
        title=f"gatewayd RSS (MB), input file {m['input_bytes'] / MB:.1f} MB, "
        f"batch {b['seconds']:g} s from upload to end",
        title_justify="left",
    )
    columns = {
        "before": "before upload",
        "after_upload": "uploaded",
        "at_10_pct": "10 % answered",
        "at_50_pct": "50 %",
        "at_90_pct": "90 %",
        "during_peak": "peak",
        "during_median": "median",
        "after": f"after (+{m['after_s']:g} s)",
    }
    for col in columns.values():
        t.add_column(col, justify="right")
    t.add_row(*(str(m[f"gatewayd_rss_{k}_mb"]) for k in columns))
    out.print(t)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="requests in the batch")
    parser.add_argument("--rate", type=int, default=100, help="interactive requests a second")
    parser.add_argument("--window-s", type=float, default=20.0, help="each interactive window")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--slots", type=int, default=16, help="requests a replica runs at once")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--tokens", type=int, default=10, help="tokens in each answer")
    parser.add_argument(
        "--batch-ceiling",
        type=float,
        default=1.0,
        help="the bulk band's saturation ceiling: batch requests wait above this share of slots",
    )
    parser.add_argument("--batch-in-flight", type=int, default=64, help="batches.max_in_flight")
    parser.add_argument(
        "--headroom-sigmas", type=float, default=3.0, help="batches.headroom_sigmas (0: none)"
    )
    parser.add_argument(
        "--batch-timeout-s",
        type=float,
        help="how long the batch may take to end (default 600 s + 1 s per 25 requests)",
    )
    parser.add_argument("--json", type=Path, help="write the report here too")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    try:
        report = asyncio.run(run(args))
    except LlmgwError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 1
    render(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    b = report["batch"]
    failed = sum(report[f"interactive_{w}"]["failed"] for w in ("before", "beside", "after"))
    ok = b["status"] == "completed" and b["completed"] == args.requests and not failed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
