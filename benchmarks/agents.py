"""Benchmark: N simulated agents, each on its own mutual-TLS stream, against one real gatewayd.

What it answers: can one gatewayd hold 1,000 nodes beating every second while
using under half of one core, and does a heartbeat become visible through the
admin API within 1 s?

gatewayd runs as a subprocess (``python -m llmgw server``) so its CPU and
memory are measured alone. The agents all live in this process, in one
asyncio loop, speaking the real protocol (Register, then Heartbeat every
``heartbeat_interval_ms`` the control plane asks for), one TLS connection
each. For every count the run goes:

1. a fresh store, then gatewayd is started;
2. agents connect, spread over time (``--connect-rate`` per second), each
   beating at a random phase so the beats do not arrive in lockstep;
3. all N nodes must be ``ready`` in ``list_nodes`` before anything is measured;
4. warm-up, then the CPU window: gatewayd CPU (% of one core, from
   ``cpu_times`` deltas) and RSS, with nothing but the agents talking to it;
5. the latency window: for a sample of agents, each heartbeat's send time is
   noted and ``get_node`` is polled until ``heartbeat_seq`` reaches it. The
   figure is an upper bound: the time the reply that first showed it arrived.

The figures are reported, never judged by a test (tests/benchmarks only checks
that the benchmark runs). Run: ``python benchmarks/agents.py --counts 100,500,1000``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psutil
from simagent import (
    GIB,
    HOST,
    REGISTERED_TIMEOUT_S,
    VISIBLE_GIVE_UP_S,
    Recorder,
    SimAgent,
    VisibilityProbe,
)

from llmgw.admin_client import AdminClient
from llmgw.config import dump_yaml, load_server_config
from llmgw.errors import LlmgwError
from llmgw.fsutil import write_atomic, write_secret
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server
from llmgw.tls import pki
from llmgw.tls.tlsconf import client_context

MIB = 1024**2
# The goal the figures are read against.
GOAL_AGENTS = 1000
GOAL_CPU_PERCENT = 50.0
GOAL_VISIBLE_S = 1.0
GATEWAYD_START_TIMEOUT_S = 30.0
GATEWAYD_STOP_TIMEOUT_S = 20.0


# --- gatewayd and the measurements --------------------------------------------


@dataclass
class Usage:
    """A process's CPU time and RSS at one instant."""

    at: float
    cpu_s: float
    rss_bytes: int

    @classmethod
    def of(cls, proc: psutil.Process) -> Usage:
        t = proc.cpu_times()
        return cls(time.monotonic(), t.user + t.system, proc.memory_info().rss)


def cpu_percent(a: Usage, b: Usage) -> float:
    """CPU used between two readings, as % of one core."""
    return 100 * (b.cpu_s - a.cpu_s) / max(b.at - a.at, 1e-9)


def machine_busy() -> tuple[float, float]:
    t = psutil.cpu_times()
    return time.monotonic(), t.user + t.nice + t.system + t.irq + t.softirq + t.steal


async def measure_window(gw: psutil.Process, seconds: float) -> dict:
    """gatewayd's and this process's CPU and RSS over ``seconds`` (one reading a second)."""
    me = psutil.Process()
    start_gw, start_me, start_busy = Usage.of(gw), Usage.of(me), machine_busy()
    readings = [start_gw]
    deadline = start_gw.at + seconds
    while time.monotonic() < deadline:
        await asyncio.sleep(min(1.0, max(deadline - time.monotonic(), 0)))
        readings.append(Usage.of(gw))
    end_me, end_busy = Usage.of(me), machine_busy()
    per_s = [cpu_percent(a, b) for a, b in itertools.pairwise(readings)]
    cores = psutil.cpu_count() or 1
    busy_cores_percent = (
        100 * (end_busy[1] - start_busy[1]) / max(end_busy[0] - start_busy[0], 1e-9)
    )
    gw_percent, me_percent = cpu_percent(start_gw, readings[-1]), cpu_percent(start_me, end_me)
    return {
        "seconds": round(readings[-1].at - start_gw.at, 2),
        "gatewayd_cpu_percent": round(gw_percent, 1),
        "gatewayd_cpu_percent_max_1s": round(max(per_s, default=0.0), 1),
        "gatewayd_rss_mib": round(readings[-1].rss_bytes / MIB, 1),
        "gatewayd_rss_mib_max": round(max(r.rss_bytes for r in readings) / MIB, 1),
        "client_cpu_percent": round(me_percent, 1),
        "client_rss_mib": round(end_me.rss_bytes / MIB, 1),
        "machine_busy_percent": round(busy_cores_percent / cores, 1),
        # Everything else on the machine (other jobs), % of one core: on a shared
        # machine this says how much the figures were crowded.
        "others_cpu_percent": round(max(busy_cores_percent - gw_percent - me_percent, 0.0), 1),
    }


