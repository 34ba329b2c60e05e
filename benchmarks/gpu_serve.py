"""Benchmark: ``model serve`` to ready for the vLLM stand-in, split into its steps.

Each run is a fresh control plane and agent (in this process, real gRPC and
mutual TLS) on the fake 2 x A100 NVLink node (driver R580), a hub on
loopback holding the tiny safetensors repository (tests/fakes/tiny_repo.py),
and the vLLM stand-in's recipe pointing at a package index on loopback. The
node joins without the recipe; then the recipe is set and the model served
(``serve_spec`` + ``put_model``, the admin call ``llmgw ctl model serve
hf:org/tiny --engine vllm --gpus 2`` makes), so the node gets InstallEngine
with the replica, as a node that lacks the engine does. uv's cache is warm
(copied from a first, cold build), the weights cache is cold.

Figures per run, from the replica's history and the node's EngineStatus:

| figure | from |
|---|---|
| env build | the node's first "installing" EngineStatus to "installed": uv venv + uv pip install --require-hashes --exclude-newer + the version check |
| weights fetch | replica "fetching" to "installing": every file of the repository, sha256 checked |
| env wait | replica "installing" to "starting": what the shard still waited for its environment (the build runs beside the fetch) |
| engine start | replica "starting" to "ready": the engine up, /health answering, its memory on its cards |
| serve→ready | the admin call to the replica ready |

Before the runs the environment is also built alone (nothing else running),
with uv's cache cold and then warm.

Printed, never judged. ``.venv/bin/python benchmarks/gpu_serve.py [--runs 3] [--json out.json]``
Exit status: 0 when every run got ready; 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LLMGW_ALLOW_ROOT_ENGINES", "1")  # as the test suite runs

from agentd.engine_provider import LocalEngines
from llmgw.engines.recipes import install_message
from llmgw.present.modelfmt import serve_spec
from tests.cluster_fixture import running_cluster, wait_for
from tests.fakes.engines.fixtures import a100_pair, a100_pair_fixture_file
from tests.fakes.engines.index import LocalIndex
from tests.fakes.engines.stand_ins import StandIns, publish_stand_ins
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

COLUMNS = ("env_build_s", "weights_fetch_s", "env_wait_s", "engine_start_s", "serve_to_ready_s")


async def builds_alone(stand_ins: StandIns, engines_dir: Path) -> tuple[float, float]:
    """Two builds with nothing else running: uv's cache empty, then warm (left so)."""
    took = []
    for _ in range(2):
        engines = LocalEngines(engines_dir)
        engines.manager.inventory = a100_pair()
        started = time.monotonic()
        await engines.install(install_message(stand_ins.release("vllm")))
        took.append(time.monotonic() - started)
        shutil.rmtree(engines_dir / "vllm")  # the install goes; uv's cache stays
    return took[0], took[1]


def _between(history, first: str, then: str) -> float:
    at = {}
    for event in history:
        at.setdefault(event.state, event.at)
    return (at[then] - at[first]).total_seconds()


async def one_run(work: Path, hub: FakeHub, stand_ins: StandIns, warm_cache: Path) -> dict:
    def configure(cfg):
        cfg.hub_url = hub.url

    async with running_cluster(work, configure=configure) as cluster:
        shutil.copytree(warm_cache, cluster.paths.engines_dir / ".uv-cache", copy_function=os.link)
        cfg = cluster.agent_config(
            "a100-pair", fixture=str(a100_pair_fixture_file(work / "a100-pair.json"))
        )
        cfg.hub_url = hub.url
        agent, _stop, _task = await cluster.start_agent("a100-pair", cfg=cfg)
        engine_times: dict[str, float] = {}
        report = agent.engines._report

        def timed(state) -> None:
            if state.engine == "vllm":
                engine_times.setdefault(state.state, time.monotonic())
            report(state)

        agent.engines._report = timed

        async def node_ready():
            async with cluster.admin() as admin:
                return [n.state for n in (await admin.list_nodes()).nodes] == ["ready"]

        await wait_for(node_ready, attempts=400)
        cluster.server.reconciler.set_engines([stand_ins.release("vllm")])
        spec = serve_spec("hf:org/tiny", name="tiny", engine="vllm", gpus=2)
        served_at = datetime.now(UTC)
        async with cluster.admin() as admin:
            await admin.put_model(spec, create_only=True)

        def ready():
            rs = [r for r in cluster.server.reconciler.replicas.values() if r.model == "tiny"]
            return rs[0] if rs and rs[0].state == "ready" else None

        r = await wait_for(ready, attempts=1200, interval_s=0.05)
        ready_at = next(e.at for e in r.history if e.state == "ready")
        return {
            "env_build_s": engine_times["installed"] - engine_times["installing"],
            "weights_fetch_s": _between(r.history, "fetching", "installing"),
            "env_wait_s": _between(r.history, "installing", "starting"),
            "engine_start_s": _between(r.history, "starting", "ready"),
            "serve_to_ready_s": (ready_at - served_at).total_seconds(),
            "gpus": list(r.gpu_indexes),
        }


async def run(runs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="llmgw-gpu-serve-") as tmp:
        tmp_path = Path(tmp)
        with LocalIndex() as index:
            stand_ins = publish_stand_ins(tmp_path / "wheels", index)
            cold_s, warm_s = await builds_alone(stand_ins, tmp_path / "prime")
            warm_cache = tmp_path / "prime" / ".uv-cache"
            async with FakeHub() as hub:
                hub.add_repo("org/tiny", make_tiny_repo().files)
                results = []
                for i in range(runs):
                    results.append(await one_run(tmp_path / f"run{i}", hub, stand_ins, warm_cache))
        return {
            "env_build_alone_cold_uv_cache_s": cold_s,
            "env_build_alone_warm_uv_cache_s": warm_s,
            "runs": results,
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json", type=Path, help="write the figures here too")
    args = p.parse_args(argv)
    try:
        figures = asyncio.run(run(args.runs))
    except AssertionError as e:
        print(f"a run did not get ready: {e}", file=sys.stderr)
        return 1
    print(
        "env build alone: cold uv cache "
        f"{figures['env_build_alone_cold_uv_cache_s']:.2f} s, warm "
        f"{figures['env_build_alone_warm_uv_cache_s']:.2f} s; in the serve, warm:"
    )
    print(" ".join(f"{c:>17}" for c in COLUMNS))
    for r in figures["runs"]:
        print(" ".join(f"{r[c]:>17.2f}" for c in COLUMNS))
    if len(figures["runs"]) > 1:
        med = {c: statistics.median(r[c] for r in figures["runs"]) for c in COLUMNS}
        print(" ".join(f"{med[c]:>17.2f}" for c in COLUMNS), " (median)")
        figures["median"] = med
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
