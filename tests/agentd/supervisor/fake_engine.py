"""A small program that plays an engine for the supervisor's tests.

It prints lines (``$NAME`` in them as that variable's value), serves /health
on a port (503 until a delay has passed, then 200), starts a child of its
own, ignores SIGTERM, writes a line once a file appears, or exits with a
code — each on request, from the command line.
With ``--hold-gpu BYTES`` it "uses" its cards as the fake GPU probe's
contract says (agentd/discovery/fake.py): it writes what it holds to
``$LLMGW_FAKE_GPU_PROCS/<pid>.json`` (from its child with ``--hold-in-child``,
once a file exists with ``--hold-when``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHILD = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"


def serve(port: int, healthy_at: float) -> None:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = self.path == "/health" and time.monotonic() >= healthy_at
            self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(b'{"status":"ok"}' if ok else b'{"status":"loading"}')

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def hold_gpus(used_bytes: int, visible: str | None = None, pid: int | None = None) -> None:
    """Say, as a GPU engine would by allocating, that this process holds memory on its cards."""
    procs = os.environ["LLMGW_FAKE_GPU_PROCS"]
    os.makedirs(procs, exist_ok=True)
    pid = pid or os.getpid()
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    entry = {"pid": pid, "cuda_visible_devices": visible, "used_bytes_per_gpu": used_bytes}
    tmp = os.path.join(procs, f".{pid}.tmp")
    with open(tmp, "w") as f:
        json.dump(entry, f)
    os.rename(tmp, os.path.join(procs, f"{pid}.json"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--health-after", type=float, default=0.0)
    p.add_argument("--say", action="append", default=[], help="$NAME: the variable's value")
    p.add_argument("--exit-after", type=float)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--child", action="store_true")
    p.add_argument("--flood", type=int, default=0, help="bytes of output at start")
    p.add_argument("--when", nargs=2, metavar=("FILE", "LINE"), help="print LINE once FILE exists")
    p.add_argument("--exit-when", metavar="FILE", help="exit with --exit-code once FILE exists")
    p.add_argument("--tick", type=float, default=0.0, help="print a line this often")
    p.add_argument("--hold-gpu", type=int, default=0, help="bytes held on each visible card")
    p.add_argument("--hold-on", help="the cards held, in place of $CUDA_VISIBLE_DEVICES")
    p.add_argument("--hold-in-child", action="store_true", help="held by a child process")
    p.add_argument("--hold-when", metavar="FILE", help="hold only once FILE exists")
    args = p.parse_args()

    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in args.say:
        print(os.path.expandvars(line), flush=True)
    if args.flood:
        sys.stdout.write(("x" * 99 + "\n") * (args.flood // 100))
        sys.stdout.flush()
    if args.child:
        child = subprocess.Popen([sys.executable, "-c", CHILD])
        print(f"child pid {child.pid}", flush=True)
    if args.port:
        serve(args.port, time.monotonic() + args.health_after)
        print(f"listening on {args.port}", flush=True)
    holder = None
    if args.hold_gpu and args.hold_in_child:
        holder = subprocess.Popen([sys.executable, "-c", CHILD])
        print(f"holder pid {holder.pid}", flush=True)
    started = time.monotonic()
    next_tick = started
    while True:
        if args.hold_gpu and (not args.hold_when or os.path.exists(args.hold_when)):
            hold_gpus(args.hold_gpu, args.hold_on, holder.pid if holder else None)
            print("holding memory on the cards", flush=True)
            args.hold_gpu = 0
        now = time.monotonic()
        if args.exit_after is not None and now - started >= args.exit_after:
            print(f"exiting with {args.exit_code}", flush=True)
            os._exit(args.exit_code)
        if args.exit_when and os.path.exists(args.exit_when):
            print(f"exiting with {args.exit_code}", flush=True)
            os._exit(args.exit_code)
        if args.when and os.path.exists(args.when[0]):
            print(os.path.expandvars(args.when[1]), flush=True)
            args.when = None
        if args.tick and now >= next_tick:
            print(f"tick {now - started:.2f}", flush=True)
            next_tick = now + args.tick
        time.sleep(0.02)


if __name__ == "__main__":
    main()