def percentiles_ms(values_s: list[float]) -> dict:
    """p50, p95 and max in milliseconds (nearest rank), with the sample size."""
    if not values_s:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    s = sorted(values_s)

    def rank(p: float) -> float:
        return round(1000 * s[min(len(s) - 1, max(0, int(p * len(s) + 0.5) - 1))], 1)

    return {"n": len(s), "p50": rank(0.50), "p95": rank(0.95), "max": round(1000 * s[-1], 1)}


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Setup:
    """The cluster files, shared by every count: CA, server certificate, node certificates."""

    paths: Paths
    token: str
    node_certs: list[tuple[str, Path, Path]]  # (node id, cert, key)

    @classmethod
    def create(cls, home: Path, agents: int) -> Setup:
        paths = Paths.under(home)
        init_server(paths, hosts=[HOST], cluster_name="bench")
        ca = pki.load_cert_key(paths.ca_cert, paths.ca_key)
        certs = []
        for i in range(agents):
            node_id = f"bench-{i:05d}"
            pair = pki.issue_node_cert(ca, node_id)
            crt, key = home / "nodes" / f"{node_id}.crt", home / "nodes" / f"{node_id}.key"
            write_secret(key, pair.key_pem)
            write_atomic(crt, pair.cert_pem)
            certs.append((node_id, crt, key))
        token = paths.admin_token_file.read_text().strip()
        return cls(paths, token, certs)


