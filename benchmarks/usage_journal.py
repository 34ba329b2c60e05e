"""Benchmark: what the durable usage path (the usage journal) adds to a request.

The same instant ``sim`` engine, open-loop load and request as ``llmgw ctl
bench overhead`` (its code), in one run: the gateway in its ``full`` mode with
the usage journal (a request's row fdatasync'd, in a group, before its answer
ends, as gatewayd does) and without it (``LLMGW_BENCH_USAGE_JOURNAL=off``:
rows in memory until the next batch), each measured against the engine
straight, the two measured in turns at each rate.

Printed, never judged. Run:
``python benchmarks/usage_journal.py [--rates 500] [--each 10] [--rounds 2] [--stream]``.
The journal lives where the bench's store does (the system's temporary
folder): what an fdatasync costs there is what is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import sys
import tempfile
from pathlib import Path

from llmgw.cli.ctl.bench_load import (
    MODEL,
    Endpoint,
    Processes,
    child_env,
    measure_step,
    sessions_for,
    start_sim,
)


async def start_full(procs: Processes, name: str, upstream: str, key: str, journal: bool):
    ready_file = procs.workdir / f"{name}.json"
    argv = [sys.executable, "-m", "gatewayd.bench_server", "--upstream", upstream]
    argv += ["--model", MODEL, "--listen", "127.0.0.1:0", "--mode", "full"]
    argv += ["--ready-file", str(ready_file)]
    env = child_env(LLMGW_ENGINE_KEY=key, LLMGW_BENCH_USAGE_JOURNAL="on" if journal else "off")
    proc = procs.start("gateway", name, argv, env)

    def ready() -> dict | None:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(ready_file.read_text())
        return None

    info = await procs.wait_for(name, proc, ready)
    headers = {"authorization": f"Bearer {info['key']}", "content-type": "application/json"}
    url = f"http://127.0.0.1:{info['port']}/v1/chat/completions"
    return Endpoint(name, url, headers, proc.pid)


async def main(rates: list[int], each_s: float, rounds: int, stream: bool) -> None:
    key = secrets.token_urlsafe(24)
    names = ["journal", "memory"]
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-journal-") as tmp:
        procs = Processes(Path(tmp), {})
        try:
            upstream, engine_pid = await start_sim(procs, key)
            straight = Endpoint(
                "straight",
                upstream + "/v1/chat/completions",
                {"authorization": f"Bearer {key}", "content-type": "application/json"},
            )
            gateways = {n: await start_full(procs, n, upstream, key, n == "journal") for n in names}
            sessions = sessions_for(names)
            try:
                print("rate  usage path  sent  failed  added p50 ms  added p99 ms  cpu s/1k")
                for rate in rates:
                    for _ in range(rounds):
                        for n in names:
                            s = await measure_step(
                                sessions, straight, gateways[n], rate=rate, each_s=each_s,
                                warmup_s=2.0, stream=stream, engine_pid=engine_pid,
                            )  # fmt: skip
                            print(
                                f"{rate:>4}  {n:<10}  {s.sent:>5}  {s.failed:>6}"
                                f"  {s.added_p50_ms:>12.2f}  {s.added_p99_ms:>12.2f}"
                                f"  {s.gateway_cpu_s_per_1k or 0:>8.2f}",
                                flush=True,
                            )
            finally:
                await asyncio.gather(*(s.close() for s in sessions.values()))
        finally:
            procs.stop()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="500")
    p.add_argument("--each", type=float, default=10.0, help="seconds measured per step")
    p.add_argument("--rounds", type=int, default=2, help="turns of both paths per rate")
    p.add_argument("--stream", action="store_true")
    a = p.parse_args()
    asyncio.run(main([int(r) for r in a.rates.split(",")], a.each, a.rounds, a.stream))
