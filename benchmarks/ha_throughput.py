"""Benchmark: the client API through HAProxy with one control plane in its pool, then three.

The fault suite's deployment, from its own harness (tests/faults/harness): etcd
and one PostgreSQL under Patroni, three ``llmgw server`` on that store,
HAProxy with deploy/haproxy's config in front, one agent serving one replica
of an instant ``sim`` engine (no time to a first token, none between tokens).
The same open-loop load at each rate (``llmgw ctl bench overhead``'s, its
code): once with HAProxy's client pool holding cp1 alone, once with all three;
each step measured against the replica called straight, in turns.

Also what one gatewayd holds on one core: the control planes' CPU over each
step, per request, and 1000 / (CPU ms a request) requests a second.

Printed, never judged. Needs Debian's etcd-server, patroni and haproxy, and
PostgreSQL. Run (as root, as the fault suite does):
``python benchmarks/ha_throughput.py [--rates 100,200,400] [--each 10] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gatewayd.gateway.routing.engine_access import replica_key
from llmgw.cli.ctl.bench_load import (
    ANSWER_TOKENS,
    MODEL,
    Endpoint,
    cpu_s,
    measure_step,
    sessions_for,
)
from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.faults.harness import etcd_server, haproxy, patroni_cluster, wait_until
from tests.faults.harness.llmgw_cluster import llmgw_cluster

# As the test suite does: run as root on a throwaway machine, the agent may run its
# engines as root (agentd/supervisor/users.py); nothing here makes real users.
os.environ.setdefault("LLMGW_ALLOW_ROOT_ENGINES", "1")

PROJECT = "bench/ha/throughput"
# Requests the engine takes at once: more than any step keeps in flight.
SLOTS = 256


def _model() -> ModelSpec:
    instant = ["--ttft-ms", "0", "--itl-ms", "0", "--tokens", str(ANSWER_TOKENS)]
    return ModelSpec(
        name=MODEL,
        source="/models/none.gguf",
        profiles=[ModelProfile(name="default", engine="sim", args=instant, startup_timeout_s=60)],
        replicas_min=1,
        replicas_max=1,
        slots=SLOTS,
    )


async def _answers(url: str, secret: str) -> bool:
    import httpx

    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    try:
        async with httpx.AsyncClient(timeout=5) as c:
            r = await c.post(f"{url}/v1/chat/completions", json=body,
                             headers={"authorization": f"Bearer {secret}"})  # fmt: skip
        return r.status_code == 200
    except httpx.HTTPError:
        return False


async def main(rates: list[int], each_s: float, out: Path | None) -> None:
    root = Path(tempfile.mkdtemp(prefix="llmgw-bench-ha-", dir="/tmp"))
    root.chmod(0o755)  # Patroni runs as the postgres user
    report: dict = {"rates": rates, "each_s": each_s, "cpus": os.cpu_count(), "steps": []}
    try:
        async with (
            etcd_server(root / "etcd") as etcd,
            patroni_cluster(root / "pg", etcd, members=1) as pg,
            llmgw_cluster(root / "llmgw", pg) as cluster,
        ):
            cps = cluster.control_planes
            leader = await cluster.leader()
            async with leader.admin() as admin:
                await admin.put_model(_model(), create_only=True)
                await admin.create_tenant("project", PROJECT, parents=True)
                key = await admin.create_key(PROJECT, name="bench")

                async def ready_replica():
                    reps = (await admin.list_replicas(MODEL)).replicas
                    ready = [r for r in reps if r.state == "ready" and r.endpoint]
                    return ready[0] if ready else None

                try:
                    replica = await wait_until(ready_replica, timeout_s=90, what="the replica")
                except AssertionError:
                    print((await admin.list_replicas(MODEL)).replicas, file=sys.stderr)
                    print(await admin.explain_placement(MODEL), file=sys.stderr)
                    raise
            for cp in cps:  # standbys read keys from the store every 2 s
                await wait_until(lambda cp=cp: _answers(cp.http_url, key.secret), timeout_s=60,
                                 what=f"the key on {cp.name}")  # fmt: skip
            secret = (leader.paths.secrets_dir / "engine-key").read_text().strip()
            # Asked at the replica's door with its own key, as the gateway asks it.
            engine_key = replica_key(secret, replica.replica_id, replica.restarts, 0)
            straight = Endpoint(
                "straight",
                replica.endpoint.rstrip("/") + "/v1/chat/completions",
                {"authorization": f"Bearer {engine_key}", "content-type": "application/json"},
            )
            print("pool  rate  sent  failed  achieved/s  p50 ms  p99 ms  added p50  added p99"
                  "  gatewayd CPU ms/req  req/s a core")  # fmt: skip
            for pool in (cps[:1], cps):
                name = f"{len(pool)} cp"
                async with haproxy(
                    root / f"lb-{len(pool)}", [cp.http_address for cp in pool]
                ) as lb:
                    await wait_until(lambda: _answers(lb.url, key.secret), timeout_s=30,
                                     what="an answer through HAProxy")  # fmt: skip
                    through = Endpoint(
                        name,
                        lb.url + "/v1/chat/completions",
                        {"authorization": f"Bearer {key.secret}",
                         "content-type": "application/json"},
                    )  # fmt: skip
                    sessions = sessions_for([name])
                    try:
                        for rate in rates:
                            pids = [cp.proc.pid for cp in cps if cp.proc is not None]
                            before = [cpu_s(p) or 0.0 for p in pids]
                            s = await measure_step(
                                sessions, straight, through, rate=rate, each_s=each_s,
                                warmup_s=2.0, stream=False, engine_pid=replica.pid or None,
                            )  # fmt: skip
                            # The warm-up is in the CPU too: counted over what was sent.
                            spent = sum((cpu_s(p) or 0.0) for p in pids) - sum(before)
                            sent = s.through.sent + int(rate * 2.0)
                            ms_per_req = spent / max(sent, 1) * 1000
                            per_core = 1000 / ms_per_req if ms_per_req else 0.0
                            row = {"pool": len(pool), "rate": rate, "sent": s.through.sent,
                                   "failed": s.through.failed, "achieved": s.achieved_rate,
                                   "p50_ms": s.through.p50_ms, "p99_ms": s.through.p99_ms,
                                   "added_p50_ms": s.added_p50_ms, "added_p99_ms": s.added_p99_ms,
                                   "gatewayd_cpu_ms_per_req": round(ms_per_req, 3),
                                   "req_s_per_core": round(per_core),
                                   "failures": s.through.failures}  # fmt: skip
                            report["steps"].append(row)
                            print(
                                f"{name:>4}  {rate:>4}  {s.through.sent:>4}  {s.through.failed:>6}"
                                f"  {s.achieved_rate:>10}  {s.through.p50_ms or 0:>6.2f}"
                                f"  {s.through.p99_ms or 0:>6.2f}  {s.added_p50_ms or 0:>9.2f}"
                                f"  {s.added_p99_ms or 0:>9.2f}  {ms_per_req:>19.2f}"
                                f"  {per_core:>12.0f}",
                                flush=True,
                            )
                    finally:
                        await asyncio.gather(*(x.close() for x in sessions.values()))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if out is not None:
        out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="100,200,400")
    p.add_argument("--each", type=float, default=10.0, help="seconds measured per step")
    p.add_argument("--json", type=Path, default=None, help="write the figures here too")
    a = p.parse_args()
    asyncio.run(main([int(r) for r in a.rates.split(",")], a.each, a.json))