class Gatewayd:
    """``llmgw server`` as a subprocess on fresh ports and an empty store."""

    def __init__(
        self,
        setup: Setup,
        *,
        interval_s: float,
        log_path: Path,
        profile: Path | None,
        flush_interval_s: float | None,
    ):
        self.setup = setup
        self.log_path = log_path
        self.agent_port, self.admin_port, self.http_port, self.metrics_port = free_ports(4)
        paths = setup.paths
        shutil.rmtree(paths.server_data_dir, ignore_errors=True)
        cfg = load_server_config(paths.server_yaml)
        cfg.listen.agent = f"{HOST}:{self.agent_port}"
        cfg.listen.admin = f"{HOST}:{self.admin_port}"
        cfg.listen.http = f"{HOST}:{self.http_port}"
        cfg.listen.metrics = f"{HOST}:{self.metrics_port}"
        cfg.nodes.heartbeat_interval_s = interval_s
        # Every simulated agent dials from 127.0.0.1: one address, so its bound is the total's.
        cfg.connections.max_per_address = cfg.connections.max_total
        if flush_interval_s is not None:
            cfg.nodes.heartbeat_flush_interval_s = flush_interval_s
        write_atomic(paths.server_yaml, dump_yaml(cfg))
        prefix = ["-m", "cProfile", "-o", str(profile)] if profile else []
        # gatewayd picks its own event loop (uvloop where installed), as in production.
        self.argv = [sys.executable, *prefix, "-m", "llmgw", "server"]
        self.proc: subprocess.Popen | None = None

    def start(self) -> psutil.Process:
        env = {**os.environ, "LLMGW_HOME": str(self.setup.paths.home)}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        return psutil.Process(self.proc.pid)

    def admin(self) -> AdminClient:
        return AdminClient(f"{HOST}:{self.admin_port}", self.setup.token)

    async def wait_up(self, admin: AdminClient) -> None:
        deadline = time.monotonic() + GATEWAYD_START_TIMEOUT_S
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise BenchError(f"gatewayd exited at start; its log:\n{self.log_tail()}")
            try:
                # Up, and leading: agents that dial a control plane not leading yet (its
                # first lease round is slow on a busy machine) are sent elsewhere, as a
                # standby sends them, and this benchmark's agents do not dial again.
                if (await admin.status()).leader:
                    return
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"gatewayd did not lead within {GATEWAYD_START_TIMEOUT_S:g} s;"
                        f" its log:\n{self.log_tail()}"
                    )
                await asyncio.sleep(0.1)
            except LlmgwError:
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"gatewayd did not answer within "
                        f"{GATEWAYD_START_TIMEOUT_S:g} s; its log:\n{self.log_tail()}"
                    ) from None
                await asyncio.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM (so a profile gets written), then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(GATEWAYD_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class BenchError(Exception):
    """The benchmark could not run (as opposed to: it ran and measured something bad)."""


# --- one count ---------------------------------------------------------------


async def wait_until(predicate, *, timeout_s: float, interval_s: float = 0.5):
    """Poll an async predicate until it returns something truthy or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await predicate()
        if value or time.monotonic() >= deadline:
            return value
        await asyncio.sleep(interval_s)


async def ready_nodes(admin: AdminClient, ids: set[str]) -> int:
    reply = await admin.list_nodes()
    return sum(1 for n in reply.nodes if n.node_id in ids and n.state == "ready" and n.connected)


async def run_count(setup: Setup, n: int, args, workdir: Path) -> dict:
    profile = args.cprofile_dir / f"gatewayd-{n}.prof" if args.cprofile_dir else None
    gw = Gatewayd(
        setup,
        interval_s=args.interval_s,
        log_path=workdir / f"gatewayd-{n}.log",
        profile=profile,
        flush_interval_s=args.flush_interval_s,
    )
    recorder = Recorder()
    rng = random.Random(n)
    agents: list[SimAgent] = []
    tasks: list[asyncio.Task] = []
    result: dict = {"agents": n}
    admin = gw.admin()
    try:
        gw_proc = gw.start()
        await gw.wait_up(admin)
        result["gatewayd_rss_mib_idle"] = round(gw_proc.memory_info().rss / MIB, 1)

        # Connect, spread at --connect-rate per second.
        for node_id, crt, key in setup.node_certs[:n]:
            ctx = client_context(setup.paths.ca_cert, crt, key)
            agents.append(
                SimAgent(
                    node_id,
                    ctx,
                    gw.agent_port,
                    gpus=args.gpus_per_agent,
                    recorder=recorder,
                    rng=random.Random(rng.random()),
                )
            )
        t0 = time.monotonic()
        for i, agent in enumerate(agents):
            delay = t0 + i / args.connect_rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(agent.run(), name=agent.node_id))
        ready_timeout_s = REGISTERED_TIMEOUT_S + n / args.connect_rate
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.gather(*(a.registered.wait() for a in agents)), ready_timeout_s
            )
        ids = {a.node_id for a in agents}
        ready = await wait_until(lambda: _all_ready(admin, ids), timeout_s=ready_timeout_s)
        result["ready_s"] = round(time.monotonic() - t0, 2)
        result["ready"] = ready or await ready_nodes(admin, ids)
        result["registered"] = sum(a.state == "registered" for a in agents)

        await asyncio.sleep(args.warmup_s)

        # The CPU window: only the agents talk to gatewayd.
        recorder.start()
        window = await measure_window(gw_proc, args.measure_s)
        recorder.stop()
        window["heartbeats_per_s"] = round(recorder.beats / max(window["seconds"], 1e-9), 1)
        window["send_lag_ms"] = percentiles_ms(recorder.send_lag_s)
        result["steady"] = window

        # The latency window: a sample of agents, each heartbeat timed to visibility.
        sample = rng.sample(agents, min(args.latency_sample, len(agents)))
        probes = [VisibilityProbe(a, admin) for a in sample]
        pollers = [asyncio.create_task(p.run()) for p in probes]
        try:
            for p in probes:
                p.active = True
            lat_window = await measure_window(gw_proc, args.latency_s)
            for p in probes:
                p.active = False
            # Let the last beats land (or be given up): the slowest must not go uncounted.
            deadline = time.monotonic() + VISIBLE_GIVE_UP_S + 1
            while not all(p.idle for p in probes) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        finally:
            for t in pollers:
                t.cancel()
            await asyncio.gather(*pollers, return_exceptions=True)
        latencies = [x for p in probes for x in p.latencies_s]
        result["visible_ms"] = {
            **percentiles_ms(latencies),
            "missed": sum(p.missed for p in probes),
            "polls": sum(p.polls for p in probes),
            "poll_errors": sum(p.errors for p in probes),
            "sampled_agents": len(probes),
        }
        result["latency_window"] = {
            k: lat_window[k]
            for k in (
                "gatewayd_cpu_percent",
                "client_cpu_percent",
                "others_cpu_percent",
                "machine_busy_percent",
            )
        }
        result["ready_at_end"] = await ready_nodes(admin, ids)
    finally:
        for a in agents:
            a.stopping = True
        for t in tasks:
            t.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 30)
        admin.close()
        await asyncio.to_thread(gw.stop)
    states = Counter(a.state for a in agents)
    result["commands_refused"] = sum(a.commands for a in agents)
    result["failed"] = states.get("failed", 0)
    result["dropped"] = states.get("dropped", 0)
    errors = Counter(a.error for a in agents if a.error)
    result["errors"] = dict(errors.most_common(5))
    if profile:
        result["cprofile"] = str(profile)
    return result


async def _all_ready(admin: AdminClient, ids: set[str]) -> int | None:
    count = await ready_nodes(admin, ids)
    return count if count == len(ids) else None


# --- reporting ---------------------------------------------------------------


def machine_facts() -> dict:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "memory_total_gib": round(psutil.virtual_memory().total / GIB, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "client_loop": loop,
        "revision": _revision(),
    }


def _revision() -> str:
    """The checkout measured (``git describe --dirty``), so figures can be compared later."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def _fmt(v, unit: str = "") -> str:
    return "-" if v is None else f"{v:g}{unit}"


def render(report: dict) -> str:
    m = report["machine"]
    head = (
        f"{'agents':>6} {'ready':>6} {'fail':>4} {'drop':>4} {'ramp s':>6} "
        f"{'gw CPU%':>7} {'gw max%':>7} {'gw RSS MiB':>10} {'idle MiB':>8} "
        f"{'client CPU%':>11} {'others%':>7} {'busy%':>5} {'hb/s':>6} {'lag p95':>7} "
        f"{'visible p50/p95/max ms':>22} {'n':>5} {'miss':>4}"
    )
    lines = [
        (
            f"machine: {m['cpus']} CPUs, {m['cpu_model']}, {m['memory_total_gib']} GiB, "
            f"Python {m['python']}, revision {m['revision'] or '?'}, "
            f"client loop {m['client_loop']}, gatewayd loop: its own (uvloop)"
        ),
        head,
    ]
    for r in report["results"]:
        if "error" in r:
            lines.append(f"{r['agents']:>6} did not run: {r['error']}")
            continue
        s, v = r.get("steady", {}), r.get("visible_ms", {})
        lines.append(
            f"{r['agents']:>6} {_fmt(r.get('ready')):>6} {r['failed']:>4} {r['dropped']:>4} "
            f"{_fmt(r.get('ready_s')):>6} {_fmt(s.get('gatewayd_cpu_percent')):>7} "
            f"{_fmt(s.get('gatewayd_cpu_percent_max_1s')):>7} "
            f"{_fmt(s.get('gatewayd_rss_mib')):>10} {_fmt(r.get('gatewayd_rss_mib_idle')):>8} "
            f"{_fmt(s.get('client_cpu_percent')):>11} {_fmt(s.get('others_cpu_percent')):>7} "
            f"{_fmt(s.get('machine_busy_percent')):>5} "
            f"{_fmt(s.get('heartbeats_per_s')):>6} "
            f"{_fmt((s.get('send_lag_ms') or {}).get('p95')):>7} "
            f"{'/'.join(_fmt(v.get(k)) for k in ('p50', 'p95', 'max')):>22} "
            f"{_fmt(v.get('n')):>5} {_fmt(v.get('missed')):>4}"
        )
    lines.append(
        "gw CPU% = gatewayd, % of one core over the steady window; client = this process; "
        "others = every other process (% of one core); busy% = whole machine (all cores "
        "= 100); lag = how late this process sent beats (ms)"
    )
    for g in report["goals"]:
        lines.append(f"goal {g['goal']}: {g['verdict']}")
    return "\n".join(lines)


def judge(results: list[dict]) -> list[dict]:
    """The goals, read against the largest count that reached GOAL_AGENTS (if any)."""
    big = [r for r in results if r["agents"] >= GOAL_AGENTS and "steady" in r]
    if not big:
        return [{"goal": f"{GOAL_AGENTS} agents", "verdict": "not measured at this size"}]
    r = big[-1]
    cpu = r["steady"]["gatewayd_cpu_percent"]
    held = r["ready"] == r["agents"] and r["failed"] == 0 and r["dropped"] == 0
    vis = r["visible_ms"]
    vis_ok = vis["n"] > 0 and vis["missed"] == 0 and vis["max"] < GOAL_VISIBLE_S * 1000
    return [
        {
            "goal": f"{r['agents']} agents held, gatewayd < {GOAL_CPU_PERCENT:g}% of one core",
            "met": held and cpu < GOAL_CPU_PERCENT,
            "verdict": f"{'met' if held and cpu < GOAL_CPU_PERCENT else 'MISSED'} "
            f"({r['ready']}/{r['agents']} ready, {cpu:g}% CPU)",
        },
        {
            "goal": f"heartbeat-to-visible < {GOAL_VISIBLE_S * 1000:g} ms",
            "met": vis_ok,
            "verdict": f"{'met' if vis_ok else 'MISSED'} (max {_fmt(vis['max'])} ms over "
            f"{vis['n']} beats, {vis['missed']} missed)",
        },
    ]


# --- main ----------------------------------------------------------------------


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--counts", default="100,500,1000", help="agent counts, comma-separated")
    p.add_argument("--warmup-s", type=float, default=10.0)
    p.add_argument("--measure-s", type=float, default=20.0, help="the steady CPU window")
    p.add_argument(
        "--latency-s", type=float, default=None, help="the latency window (default: --measure-s)"
    )
    p.add_argument("--latency-sample", type=int, default=20, help="agents whose beats are timed")
    p.add_argument("--interval-s", type=float, default=1.0, help="heartbeat interval")
    p.add_argument("--connect-rate", type=float, default=100.0, help="new agents per second")
    p.add_argument(
        "--gpus-per-agent",
        type=int,
        default=0,
        help="GPUs each agent registers and samples in every heartbeat",
    )
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument(
        "--cprofile-dir",
        type=Path,
        help="run gatewayd under cProfile and write one .prof per count here "
        "(its CPU figures are then inflated by the profiler)",
    )
    p.add_argument(
        "--flush-interval-s",
        type=float,
        help="what-if: gatewayd's nodes.heartbeat_flush_interval_s (default: its own default)",
    )
    p.add_argument("--no-uvloop", action="store_true", help="the agents' loop: plain asyncio")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, certs)")
    args = p.parse_args(argv)
    try:
        args.counts = [int(c) for c in args.counts.split(",") if c.strip()]
    except ValueError:
        p.error(f"--counts takes numbers separated by commas, not {args.counts!r}")
    if not args.counts or min(args.counts) < 1:
        p.error("--counts needs at least one count of 1 or more")
    if args.latency_s is None:
        args.latency_s = args.measure_s
    # The same bounds server.yaml puts on them, said here rather than as a traceback.
    if not 0 < args.interval_s <= 60:
        p.error("--interval-s must be above 0 and at most 60")
    if args.flush_interval_s is not None and not 0 < args.flush_interval_s <= 300:
        p.error("--flush-interval-s must be above 0 and at most 300")
    if args.connect_rate <= 0 or args.latency_sample < 1 or args.gpus_per_agent < 0:
        p.error("--connect-rate and --latency-sample must be positive, --gpus-per-agent >= 0")
    if args.warmup_s < 0 or args.measure_s <= 0 or args.latency_s <= 0:
        p.error("--warmup-s must be >= 0, --measure-s and --latency-s above 0")
    if args.cprofile_dir:
        args.cprofile_dir = args.cprofile_dir.resolve()
        args.cprofile_dir.mkdir(parents=True, exist_ok=True)
    return args


