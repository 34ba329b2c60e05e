"""Benchmark: what llmgw's /mcp adds to a tool call, beside what LiteLLM's MCP gateway adds.

One company MCP server written with the official ``mcp`` SDK (an ``MCPServer``
with one tool, ``echo``, answering at once, under uvicorn in a process of its
own) and in front of it, each a process of its own on 127.0.0.1:

- llmgw: a real gatewayd (``python -m llmgw server`` under a temporary
  LLMGW_HOME, SQLite store), the server added and granted to a key's project
  through the admin API, called at ``/mcp`` with that key;
- LiteLLM's proxy as an MCP gateway (``litellm[proxy]``, pinned, in a
  virtualenv of its own made with ``uv``; no database, a master key, the
  server under ``mcp_servers`` in its config.yaml), called at its ``/mcp``.

The load is ``tools/call echo`` sent open loop (on a fixed schedule, whatever
the answers do) straight to the server and through one gateway, the two
interleaved half a period apart so both meet the same machine; what the
gateway adds is the difference per percentile. Both protocol generations:
2026-07-28 (stateless, routing headers on every POST) and the session-based
2025-11-25 (``initialize``, ``Mcp-Session-Id``). The client is lean raw
JSON-RPC over aiohttp (benchmarks/mcp_load.py) — the SDK's own client spends
~4 ms a call, more than what is measured — with its handshake done once per
path, and the same client is used for every path. ``--gateways direct`` puts
the server itself in the gateway's place: the figures' noise floor.

Printed, never judged. Run:
``python benchmarks/mcp_overhead.py [--rates 100,500] [--each 10s] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
from mcp_load import (
    HOST,
    LEGACY,
    MODERN,
    SERVER,
    CallFailed,
    McpPath,
    measure_step,
    serve_tool_server,
)

from llmgw.cli.ctl.bench_load import log_tail, machine

REPO = Path(__file__).resolve().parents[1]

GENERATIONS = {"2026-07-28": MODERN, "legacy": LEGACY}
# The pin the figures were taken with: a newer LiteLLM may be faster or slower.
LITELLM_PIN = "litellm[proxy]==1.108.7"
PROJECT = "Bench/mcp/overhead"
REQUEST_TIMEOUT_S = 30.0
START_TIMEOUT_S = 60.0
# LiteLLM spends many seconds importing.
LITELLM_START_TIMEOUT_S = 180.0


# ---- the processes ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Processes:
    """The subprocesses of one run, each logging to a file; TERM then KILL at the end."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._procs: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str], env: dict[str, str | None] | None = None):
        """Start ``argv`` with this environment and ``env`` (a None value removes the name)."""
        full = {**os.environ, **(env or {})}
        with (self.workdir / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                argv,
                env={k: v for k, v in full.items() if v is not None},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=REPO,
            )
        self._procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return log_tail(self.workdir / f"{name}.log", 25)

    async def until(self, name: str, proc, ready, timeout_s: float = START_TIMEOUT_S):
        """Poll the (blocking) ``ready`` until it gives something; RuntimeError if it never does."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = await asyncio.to_thread(ready)
            if value:
                return value
            if proc.poll() is not None:
                break
            await asyncio.sleep(0.2)
        raise RuntimeError(
            f"the {name} did not start (exit status {proc.poll()}):\n{self.log(name)}"
        )

    def stop(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def start_tool_server(procs: Processes, name: str) -> tuple[str, int]:
    """The SDK server; its MCP address and pid."""
    port = free_port()
    argv = [sys.executable, str(Path(__file__).resolve()), "--serve-tool-server", str(port)]
    proc = procs.start(name, argv)

    def ready() -> str:
        for line in procs.log(name).splitlines():
            if line.startswith("READY "):
                return line.split(" ", 1)[1]
        return ""

    return await procs.until(name, proc, ready), proc.pid


async def start_llmgw(
    procs: Processes, server_url: str, cprofile: Path | None = None
) -> tuple[McpPath, str]:
    """A real gatewayd with the server added and granted to a key's project.

    Its /mcp path, and the address of its Prometheus metrics.
    """
    from llmgw.admin_client import AdminClient
    from llmgw.config import dump_yaml, load_server_config
    from llmgw.errors import LlmgwError
    from llmgw.fsutil import write_atomic
    from llmgw.paths import Paths
    from llmgw.setup.cluster_init import init_server
    from proto.llmgw.v1 import PutMcpServerRequest

    paths = Paths.under(procs.workdir / "llmgw-home")
    init_server(paths, hosts=[HOST], cluster_name="bench")
    ports = {name: free_port() for name in ("agent", "admin", "http", "metrics")}
    cfg = load_server_config(paths.server_yaml)
    for name, port in ports.items():
        setattr(cfg.listen, name, f"{HOST}:{port}")
    # Every call comes from 127.0.0.1: one address, so its bound is the total's (a backlog
    # at 500/s opens hundreds of connections, which the per-address bound would refuse).
    cfg.connections.max_per_address = cfg.connections.max_total
    write_atomic(paths.server_yaml, dump_yaml(cfg))
    prefix = ["-m", "cProfile", "-o", str(cprofile)] if cprofile else []
    proc = procs.start(
        "gatewayd",
        [sys.executable, *prefix, "-m", "llmgw", "server"],
        {"LLMGW_HOME": str(paths.home)},
    )
    token = paths.admin_token_file.read_text().strip()
    async with AdminClient(f"{HOST}:{ports['admin']}", token) as admin:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                await admin.status()
                break
            except LlmgwError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"gatewayd did not start:\n{procs.log('gatewayd')}"
                    ) from None
                await asyncio.sleep(0.2)
        await admin.create_tenant("project", PROJECT, parents=True)
        key = await admin.create_key(PROJECT, name="mcp-bench")
        await admin.put_mcp_server(
            PutMcpServerRequest(name=SERVER, create=True, url=server_url, enabled=True)
        )
        await admin.grant_mcp(PROJECT, SERVER)
    path = McpPath(
        "llmgw",
        f"http://{HOST}:{ports['http']}/mcp",
        {"authorization": f"Bearer {key.secret}"},
        "",
        proc.pid,
    )
    return path, f"http://{HOST}:{ports['metrics']}/metrics"


def counted_calls(metrics_url: str) -> dict[str, int]:
    """gatewayd's own count of tools/call by how they ended (llmgw_mcp_calls_total)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(metrics_url, timeout=5) as r:
        text = r.read().decode()
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "llmgw_mcp_calls_total":
                status = sample.labels["status"]
                counts[status] = counts.get(status, 0) + int(sample.value)
    return counts


