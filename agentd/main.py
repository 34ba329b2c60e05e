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