async def bench(args, workdir: Path) -> dict:
    started = time.monotonic()
    setup = await asyncio.to_thread(Setup.create, workdir / "home", max(args.counts))
    print(
        f"certificates for {max(args.counts)} agents issued in {time.monotonic() - started:.1f} s",
        flush=True,
    )
    results = []
    for n in args.counts:
        print(f"running {n} agents ...", flush=True)
        try:
            r = await run_count(setup, n, args, workdir)
        except (BenchError, LlmgwError) as e:
            r = {"agents": n, "error": str(e), "failed": n, "dropped": 0}
        results.append(r)
        print(json.dumps(r), flush=True)
    return {
        "machine": machine_facts(),
        "settings": _settings(args),
        "results": results,
        "goals": judge(results),
    }


def _settings(args) -> dict:
    return {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
        if k not in ("json", "keep")
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Agents, their sockets and gatewayd's all count against the open-file limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 4 * max(args.counts) + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    # Bound the whole run: every phase has its own limit, this is the one above them all.
    per_count = (
        GATEWAYD_START_TIMEOUT_S
        + 2 * REGISTERED_TIMEOUT_S
        + 2 * max(args.counts) / args.connect_rate
        + args.warmup_s
        + args.measure_s
        + args.latency_s
        + VISIBLE_GIVE_UP_S
        + 30
        + GATEWAYD_STOP_TIMEOUT_S
    )
    limit_s = 60 + per_count * len(args.counts)
    workdir = Path(tempfile.mkdtemp(prefix="llmgw-bench-agents-"))

    async def bounded() -> dict:
        async with asyncio.timeout(limit_s):
            return await bench(args, workdir)

    loop_factory = None
    if not args.no_uvloop:
        with contextlib.suppress(ImportError):
            import uvloop

            loop_factory = uvloop.new_event_loop
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            report = runner.run(bounded())
    except TimeoutError:
        print(f"the benchmark ran past its {limit_s:.0f} s bound and was stopped", file=sys.stderr)
        return 3
    finally:
        if args.keep:
            print(f"work directory kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(render(report))
    if args.json:
        write_atomic(args.json, json.dumps(report, indent=2) + "\n")
        print(f"results written to {args.json}")
    broken = [
        r
        for r in report["results"]
        if "error" in r or r.get("ready") != r["agents"] or r["failed"] or r["dropped"]
    ]
    if broken:
        print(
            f"{len(broken)} count(s) did not hold every agent: see failed/dropped/errors above",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