def ensure_litellm(venv: Path) -> Path:
    """The ``litellm`` command of ``venv`` (made with uv, the pinned release from PyPI)."""
    exe = venv / "bin" / "litellm"
    if exe.exists():
        return exe
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    print(f"installing {LITELLM_PIN} into {venv} with uv (once; a minute or two)", file=sys.stderr)
    subprocess.run([uv, "venv", "-q", "-p", "3.11", str(venv)], check=True)
    subprocess.run(
        [uv, "pip", "install", "-q", LITELLM_PIN],
        check=True,
        env={**os.environ, "VIRTUAL_ENV": str(venv)},
    )
    return exe


def litellm_version(venv: Path) -> str:
    res = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print(m.version('litellm'), 'mcp', m.version('mcp'))",
        ],
        capture_output=True,
        text=True,
    )
    return res.stdout.strip() or "unknown"


LITELLM_CONFIG = """\
model_list: []
mcp_servers:
  {server}:
    url: {url}
    transport: http
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  # 2026-07-28 is served only when listed: by default LiteLLM answers it 400.
  mcp_advertised_versions: ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]
"""


async def start_litellm(procs: Processes, venv: Path, server_url: str) -> McpPath:
    """LiteLLM's proxy with the server under mcp_servers: one worker, no database."""
    exe = await asyncio.to_thread(ensure_litellm, venv)
    config = procs.workdir / "litellm.yaml"
    config.write_text(LITELLM_CONFIG.format(server=SERVER, url=server_url))
    port = free_port()
    master_key = "sk-" + secrets.token_hex(32)
    env = {
        "LITELLM_MASTER_KEY": master_key,
        # The machine may have no way out: the price map shipped in the package.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "DATABASE_URL": None,  # no database: LiteLLM keeps nothing
    }
    argv = [str(exe), "--config", str(config), "--host", HOST, "--port", str(port)]
    proc = procs.start("litellm", [*argv, "--num_workers", "1"], env)
    base = f"http://{HOST}:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(base + "/health/liveliness", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    await procs.until("litellm", proc, ready, LITELLM_START_TIMEOUT_S)
    return McpPath(
        "litellm", base + "/mcp", {"x-litellm-api-key": f"Bearer {master_key}"}, "", proc.pid
    )


