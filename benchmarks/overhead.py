"""Benchmark: what llmgw's gateway adds to a request, beside what LiteLLM's proxy adds.

The same instant ``sim`` engine, the same open-loop load generator and the
same request as ``llmgw ctl bench overhead`` (it is that command's code),
in one run: llmgw's gateway (bare and full) and LiteLLM's proxy, each in
front of the engine, each measured against the engine straight.

LiteLLM is installed into a virtualenv of its own (``--venv``, default
/tmp/litellm-venv; made with ``python -m venv`` and ``pip install
'litellm[proxy]'`` when it is not there) — it is no dependency of llmgw.
Its proxy runs as shipped, with one worker, no database and a master key
(which it checks from memory, as llmgw's bare mode checks its key), configured
with one ``openai/`` model pointing at the engine.

Printed, never judged. Run:
``python benchmarks/overhead.py [--rates 100,500,1000] [--litellm-rates 10,50,100,500]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.table import Table

from llmgw.cli.ctl import bench
from llmgw.cli.ctl import bench_load as load
from llmgw.errors import LlmgwError

LITELLM_KEY_ENV = "LLMGW_BENCH_ENGINE_KEY"
LITELLM_START_TIMEOUT_S = 120
CONFIG = """\
model_list:
  - model_name: {model}
    litellm_params:
      model: openai/{model}
      api_base: {api_base}
      api_key: os.environ/{key_env}
