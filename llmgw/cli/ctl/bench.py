"""``llmgw ctl bench overhead``: what the gateway adds to a request, measured on this machine.

An engine that answers at once, a gateway per mode in front of it, and the
same open-loop load straight to the engine and through the gateway, rate by
rate (``llmgw.cli.ctl.bench_load``). Reports, per rate and mode, the latency
added at p50 and p99, failures, the rate achieved and the gateway's CPU
seconds per 1,000 requests; with ``--stream`` also the time to first token
added.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from llmgw.aio import run_loop
from llmgw.errors import LlmgwError, UsageError
from llmgw.present import output

if TYPE_CHECKING:
    from llmgw.cli.ctl.bench_load import OverheadReport, Step

# bench_load is imported where it is used: it brings aiohttp, a tenth of a
# second that every other llmgw command would wait for.

# The modes of gatewayd.bench_server.
MODES = ("bare", "full", "relay")
# The API paths through the gateway (bench_load.PATHS).
PATHS = ("chat", "responses")

bench_app = typer.Typer(help="Benchmarks of the gateway on this machine.", no_args_is_help=True)

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m)?")


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
        raise UsageError(f"unknown mode {', '.join(bad) or text!r}: use bare, full or relay")
    return modes


def parse_paths(text: str) -> list[str]:
    """'chat' or 'responses' (chat is measured beside it, in the same run)."""
    paths = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in paths if p not in PATHS]
    if not paths or bad:
        raise UsageError(f"unknown path {', '.join(bad) or text!r}: use chat or responses")
    return ["chat", *(p for p in paths if p != "chat")]


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


async def run_overhead(
    *,
    rates: list[int],
    modes: list[str],
    each_s: float,
    warmup_s: float,
    stream: bool,
    pin: dict[str, set[int]],
    quiet: bool = False,
    cprofile_dir: Path | None = None,
    quiet_pct: float | None = None,
    paths: list[str] | None = None,
) -> OverheadReport:
    """Start the engine and the gateways, measure every rate on every mode, stop them."""
    from llmgw.cli.ctl.bench_load import (
        ANSWER_TOKENS,
        Endpoint,
        OverheadReport,
        Processes,
        machine,
        measure_step,
        sessions_for,
        start_gateway,
        start_sim,
    )

    engine_key = secrets.token_urlsafe(24)
    straight_headers = {
        "authorization": f"Bearer {engine_key}",
        "content-type": "application/json",
    }
    if "load" in pin:
        os.sched_setaffinity(0, pin["load"])
    paths = paths or ["chat"]
    # The relay is no gateway: it has no Responses API to convert.
    pairs = [(m, p) for m in modes for p in paths if m != "relay" or p == "chat"]
    progress = Progress(len(rates) * len(pairs), quiet)
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-") as tmp:
        procs = Processes(Path(tmp), pin)
        try:
            upstream, engine_pid = await start_sim(procs, engine_key)
            straight = Endpoint("straight", upstream + "/v1/chat/completions", straight_headers)
            gateways = {
                m: await start_gateway(procs, m, upstream, engine_key, cprofile_dir) for m in modes
            }
            sessions = sessions_for(modes)
            steps = []
            try:
                for rate in rates:
                    for mode, path in pairs:
                        on = "" if path == "chat" else f", {path}"
                        progress.begin(f"{mode}{on} at {rate} req/s for {each_s:g} s")
                        step = await measure_step(
                            sessions,
                            straight,
                            gateways[mode].on(path),
                            rate=rate,
                            each_s=each_s,
                            warmup_s=warmup_s,
                            stream=stream,
                            engine_pid=engine_pid,
                            quiet_pct=quiet_pct,
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
        "paths": paths,
        "each_s": each_s,
        "warmup_s": warmup_s,
        "stream": stream,
        "answer_tokens": ANSWER_TOKENS,
        "pin": ",".join(f"{r}={'+'.join(map(str, sorted(c)))}" for r, c in pin.items()),
        "wait_quiet_pct": quiet_pct or 0,
    }
    return OverheadReport(machine=machine(), settings=settings, steps=steps)


@bench_app.command("overhead")
def overhead(
    rates: str = typer.Option("100,500,1000", "--rates", help="Requests a second, on each path."),
    each: str = typer.Option("10s", "--each", help="How long each rate is measured."),
    mode: str = typer.Option(
        "bare,full",
        "--mode",
        help="bare (a key, nothing else), full (limits, budgets, usage, metrics), "
        "relay (bytes copied, no gateway: the floor of one more hop).",
    ),
    stream: bool = typer.Option(
        False, "--stream", help="Streamed answers; adds time to first token."
    ),
    warmup: str = typer.Option("1s", "--warmup", help="Load before each window, not counted."),
    pin: str = typer.Option(
        "", "--pin", help="Hold processes to CPUs, e.g. gateway=0,engine=1,load=1."
    ),
    json: bool = typer.Option(False, "--json", help="Print the report as JSON, and nothing else."),
    wait_quiet: float = typer.Option(
        None,
        "--wait-quiet",
        min=1,
        help="Before each step, wait (up to 2 min) until the whole machine uses under this "
        "% of one CPU: for a shared machine.",
    ),
    cprofile_dir: Path = typer.Option(
        None, "--cprofile-dir", help="Run each gateway under cProfile, one .prof per mode here."
    ),
    path: str = typer.Option(
        "chat",
        "--path",
        help="chat (/v1/chat/completions) or responses (/v1/responses, measured beside chat "
        "in the same run, both against the engine's chat completions).",
    ),
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
                cprofile_dir=cprofile_dir.resolve() if cprofile_dir else None,
                quiet_pct=wait_quiet,
                paths=parse_paths(path),
            )
        )
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    output.renders(type(report))(render)
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


def _others(report: OverheadReport) -> str:
    """What the rest of the machine used during the windows: what the figures competed with."""
    used = [s.others_cpu_pct for s in report.steps if s.others_cpu_pct is not None]
    if not used:
        return ""
    return f"; other processes used {min(used):.0f}–{max(used):.0f} % of one CPU"


def _fmt(v: float | None, digits: int = 2) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def render(report: OverheadReport):
    """The report as a table for people (``--json`` prints it as it is)."""
    stream = any(s.stream for s in report.steps)
    paths = any(s.path != "chat" for s in report.steps)
    t = Table(title="What the gateway adds to a request (ms)", title_justify="left")
    cols = ["mode", *(["path"] if paths else []), "req/s", "got/s", "failed"]
    cols += ["added p50", "added p99"]
    if stream:
        cols += ["TTFT added p50", "TTFT added p99"]
    cols += ["own p50/p99", "CPU s/1k"]
    t.add_column(cols[0], no_wrap=True)
    for col in cols[1:]:
        t.add_column(col, justify="right", overflow="fold")
    for s in report.steps:
        row = [
            s.mode,
            *([s.path] if paths else []),
            str(s.rate),
            f"{s.achieved_rate:g}",
            Text(str(s.failed), style="red" if s.failed else ""),
            _fmt(s.added_p50_ms),
            _fmt(s.added_p99_ms),
        ]
        if stream:
            row += [_fmt(s.ttft_added_p50_ms), _fmt(s.ttft_added_p99_ms)]
        row += [
            "–"
            if s.reported_p50_ms is None
            else f"{s.reported_p50_ms:.2f}/{s.reported_p99_ms:.2f}",
            _fmt(s.gateway_cpu_s_per_1k, 3),
        ]
        t.add_row(*row)
    m = report.machine
    note = Text(
        "added: through the gateway minus straight to the engine, per percentile "
        "(the straight figures are in --json). "
        "own: the gateway's x-llmgw-overhead-ms header (its time outside the call to "
        "the engine; the HTTP server's and client's work is not in it). "
        + (
            "path responses: /v1/responses through the gateway (converted to a chat completion) "
            "against chat completions straight to the engine. "
            if paths
            else ""
        )
        + "CPU s/1k: the gateway process's CPU seconds per 1,000 requests. "
        f"{m['cpus']} CPUs{_others(report)}, load {m['load_avg_1m']} at the end.",
        style="dim",
    )
    lines = [
        f"{s.mode} at {s.rate}/s ({s.path}), {side}: "
        + ", ".join(f"{n}× {why}" for why, n in figures.failures.items())
        for s in report.steps
        for side, figures in (("straight", s.straight), ("through", s.through))
        if figures.failures
    ]
    parts = [t, note]
    if lines:
        parts.append(Text("Failed: " + "; ".join(lines), style="red"))
    return Group(*parts)
