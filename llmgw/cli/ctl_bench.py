"""``llmgw ctl bench overhead``: what the gateway adds to a request, measured on this machine.

It starts the ``sim`` engine answering at once (no time to the first token,
none between tokens) and one gateway per mode in front of it
(``python -m gatewayd.bench_server``), each a process of its own, on
127.0.0.1. Then, rate by rate, an open-loop load generator sends the same
chat completion straight to the engine and through the gateway: requests
leave on a fixed schedule whatever the answers do, the two paths
interleaved (alternating which goes first) so that both meet the same
machine. The added latency is the difference per percentile, through minus
straight; the gateway's CPU time comes from ``/proc/<pid>/stat``.

The generator is plain functions over ``Endpoint``s, so that
``benchmarks/overhead.py`` measures another gateway (LiteLLM) the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import typer
from pydantic import BaseModel
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from llmgw import output
from llmgw.aio import run_loop
from llmgw.errors import LlmgwError, UsageError
from llmgw.output import renders

bench_app = typer.Typer(help="Benchmarks of the gateway on this machine.", no_args_is_help=True)

MODEL = "bench"
MODES = ("bare", "full")
# A short answer: the point is the gateway's cost, not the engine's bytes.
ANSWER_TOKENS = 16
REQUEST_TIMEOUT_S = 30.0
START_TIMEOUT_S = 30.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m)?")


# ---- what a run reports ----------------------------------------------------------


class PathFigures(BaseModel):
    """One path's answers in one step; times in milliseconds."""

    sent: int
    failed: int
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
    sent: int
    failed: int
    achieved_rate: float
    added_p50_ms: float | None
    added_p99_ms: float | None
    ttft_added_p50_ms: float | None = None
    ttft_added_p99_ms: float | None = None
    # The gateway's own x-llmgw-overhead-ms header: its time, without the hops.
    reported_p50_ms: float | None = None
    reported_p99_ms: float | None = None
    gateway_cpu_s_per_1k: float | None
    engine_cpu_s_per_1k: float | None
    load_lag_p99_ms: float
    load_avg_1m: float
    straight: PathFigures
    through: PathFigures


class OverheadReport(BaseModel):
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
    procs: Processes, mode: str, upstream: str, engine_key: str
) -> tuple[Endpoint, int]:
    """A bench gateway in ``mode`` in front of ``upstream``; its endpoint and pid."""
    ready_file = procs.workdir / f"gateway-{mode}.json"
    argv = [sys.executable, "-m", "gatewayd.bench_server", "--upstream", upstream]
    argv += ["--model", MODEL, "--listen", "127.0.0.1:0", "--mode", mode]
    argv += ["--ready-file", str(ready_file)]
    name = f"gateway ({mode})"
    proc = procs.start("gateway", name, argv, child_env(LLMGW_ENGINE_KEY=engine_key))

    def ready() -> dict | None:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(ready_file.read_text())
        return None

    info = await procs.wait_for(name, proc, ready)
    endpoint = Endpoint(
        mode,
        f"http://127.0.0.1:{info['port']}/v1/chat/completions",
        {"authorization": f"Bearer {info['key']}", "content-type": "application/json"},
        proc.pid,
    )
    return endpoint, proc.pid


# ---- the load -----------------------------------------------------------------------


def request_body(stream: bool) -> bytes:
    body: dict = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "How much does the gateway add?"}],
        "max_tokens": ANSWER_TOKENS,
    }
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
    last_done: float = 0.0


def _first_token(line: bytes) -> bool:
    """Whether an SSE line carries the first text of the answer (not the role chunk)."""
    if not line.startswith(b"data: {") or b'"content"' not in line:
        return False
    try:
        choices = json.loads(line[6:]).get("choices") or [{}]
    except ValueError:
        return False
    return bool((choices[0].get("delta") or {}).get("content"))


