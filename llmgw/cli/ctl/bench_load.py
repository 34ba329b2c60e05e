"""The overhead benchmark's machinery: its processes and its open-loop load.

``Processes`` starts the ``sim`` engine answering at once and the bench
gateways (``python -m gatewayd.bench_server``), each a process of its own on
127.0.0.1. ``measure_step`` sends one rate of the same chat completion
straight to the engine and through one gateway: requests leave on a fixed
schedule whatever the answers do (open loop), the two paths interleaved,
alternating which goes first, so that both meet the same machine. The
added latency is the difference per percentile, through minus straight; CPU
time comes from ``/proc/<pid>/stat``.

Used by ``llmgw ctl bench overhead`` and by ``benchmarks/overhead.py``, which
puts LiteLLM's proxy through the same load as one more ``Endpoint``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import aiohttp
from pydantic import BaseModel

from llmgw.errors import LlmgwError

MODEL = "bench"
# A short answer: the point is the gateway's cost, not the engine's bytes.
ANSWER_TOKENS = 16
# The API paths a step may send through the gateway.
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}
REQUEST_TIMEOUT_S = 30.0
START_TIMEOUT_S = 30.0
# Idle: under 5 % of a core, checked over half a second, for at most two minutes.
SETTLED_CPU = 0.05
SETTLE_MAX_S = 120.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---- what a step reports -------------------------------------------------------------


class PathFigures(BaseModel):
    """One path's answers in one step; times in milliseconds."""

    sent: int
    failed: int
    # Why requests failed: an HTTP status or an exception's name, and how often.
    failures: dict[str, int] = {}
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None


class Step(BaseModel):
    """One rate through one gateway mode: the straight and the through path side by side."""

    mode: str
    rate: int
    stream: bool
    window_s: float
    # The API path through the gateway: chat (/v1/chat/completions) or responses
    # (/v1/responses, converted to a chat completion); straight is always chat.
    path: str = "chat"
    sent: int
    failed: int
    achieved_rate: float
    added_p50_ms: float | None
    added_p99_ms: float | None
    ttft_added_p50_ms: float | None = None
    ttft_added_p99_ms: float | None = None
    # llmgw's x-llmgw-overhead-ms header: its time outside the call to the engine.
    reported_p50_ms: float | None = None
    reported_p99_ms: float | None = None
    gateway_cpu_s_per_1k: float | None
    engine_cpu_s_per_1k: float | None
    # This process, sending both paths: on a small machine it competes with the others.
    load_cpu_s_per_1k: float | None
    # How late the generator sent, at p99: past a few ms, the machine is the limit.
    load_lag_p99_ms: float
    load_avg_1m: float
    # Every other process on the machine during the window, in % of one core.
    others_cpu_pct: float | None
    # How long the step waited for the processes (and, if asked, the machine) to be idle.
    waited_s: float = 0.0
    straight: PathFigures
    through: PathFigures


class OverheadReport(BaseModel):
    """Every step of one run, with the machine and the settings it ran with."""

    machine: dict[str, str | int | float]
    settings: dict[str, str | int | float | bool | list[int] | list[str]]
    steps: list[Step]


# ---- processes ----------------------------------------------------------------------


@dataclass
class Endpoint:
    """Where one path sends its requests, and the process to charge the CPU to."""

    name: str
    url: str
    headers: dict[str, str]
    pid: int | None = None
    path: str = "chat"

    def on(self, path: str) -> Endpoint:
        """The same gateway, sent ``path``'s requests (``chat`` or ``responses``)."""
        base = self.url.removesuffix(PATHS[self.path])
        return replace(self, url=base + PATHS[path], path=path)