# ---- the run ---------------------------------------------------------------------------------


async def run(args) -> dict:
    report: dict = {
        "machine": machine(),
        "settings": {
            "rates": args.rates,
            "litellm_rates": args.litellm_rates,
            "each_s": args.each_s,
            "warmup_s": args.warmup_s,
            "generations": args.generations,
            "gateways": args.gateways,
        },
        "gateways": {},
        "steps": [],
    }
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    workdir = Path(tempfile.mkdtemp(prefix="llmgw-mcp-bench-"))
    report["workdir"] = str(workdir) if args.keep else ""
    try:
        procs = Processes(workdir)
        sessions: list[aiohttp.ClientSession] = []
        opened: list[McpPath] = []
        try:
            # Two processes of the same server, one per path: at 500/s each path alone
            # keeps a Python server's core busy (~1.7 ms of CPU a call).
            direct_url, direct_pid = await start_tool_server(procs, "tool-server-direct")
            server_url, server_pid = await start_tool_server(procs, "tool-server-behind")
            server_pids = (direct_pid, server_pid)
            gateways: dict[str, McpPath] = {}
            for name in args.gateways:
                try:
                    if name == "direct":
                        # The other server straight: the figures' noise floor (added ≈ 0).
                        gateways[name] = McpPath("direct", server_url, {}, "")
                        report["gateways"][name] = {"started": True}
                    elif name == "llmgw":
                        gateways[name], metrics_url = await start_llmgw(
                            procs, server_url, args.cprofile
                        )
                        report["gateways"][name] = {"started": True, "metrics": metrics_url}
                    else:
                        gateways[name] = await start_litellm(procs, args.litellm_venv, server_url)
                        report["gateways"][name] = {
                            "started": True,
                            "version": litellm_version(args.litellm_venv),
                        }
                except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
                    report["gateways"][name] = {"started": False, "error": str(e)[-2000:]}
                    print(f"{name} could not be started: {e}", file=sys.stderr)
            # llmgw's steps first: a LiteLLM pushed past what it can answer is still working
            # through its backlog after its step has given up on it.
            # Low rates first: an overloaded step's backlog (and the breaker it opens) must
            # not reach a step the machine can carry.
            plan = [
                (name, gen_name, rate)
                for name in gateways
                for rate in (args.litellm_rates if name == "litellm" else args.rates)
                for gen_name in args.generations
            ]
            for name, gen_name, rate in plan:
                generation = GENERATIONS[gen_name]
                direct = McpPath("direct", direct_url, {}, generation, direct_pid)
                through = McpPath(
                    name, gateways[name].url, gateways[name].headers, generation, gateways[name].pid
                )
                try:
                    for path in (direct, through):
                        session = aiohttp.ClientSession(
                            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
                            timeout=timeout,
                        )
                        sessions.append(session)
                        await path.open(session)
                        opened.append(path)
                except CallFailed as e:
                    step = {
                        "gateway": name,
                        "generation": generation,
                        "rate": rate,
                        "error": f"{path.name} would not open: {e}",
                    }
                else:
                    print(f"{name} {gen_name} at {rate}/s …", file=sys.stderr, flush=True)
                    step = await measure_step(
                        direct,
                        through,
                        rate=rate,
                        each_s=args.each_s,
                        warmup_s=args.warmup_s,
                        server_pids=server_pids,
                    )
                report["steps"].append(step)
            if "llmgw" in gateways:
                # Every call through it, warm-ups too, as its metrics port counts them.
                llmgw = report["gateways"]["llmgw"]
                llmgw["counted_calls"] = await asyncio.to_thread(counted_calls, llmgw["metrics"])
        finally:
            for path in opened:
                await path.close()
            for session in sessions:
                await session.close()
            procs.stop()
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return report


