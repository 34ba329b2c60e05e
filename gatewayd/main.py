"""Entry point of ``llmgw server``: run gatewayd until SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from gatewayd.server import run
from llmgw.aio import run_loop
from llmgw.config import load_server_config
from llmgw.paths import Paths


def main(paths: Paths, config_path: Path | None = None) -> None:
    cfg = load_server_config(config_path or paths.server_yaml)
    logging.basicConfig(
        level=cfg.log_level.upper(),
        format="%(asctime)s %(levelname)s gatewayd %(name)s: %(message)s",
    )

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(cfg, paths, stop)

    run_loop(_main())