def cpu_s(pid: int | None) -> float | None:
    """User plus system CPU seconds of ``pid`` so far; None when unknown."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the name may hold spaces
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def machine_busy_s() -> float | None:
    """CPU seconds the whole machine has spent busy (every core, every process)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / _CLK_TCK


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Processes:
    """The subprocesses of one run, stopped (TERM, then KILL) when it ends."""

    def __init__(self, workdir: Path, pin: dict[str, set[int]]):
        self.workdir = workdir
        self._pin = pin
        self._procs: list[subprocess.Popen] = []

    def start(self, role: str, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as f:
            proc = subprocess.Popen(
                argv, env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        self._procs.append(proc)
        if role in self._pin:
            os.sched_setaffinity(proc.pid, self._pin[role])
        return proc

    async def wait_for(self, name: str, proc: subprocess.Popen, ready: Callable[[], object]):
        """Poll ``ready`` until it gives something; LlmgwError if the process ends first."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            value = ready()
            if value:
                return value
            if proc.poll() is not None:
                break
            await asyncio.sleep(0.05)
        log = self.workdir / f"{name}.log"
        raise LlmgwError(
            f"the {name} did not start (exit status {proc.poll()})",
            hint=log_tail(log) or f"see {log}",
        )

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


async def start_sim(procs: Processes, engine_key: str) -> tuple[str, int]:
    """The sim engine answering at once; its base URL (no /v1) and pid."""
    argv = [sys.executable, "-m", "agentd.sim", "--model", MODEL, "--port", "0"]
    argv += ["--ttft-ms", "0", "--itl-ms", "0", "--tokens", str(ANSWER_TOKENS)]
    proc = procs.start("engine", "engine", argv, child_env(LLMGW_ENGINE_KEY=engine_key))
    log = procs.workdir / "engine.log"

    def ready() -> str:
        m = re.search(r"serving \S+ on (http://\S+)", log_tail(log, 5))
        return m.group(1) if m else ""

    return await procs.wait_for("engine", proc, ready), proc.pid


async def start_gateway(
    procs: Processes, mode: str, upstream: str, engine_key: str, cprofile_dir: Path | None = None
) -> Endpoint:
    """A bench gateway in ``mode`` in front of ``upstream``, started; where to send to it."""
    ready_file = procs.workdir / f"gateway-{mode}.json"
    argv = [sys.executable, "-m", "gatewayd.bench_server", "--upstream", upstream]
    argv += ["--model", MODEL, "--listen", "127.0.0.1:0", "--mode", mode]
    argv += ["--ready-file", str(ready_file)]
    if cprofile_dir is not None:
        argv += ["--cprofile", str(cprofile_dir / f"gateway-{mode}.prof")]
    name = f"gateway ({mode})"
    proc = procs.start("gateway", name, argv, child_env(LLMGW_ENGINE_KEY=engine_key))

    def ready() -> dict | None:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(ready_file.read_text())
        return None

    info = await procs.wait_for(name, proc, ready)
    # The relay reads nothing: what reaches the engine must carry the engine's key.
    key = engine_key if mode == "relay" else info["key"]
    return Endpoint(
        mode,
        f"http://127.0.0.1:{info['port']}/v1/chat/completions",
        {"authorization": f"Bearer {key}", "content-type": "application/json"},
        proc.pid,
    )


# ---- the load -----------------------------------------------------------------------


def request_body(stream: bool, path: str = "chat") -> bytes:
    """One request of ``path``: the same question and answer length on either API."""
    question = "How much does the gateway add?"
    body: dict = {"model": MODEL}
    if path == "responses":
        body.update(input=question, max_output_tokens=ANSWER_TOKENS)
    else:
        body.update(messages=[{"role": "user", "content": question}], max_tokens=ANSWER_TOKENS)
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


@dataclass
class _Samples:
    latency_s: list[float] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)
    reported_ms: list[float] = field(default_factory=list)
    sent: int = 0
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    last_done: float = 0.0


# A delta with text in it: the first token, not the chunk that only opens the
# answer with its role (its content is ""). Either JSON spacing.
# A Responses stream's first text is the first output_text delta.
_TEXT = re.compile(rb'"(?:content|delta)": ?"[^"]')
# What is kept of one piece of a stream to find a match cut across two.
_OVERLAP = 16


async def _one(
    http: aiohttp.ClientSession, ep: Endpoint, body: bytes, stream: bool, into: _Samples | None
) -> None:
    t0 = time.perf_counter()
    ttft = None
    why = ""
    reported = None
    try:
        async with http.post(ep.url, data=body, headers=ep.headers) as resp:
            if stream:
                # Pieces as they come, not lines: the client must cost less than
                # what it measures.
                tail = b""
                async for piece in resp.content.iter_any():
                    if ttft is None:
                        if _TEXT.search(tail + piece):
                            ttft = time.perf_counter() - t0
                        tail = piece[-_OVERLAP:]
            else:
                await resp.read()
            if resp.status != 200:
                why = str(resp.status)
            elif stream and ttft is None:
                why = "no token"
            reported = resp.headers.get("x-llmgw-overhead-ms")
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        why = e.__class__.__name__
    done = time.perf_counter()
    if into is None:
        return
    into.sent += 1
    if why:
        into.failed += 1
        into.failures[why] = into.failures.get(why, 0) + 1
        return
    into.latency_s.append(done - t0)
    into.last_done = max(into.last_done, done)
    if ttft is not None:
        into.ttft_s.append(ttft)
    if reported is not None:
        with contextlib.suppress(ValueError):
            into.reported_ms.append(float(reported))


async def _schedule(
    sessions: dict[str, aiohttp.ClientSession],
    straight: Endpoint,
    through: Endpoint,
    rate: int,
    seconds: float,
    stream: bool,
    samples: tuple[_Samples, _Samples] | None,
    lags: list[float] | None,
) -> float:
    """Send ``rate`` requests a second on each path for ``seconds``, open loop; when it began.

    Period i sends one request on each path, half a period apart, the first
    of the pair alternating; answers are awaited only at the end.
    """
    bodies = {id(straight): request_body(stream), id(through): request_body(stream, through.path)}
    period = 1.0 / rate
    n = max(1, round(rate * seconds))
    tasks: list[asyncio.Task] = []
    start = time.perf_counter() + 0.01
    for i in range(n * 2):
        ep = (straight, through)[(i + i // 2) % 2]
        due = start + (i // 2) * period + (i % 2) * period / 2
        delay = due - time.perf_counter()
        if delay > 0.0005:
            await asyncio.sleep(delay)
        if lags is not None:
            lags.append(max(0.0, time.perf_counter() - due))
        into = None if samples is None else samples[ep is through]
        http = sessions[ep.name if ep is through else "straight"]
        tasks.append(asyncio.create_task(_one(http, ep, bodies[id(ep)], stream, into)))
    await asyncio.gather(*tasks)
    return start


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0–100), interpolated between the nearest ranks; None if empty."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 4)


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 4)


def _figures(s: _Samples) -> PathFigures:
    return PathFigures(
        sent=s.sent,
        failed=s.failed,
        failures=s.failures,
        p50_ms=_ms(percentile(s.latency_s, 50)),
        p99_ms=_ms(percentile(s.latency_s, 99)),
        max_ms=_ms(max(s.latency_s, default=None)),
        ttft_p50_ms=_ms(percentile(s.ttft_s, 50)),
        ttft_p99_ms=_ms(percentile(s.ttft_s, 99)),
    )


def _per_1k(before: float | None, after: float | None, requests: int) -> float | None:
    if before is None or after is None or not requests:
        return None
    return round((after - before) / requests * 1000, 4)


async def settle(
    pids: list[int | None], quiet_pct: float | None = None, max_wait_s: float = SETTLE_MAX_S
) -> float:
    """Wait until ``pids`` are idle, and the machine under ``quiet_pct`` % of one CPU if given.

    A step left working through a backlog skews the next; on a shared
    machine, so does someone else's build. Gives up after ``max_wait_s``;
    returns the seconds it waited.
    """
    started = time.monotonic()
    while time.monotonic() - started < max_wait_s:
        before, machine0 = [cpu_s(p) or 0.0 for p in pids], machine_busy_s()
        await asyncio.sleep(0.5)
        busy = sum(cpu_s(p) or 0.0 for p in pids) - sum(before)
        machine1 = machine_busy_s()
        loud = (
            quiet_pct is not None
            and machine0 is not None
            and machine1 is not None
            and (machine1 - machine0) / 0.5 * 100 > quiet_pct
        )
        if busy < 0.5 * SETTLED_CPU and not loud:
            break
    return round(time.monotonic() - started, 1)


async def measure_step(
    sessions: dict[str, aiohttp.ClientSession],
    straight: Endpoint,
    through: Endpoint,
    *,
    rate: int,
    each_s: float,
    warmup_s: float,
    stream: bool,
    engine_pid: int | None,
    quiet_pct: float | None = None,
) -> Step:
    """One rate on one gateway: a warm-up, then the measured window."""
    waited_s = await settle([through.pid, engine_pid], quiet_pct)
    if warmup_s > 0:
        await _schedule(sessions, straight, through, rate, warmup_s, stream, None, None)
    samples = (_Samples(), _Samples())
    lags: list[float] = []
    pids = (through.pid, engine_pid, os.getpid())
    before, busy0, t0 = [cpu_s(p) for p in pids], machine_busy_s(), time.perf_counter()
    start = await _schedule(sessions, straight, through, rate, each_s, stream, samples, lags)
    after, busy1, t1 = [cpu_s(p) for p in pids], machine_busy_s(), time.perf_counter()
    (gw0, engine0, load0), (gw1, engine1, load1) = before, after
    others = None
    if busy0 is not None and busy1 is not None and None not in before + after:
        ours = sum(after) - sum(before)  # type: ignore[arg-type]
        others = round(max(0.0, busy1 - busy0 - ours) / (t1 - t0) * 100, 1)
    direct, via = samples
    a, b = _figures(direct), _figures(via)
    span = (via.last_done - start) if via.last_done > start else each_s
    reported = via.reported_ms
    return Step(
        mode=through.name,
        rate=rate,
        stream=stream,
        window_s=each_s,
        path=through.path,
        sent=via.sent,
        failed=direct.failed + via.failed,
        achieved_rate=round(len(via.latency_s) / max(span, each_s), 1),
        added_p50_ms=_diff(b.p50_ms, a.p50_ms),
        added_p99_ms=_diff(b.p99_ms, a.p99_ms),
        ttft_added_p50_ms=_diff(b.ttft_p50_ms, a.ttft_p50_ms) if stream else None,
        ttft_added_p99_ms=_diff(b.ttft_p99_ms, a.ttft_p99_ms) if stream else None,
        reported_p50_ms=_round(percentile(reported, 50)),
        reported_p99_ms=_round(percentile(reported, 99)),
        gateway_cpu_s_per_1k=_per_1k(gw0, gw1, via.sent),
        # The engine answers both paths: charged per request it answered.
        engine_cpu_s_per_1k=_per_1k(engine0, engine1, direct.sent + via.sent),
        load_cpu_s_per_1k=_per_1k(load0, load1, direct.sent + via.sent),
        load_lag_p99_ms=_ms(percentile(lags, 99)) or 0.0,
        load_avg_1m=round(os.getloadavg()[0], 2),
        others_cpu_pct=others,
        waited_s=waited_s,
        straight=a,
        through=b,
    )


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


def sessions_for(names: list[str]) -> dict[str, aiohttp.ClientSession]:
    """One client session (its own connection pool) per path, so neither waits on the other."""
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    return {
        name: aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60), timeout=timeout
        )
        for name in ["straight", *names]
    }


def machine() -> dict[str, str | int | float]:
    return {
        "cpus": os.cpu_count() or 0,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
