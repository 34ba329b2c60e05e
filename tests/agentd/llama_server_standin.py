"""Plays ``llama-server`` on a fake GPU node: llama.cpp's flags in, /health and the OpenAI API out.

It is started by the real agent from the llama.cpp adapter's command line.
Given layers on the GPU (``--n-gpu-layers`` other than 0, no ``--device
none``) it "loads onto its cards" as the fake GPU probe's contract says
(agentd/discovery/fake.py): it writes what it holds to
``$LLMGW_FAKE_GPU_PROCS/<pid>.json`` for its CUDA_VISIBLE_DEVICES. Unless its
model file's name ends in ``-cpu-fallback.gguf``: then it plays a llama.cpp
whose GPU backend did not load, which answers all the same, on the CPU.
Only the standard library: it runs from any Python.
"""

from __future__ import annotations

import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HELD_BYTES = 2 * 2**30


def hold_cards() -> None:
    procs = os.environ["LLMGW_FAKE_GPU_PROCS"]
    os.makedirs(procs, exist_ok=True)
    entry = {
        "pid": os.getpid(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "used_bytes_per_gpu": HELD_BYTES,
    }
    tmp = os.path.join(procs, f".{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(entry, f)
    os.rename(tmp, os.path.join(procs, f"{os.getpid()}.json"))


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--model", required=True)
    p.add_argument("--alias", default="model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--n-gpu-layers", default="0")
    p.add_argument("--device", default="")
    args, _ = p.parse_known_args()
    on_gpu = args.device != "none" and args.n_gpu_layers != "0"
    falls_back = args.model.endswith("-cpu-fallback.gguf")
    if on_gpu and not falls_back:
        hold_cards()
        print(f"offloaded all layers to CUDA{os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
    else:
        print("no usable GPU found, running on the CPU", flush=True)

    class Handler(BaseHTTPRequestHandler):
        def _json(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json({"status": "ok"})
            elif self.path.startswith("/v1/models"):
                self._json({"object": "list", "data": [{"id": args.alias, "object": "model"}]})
            else:
                self._json({})

        def log_message(self, *a) -> None:
            pass

    print(f"server is listening on http://{args.host}:{args.port}", flush=True)
    ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