def render(report: dict) -> str:
    head = (
        f"{'gateway':<8} {'generation':<10} {'rate/s':>6} {'sent':>6} {'fail':>5} "
        f"{'direct p50/p99 ms':>18} {'through p50/p99 ms':>19} {'added p50/p99 ms':>17} "
        f"{'gw CPU ms/call':>14} {'lag p99':>7}"
    )
    lines = [head]

    def pair(a, b) -> str:
        return f"{_f(a)}/{_f(b)}"

    for s in report["steps"]:
        if "error" in s:
            lines.append(f"{s['gateway']:<8} {s['generation']:<10} {s['rate']:>6}  {s['error']}")
            continue
        d, t = s["direct"], s["through"]
        lines.append(
            f"{s['gateway']:<8} {s['generation']:<10} {s['rate']:>6} {t['sent']:>6} "
            f"{s['failed']:>5} {pair(d['p50_ms'], d['p99_ms']):>18} "
            f"{pair(t['p50_ms'], t['p99_ms']):>19} "
            f"{pair(s['added_p50_ms'], s['added_p99_ms']):>17} "
            f"{_f(s['gateway_cpu_ms_per_call']):>14} {_f(s['load_lag_p99_ms']):>7}"
        )
        if s["machine_limited"]:
            lines.append(f"{'':<26}the machine, not the gateway, was the limit in this step")
        for where in ("direct", "through"):
            if s[where]["failures"]:
                lines.append(f"{'':<26}{where} failures: {s[where]['failures']}")
    if report["workdir"]:
        lines.append(f"logs kept in {report['workdir']}")
    for name, g in report["gateways"].items():
        if not g.get("started"):
            lines.append(f"{name}: not measured — {g.get('error', '')[:500]}")
        elif g.get("version"):
            lines.append(f"{name}: {g['version']}")
        if g.get("counted_calls"):
            lines.append(f"{name} counted the calls through it as {g['counted_calls']}")
    return "\n".join(lines)


def _f(v) -> str:
    return "–" if v is None else f"{v:.2f}"


def _loop_run(coro):
    """On uvloop where installed, as gatewayd runs: the client costs less than it measures."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _seconds(text: str) -> float:
    return float(text.removesuffix("s"))


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-tool-server":
        serve_tool_server(int(sys.argv[2]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="100,500", help="calls a second on each path")
    p.add_argument("--litellm-rates", help="LiteLLM's rates (default: --rates)")
    p.add_argument("--each", default="10s", help="how long each step is measured")
    p.add_argument("--warmup", default="1s", help="load before each window, not counted")
    p.add_argument("--generations", default="2026-07-28,legacy")
    p.add_argument(
        "--gateways",
        default="llmgw,litellm",
        help="direct (the server twice: noise), llmgw, litellm",
    )
    p.add_argument("--litellm-venv", type=Path, default=Path("/tmp/llmgw-bench-litellm-mcp"))
    p.add_argument(
        "--cprofile", type=Path, help="run gatewayd under cProfile, its profile written here"
    )
    p.add_argument("--keep", action="store_true", help="keep the work folder (the logs)")
    p.add_argument("--json", type=Path, help="also write the report here")
    args = p.parse_args()
    try:
        args.rates = [int(r) for r in args.rates.split(",") if r]
        args.litellm_rates = [int(r) for r in (args.litellm_rates or "").split(",") if r]
        args.litellm_rates = args.litellm_rates or args.rates
        args.each_s = _seconds(args.each)
        args.warmup_s = _seconds(args.warmup)
    except ValueError as e:
        p.error(str(e))
    args.generations = [g for g in args.generations.split(",") if g]
    args.gateways = [g for g in args.gateways.split(",") if g]
    for g in args.generations:
        if g not in GENERATIONS:
            p.error(f"--generations: {g!r} is not one of {', '.join(GENERATIONS)}")
    for g in args.gateways:
        if g not in ("direct", "llmgw", "litellm"):
            p.error(f"--gateways: {g!r} is not direct (the noise floor), llmgw or litellm")
    if min(args.rates + args.litellm_rates, default=0) <= 0:
        p.error("--rates: each rate must be above 0")
    try:
        report = _loop_run(run(args))
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
