"""The ``sim`` engine: an OpenAI-compatible simulator with vLLM's metrics and no model.

For benchmarks, demos and the gateway's routing, load and fault tests — never
a stand-in for a real engine in a test of real inference. Run it as

    python -m agentd.sim --port 8001 --model demo [--ttft-ms 50] [--itl-ms 10] [--tokens 32]

The engine key comes from ``LLMGW_ENGINE_KEY`` (unset once read), never from
the command line. SIGTERM or Ctrl-C stops it cleanly with exit code 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from agentd.sim.server import SimConfig, SimServer, serve

KEY_ENV = "LLMGW_ENGINE_KEY"


def parse_args(argv: Sequence[str] | None = None) -> SimConfig:
    """The SimConfig the command line asks for; the key comes from the environment."""
    # No abbreviations: what the agent's flag check refuses is then exactly
    # what this parser would have read.
    p = argparse.ArgumentParser(
        prog="python -m agentd.sim",
        allow_abbrev=False,
        description="An OpenAI-compatible engine simulator with vLLM-style metrics.",
    )
    p.add_argument("--model", required=True, help="the model name it serves")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--ttft-ms", type=float, default=50.0, help="time to the first token")
    p.add_argument("--itl-ms", type=float, default=10.0, help="time between tokens")
    p.add_argument("--tokens", type=int, default=32, help="tokens in an answer")
    p.add_argument(
        "--max-concurrency",
        type=int,
        default=0,
        help="requests generated at once; others wait (0: no limit)",
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=0,
        help="longest prompt + answer in tokens (0: no limit)",
    )
    p.add_argument(
        "--load-ms",
        type=float,
        default=0.0,
        help="/health answers 503 for this long, like an engine loading",
    )
    p.add_argument("--embedding-dim", type=int, default=64)
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="the cores it was given (read for llama.cpp's sake; the sim needs none)",
    )
    a = p.parse_args(argv)
    for name in ("ttft_ms", "itl_ms", "tokens", "max_concurrency", "max_model_len", "load_ms"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must not be negative")
    if a.embedding_dim < 1:
        p.error("--embedding-dim must be at least 1")
    # Read once and unset, so nothing the sim might start inherits it.
    key = os.environ.pop(KEY_ENV, "")
    return SimConfig(
        model=a.model,
        host=a.host,
        port=a.port,
        ttft_ms=a.ttft_ms,
        itl_ms=a.itl_ms,
        tokens=a.tokens,
        max_concurrency=a.max_concurrency,
        max_model_len=a.max_model_len,
        load_ms=a.load_ms,
        embedding_dim=a.embedding_dim,
        api_key=key,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulator until SIGTERM or SIGINT; the exit code (0 on a clean stop)."""
    cfg = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s sim: %(message)s")

    def ready(host: str, port: int) -> None:
        # One line on stdout that tests and people can wait for (--port 0 says the port).
        print(f"llmgw sim: serving {cfg.model} on http://{host}:{port}", flush=True)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(cfg, stop, ready)

    try:
        asyncio.run(run())
    except OSError as e:  # the port is taken, the address is not ours
        print(
            f"llmgw sim: cannot listen on {cfg.host}:{cfg.port}: {e.strerror or e}", file=sys.stderr
        )
        return 1
    return 0


__all__ = ["KEY_ENV", "SimConfig", "SimServer", "main", "parse_args", "serve"]