"""


def ensure_litellm(venv: Path) -> Path:
    """The ``litellm`` command of ``venv``, installing it there first if need be."""
    exe = venv / "bin" / "litellm"
    if exe.exists():
        return exe
    print(f"installing litellm[proxy] into {venv} (once; a minute or two)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "litellm[proxy]"], check=True)
    return exe


def litellm_version(venv: Path) -> str:
    res = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print(m.version('litellm'))",
        ],
        capture_output=True,
        text=True,
    )
    return res.stdout.strip() or "unknown"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_litellm(
    procs: load.Processes, exe: Path, upstream: str, engine_key: str
) -> load.Endpoint:
    """LiteLLM's proxy in front of ``upstream``: one worker, no database, a master key."""
    config = procs.workdir / "litellm.yaml"
    config.write_text(
        CONFIG.format(model=load.MODEL, api_base=upstream + "/v1", key_env=LITELLM_KEY_ENV)
    )
    port = free_port()
    argv = [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--num_workers", "1"]
    master_key = "sk-" + secrets.token_hex(32)
    env = {
        LITELLM_KEY_ENV: engine_key,
        # LiteLLM refuses to start without one; with no database it is checked from memory.
        "LITELLM_MASTER_KEY": master_key,
        # The machine may have no way out: use the price map shipped in the package.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
    }
    env = load.child_env(**env)
    env.pop("DATABASE_URL", None)  # no database: LiteLLM keeps nothing
    proc = procs.start("gateway", "litellm", argv, env)
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(base + "/health/liveliness", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    # LiteLLM spends many seconds importing: it gets longer than our processes' 30 s.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LITELLM_START_TIMEOUT_S
    while not await asyncio.to_thread(answers):
        if proc.poll() is not None or loop.time() > deadline:
            raise LlmgwError(
                f"LiteLLM's proxy did not start (exit status {proc.poll()})",
                hint=load.log_tail(procs.workdir / "litellm.log"),
            )
        await asyncio.sleep(0.5)
    return load.Endpoint(
        "litellm",
        base + "/v1/chat/completions",
        {"authorization": f"Bearer {master_key}", "content-type": "application/json"},
        proc.pid,
    )


async def run(args) -> load.OverheadReport:
    engine_key = secrets.token_urlsafe(24)
    pin = bench.parse_pin(args.pin)
    if "load" in pin:
        os.sched_setaffinity(0, pin["load"])
    exe = ensure_litellm(args.venv)
    # llmgw's steps first: a LiteLLM pushed past what it can answer is still
    # working through what it was sent after its step has given up on it.
    plan = [(rate, m) for rate in args.rates for m in args.modes]
    plan += [(rate, "litellm") for rate in args.litellm_rates]
    progress = bench.Progress(len(plan))
    steps = []
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-") as tmp:
        procs = load.Processes(Path(tmp), pin)
        try:
            upstream, engine_pid = await load.start_sim(procs, engine_key)
            straight = load.Endpoint(
                "straight",
                upstream + "/v1/chat/completions",
                {"authorization": f"Bearer {engine_key}", "content-type": "application/json"},
            )
            through = {
                m: await load.start_gateway(procs, m, upstream, engine_key) for m in args.modes
            }
            through["litellm"] = await start_litellm(procs, exe, upstream, engine_key)
            sessions = load.sessions_for(list(through))
            try:
                for rate, name in plan:
                    progress.begin(f"{name} at {rate} req/s for {args.each_s:g} s")
                    step = await load.measure_step(
                        sessions,
                        straight,
                        through[name],
                        rate=rate,
                        each_s=args.each_s,
                        warmup_s=args.warmup_s,
                        stream=args.stream,
                        engine_pid=engine_pid,
                        quiet_pct=args.wait_quiet,
                    )
                    progress.end(step)
                    steps.append(step)
            finally:
                await asyncio.gather(*(s.close() for s in sessions.values()))
        finally:
            progress.close()
            procs.stop()
    settings = {
        "rates": args.rates,
        "litellm_rates": args.litellm_rates,
        "modes": args.modes,
        "each_s": args.each_s,
        "warmup_s": args.warmup_s,
        "stream": args.stream,
        "answer_tokens": load.ANSWER_TOKENS,
        "pin": args.pin,
        "wait_quiet_pct": args.wait_quiet or 0,
        "litellm": litellm_version(args.venv),
    }
    return load.OverheadReport(machine=load.machine(), settings=settings, steps=steps)


def comparison(report: load.OverheadReport) -> Table:
    """LiteLLM's added latency over llmgw's, at each rate both were measured at."""
    t = Table(title="LiteLLM's added latency over llmgw's (×)", title_justify="left")
    for col in ("rate/s", "llmgw mode", "p50 ×", "p99 ×"):
        t.add_column(col, justify="right")
    by = {(s.mode, s.rate): s for s in report.steps}
    for (mode, rate), lite in sorted(
        ((k, v) for k, v in by.items() if k[0] == "litellm"), key=lambda kv: kv[0][1]
    ):
        for ours_mode in report.settings["modes"]:
            ours = by.get((ours_mode, rate))
            if ours is None:
                continue
            t.add_row(
                str(rate),
                ours_mode,
                _ratio(lite.added_p50_ms, ours.added_p50_ms),
                _ratio(lite.added_p99_ms, ours.added_p99_ms),
            )
    return t


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return "–"
    if b <= 0:
        return "∞ (llmgw added nothing measurable)"
    return f"{a / b:.0f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="100,500,1000", help="llmgw's rates, requests a second")
    p.add_argument("--litellm-rates", default="10,50,100,500", help="LiteLLM's rates")
    p.add_argument("--modes", default="bare,full", help="llmgw's gateway modes")
    p.add_argument("--each", default="10s", help="how long each rate is measured")
    p.add_argument("--warmup", default="1s", help="load before each window, not counted")
    p.add_argument("--stream", action="store_true", help="streamed answers, with TTFT")
    p.add_argument("--pin", default="", help="e.g. gateway=0,engine=1,load=1")
    p.add_argument(
        "--wait-quiet",
        type=float,
        help="before each step, wait (up to 2 min) for the machine to use under this %% of a CPU",
    )
    p.add_argument("--venv", type=Path, default=Path("/tmp/litellm-venv"))
    p.add_argument("--json", type=Path, help="also write the report here")
    args = p.parse_args()
    try:
        args.rates = bench.parse_rates(args.rates)
        args.litellm_rates = bench.parse_rates(args.litellm_rates)
        args.modes = bench.parse_modes(args.modes)
        args.each_s = bench.parse_seconds(args.each)
        args.warmup_s = 0.0 if args.warmup in ("0", "0s") else bench.parse_seconds(args.warmup)
        report = bench.asyncio_run(run(args))
    except LlmgwError as e:
        print(f"error: {e.message}\n{e.hint}", file=sys.stderr)
        return 1
    console = Console()
    console.print(bench.render(report))
    console.print(comparison(report))
    if args.json:
        args.json.write_text(json.dumps(report.model_dump(mode="json"), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
