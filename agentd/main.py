"""Entry point of ``llmgw agent``: run agentd until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from agentd.agent import Agent
from agentd.discovery import probe_for
from llmgw.aio import run_loop
from llmgw.config import load_agent_config
from llmgw.paths import Paths


def main(paths: Paths, config_path: Path | None = None) -> None:
    cfg = load_agent_config(config_path or paths.agent_yaml)
    logging.basicConfig(
        level=cfg.log_level.upper(),
        format="%(asctime)s %(levelname)s agentd %(name)s: %(message)s",
    )
    data_dir = Path(cfg.data_dir) if cfg.data_dir else paths.agent_data_dir
    agent = Agent(cfg, paths, probe=probe_for(cfg.hardware, data_dir))

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await agent.run(stop)

    run_loop(_main())


async def stop_engines(paths: Paths, config_path: Path | None = None, grace_s: float = 10.0) -> int:
    """Stop every engine this node's agent left running (it is already stopped).

    A real node keeps engines across agent restarts; `llmgw up` stopping is
    the whole cluster going away, so nothing of it may stay behind.
    """
    from agentd.supervisor.process import group_members, same_process, signal_group
    from agentd.supervisor.state import read_records, remove_record

    cfg = load_agent_config(config_path or paths.agent_yaml)
    data_dir = Path(cfg.data_dir) if cfg.data_dir else paths.agent_data_dir
    state_dir = data_dir / "shards"
    records, _ = read_records(state_dir)
    live = [r for r in records if same_process(r.pid, r.start_time)]
    for r in live:
        signal_group(r.pgid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while loop.time() < deadline and any(group_members(r.pgid) for r in live):
        await asyncio.sleep(0.1)
    for r in live:
        if group_members(r.pgid):
            signal_group(r.pgid, signal.SIGKILL)
    for r in records:
        remove_record(state_dir, r.shard_id)
    await _close_doors(data_dir / "doors")
    return len(live)


async def _close_doors(doors_dir: Path) -> None:
    """End every engine door of the node (agentd/door): with their engines gone they would
    linger until they noticed."""
    if not doors_dir.is_dir():
        return
    from agentd.door.keeper import DoorKeeper

    keeper = DoorKeeper(doors_dir, "127.0.0.1", None)
    for path in sorted(doors_dir.glob("*.json")):
        await keeper.close(path.stem)