async def _one(
    http: aiohttp.ClientSession, ep: Endpoint, body: bytes, stream: bool, into: _Samples | None
) -> None:
    t0 = time.perf_counter()
    ttft = None
    ok = False
    reported = None
    try:
        async with http.post(ep.url, data=body, headers=ep.headers) as resp:
            if stream:
                async for line in resp.content:
                    if ttft is None and _first_token(line):
                        ttft = time.perf_counter() - t0
            else:
                await resp.read()
            ok = resp.status == 200
            reported = resp.headers.get("x-llmgw-overhead-ms")
    except (aiohttp.ClientError, OSError, TimeoutError):
        ok = False
    done = time.perf_counter()
    if into is None:
        return
    into.sent += 1
    if not ok or (stream and ttft is None):
        into.failed += 1
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
    body = request_body(stream)
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
        tasks.append(asyncio.create_task(_one(http, ep, body, stream, into)))
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
) -> Step:
    """One rate on one gateway: a warm-up, then the measured window."""
    if warmup_s > 0:
        await _schedule(sessions, straight, through, rate, warmup_s, stream, None, None)
    samples = (_Samples(), _Samples())
    lags: list[float] = []
    gw0, engine0 = cpu_s(through.pid), cpu_s(engine_pid)
    start = await _schedule(sessions, straight, through, rate, each_s, stream, samples, lags)
    gw1, engine1 = cpu_s(through.pid), cpu_s(engine_pid)
    direct, via = samples
    a, b = _figures(direct), _figures(via)
    span = (via.last_done - start) if via.last_done > start else each_s
    reported = via.reported_ms
    return Step(
        mode=through.name,
        rate=rate,
        stream=stream,
        window_s=each_s,
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
        load_lag_p99_ms=_ms(percentile(lags, 99)) or 0.0,
        load_avg_1m=round(os.getloadavg()[0], 2),
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


class Progress:
    """A line on stderr saying which step runs: redrawn on a terminal, one line a step otherwise."""

    def __init__(self, total: int, quiet: bool = False):
        self._console = Console(stderr=True)
        self._total = total
        self._done = 0
        self._quiet = quiet
        self._status = None

    def begin(self, what: str) -> None:
        if self._quiet:
            return
        text = f"[{self._done + 1}/{self._total}] {what}"
        if self._console.is_terminal:
            if self._status is None:
                self._status = self._console.status(text)
                self._status.start()
            else:
                self._status.update(text)
        else:
            self._console.print(f"bench: {text}", highlight=False)

    def end(self, step: Step) -> None:
        self._done += 1
        if self._quiet:
            return
        self._console.print(
            f"  {step.mode} at {step.rate}/s: {step.sent} through, {step.failed} failed, "
            f"added p50 {_fmt(step.added_p50_ms)} ms, p99 {_fmt(step.added_p99_ms)} ms",
            highlight=False,
        )

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()


# ---- the command ----------------------------------------------------------------------


def parse_seconds(text: str) -> float:
    """'10s', '500ms', '1m' or a plain number of seconds -> seconds."""
    m = _DURATION.fullmatch(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise UsageError(f"{text!r} is not a duration: write it like 10s, 500ms or 1m")
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[m.group(2)]


def parse_rates(text: str) -> list[int]:
    try:
        rates = [int(r) for r in text.split(",") if r.strip()]
    except ValueError:
        rates = []
    if not rates or any(r < 1 for r in rates):
        raise UsageError(f"{text!r} is not a list of rates: write it like 100,500,1000")
    return rates


def parse_modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if not modes or bad:
        raise UsageError(f"unknown mode {', '.join(bad) or text!r}: use bare, full or both")
    return modes


def parse_pin(text: str) -> dict[str, set[int]]:
    """'gateway=0,engine=1,load=1' -> the CPUs each role is held to."""
    pin: dict[str, set[int]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        role, _, cpus = part.partition("=")
        if role not in ("gateway", "engine", "load") or not cpus.replace("+", "").isdigit():
            raise UsageError(
                f"{part!r} is not ROLE=CPU: write it like gateway=0,engine=1,load=1 "
                "(several CPUs as 0+1)"
            )
        pin[role] = {int(c) for c in cpus.split("+")}
    return pin


def machine() -> dict[str, str | int | float]:
    return {
        "cpus": os.cpu_count() or 0,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


async def run_overhead(
    *,
    rates: list[int],
    modes: list[str],
    each_s: float,
    warmup_s: float,
    stream: bool,
    pin: dict[str, set[int]],
    quiet: bool = False,
) -> OverheadReport:
    """Start the engine and the gateways, measure every rate on every mode, stop them."""
    engine_key = secrets.token_urlsafe(24)
    straight_headers = {"authorization": f"Bearer {engine_key}"}
    straight_headers["content-type"] = "application/json"
    if "load" in pin:
        os.sched_setaffinity(0, pin["load"])
    progress = Progress(len(rates) * len(modes), quiet)
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-") as tmp:
        procs = Processes(Path(tmp), pin)
        try:
            upstream, engine_pid = await start_sim(procs, engine_key)
            straight = Endpoint("straight", upstream + "/v1/chat/completions", straight_headers)
            gateways = {m: (await start_gateway(procs, m, upstream, engine_key))[0] for m in modes}
            sessions = sessions_for(modes)
            steps = []
            try:
                for rate in rates:
                    for mode in modes:
                        progress.begin(f"{mode} at {rate} req/s for {each_s:g} s")
                        step = await measure_step(
                            sessions,
                            straight,
                            gateways[mode],
                            rate=rate,
                            each_s=each_s,
                            warmup_s=warmup_s,
                            stream=stream,
                            engine_pid=engine_pid,
                        )
                        progress.end(step)
                        steps.append(step)
            finally:
                await asyncio.gather(*(s.close() for s in sessions.values()))
        finally:
            progress.close()
            procs.stop()
    settings = {
        "rates": rates,
        "modes": modes,
        "each_s": each_s,
        "warmup_s": warmup_s,
        "stream": stream,
        "answer_tokens": ANSWER_TOKENS,
        "pin": ",".join(f"{r}={'+'.join(map(str, sorted(c)))}" for r, c in pin.items()),
    }
    return OverheadReport(machine=machine(), settings=settings, steps=steps)


@bench_app.command("overhead")
def overhead(
    rates: str = typer.Option("100,500,1000", "--rates", help="Requests a second, on each path."),
    each: str = typer.Option("10s", "--each", help="How long each rate is measured."),
    mode: str = typer.Option("bare,full", "--mode", help="Gateway modes: bare, full or both."),
    stream: bool = typer.Option(
        False, "--stream", help="Streamed answers; adds time to first token."
    ),
    warmup: str = typer.Option("1s", "--warmup", help="Load before each window, not counted."),
    pin: str = typer.Option(
        "", "--pin", help="Hold processes to CPUs, e.g. gateway=0,engine=1,load=1."
    ),
    json: bool = typer.Option(False, "--json", help="Print the report as JSON, and nothing else."),
) -> None:
    """What the gateway adds to a request: the same load straight to an engine and through it."""
    try:
        each_s = parse_seconds(each)
        warmup_s = 0.0 if warmup.strip() in ("0", "0s") else parse_seconds(warmup)
        report = asyncio_run(
            run_overhead(
                rates=parse_rates(rates),
                modes=parse_modes(mode),
                each_s=each_s,
                warmup_s=warmup_s,
                stream=stream,
                pin=parse_pin(pin),
            )
        )
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    output.emit(
        report,
        json=json,
        next_step="Against LiteLLM on the same machine: python benchmarks/overhead.py",
    )


def asyncio_run(coro):
    """Run ``coro`` on uvloop (as the daemons run) and return its result."""
    box: list = []

    async def main() -> None:
        box.append(await coro)

    run_loop(main())
    return box[0]


# ---- how it looks -----------------------------------------------------------------------


def _fmt(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


@renders(OverheadReport)
def render(report: OverheadReport):
    stream = any(s.stream for s in report.steps)
    t = Table(title="What the gateway adds to a request", title_justify="left")
    for col in ("mode", "rate/s", "achieved/s", "failed", "straight p50", "added p50"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for col in ("straight p99", "added p99"):
        t.add_column(col, justify="right")
    if stream:
        t.add_column("TTFT added p50", justify="right")
        t.add_column("TTFT added p99", justify="right")
    t.add_column("own p50/p99", justify="right")
    t.add_column("CPU s/1k", justify="right")
    for s in report.steps:
        row = [
            s.mode,
            str(s.rate),
            f"{s.achieved_rate:g}",
            Text(str(s.failed), style="red" if s.failed else ""),
            _fmt(s.straight.p50_ms),
            _fmt(s.added_p50_ms),
            _fmt(s.straight.p99_ms),
            _fmt(s.added_p99_ms),
        ]
        if stream:
            row += [_fmt(s.ttft_added_p50_ms), _fmt(s.ttft_added_p99_ms)]
        own = f"{_fmt(s.reported_p50_ms)}/{_fmt(s.reported_p99_ms)}"
        row += [own if s.reported_p50_ms is not None else "–", _fmt(s.gateway_cpu_s_per_1k, 3)]
        t.add_row(*row)
    m = report.machine
    note = Text(
        "Times in ms. added = through the gateway minus straight to the engine, per "
        "percentile; own = the gateway's x-llmgw-overhead-ms header; CPU s/1k = the "
        f"gateway process's CPU seconds per 1,000 requests. {m['cpus']} CPUs, load "
        f"{m['load_avg_1m']} at the end.",
        style="dim",
    )
    return Group(t, note)
