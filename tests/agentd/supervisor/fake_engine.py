"""A small program that plays an engine for the supervisor's tests.

It prints lines, serves /health on a port (503 until a delay has passed,
then 200), starts a child of its own, ignores SIGTERM, writes a line once a
file appears, or exits with a code — each on request, from the command line.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--health-after", type=float, default=0.0)
    p.add_argument("--say", action="append", default=[])
    p.add_argument("--exit-after", type=float)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--child", action="store_true")
    p.add_argument("--flood", type=int, default=0, help="bytes of output at start")
    p.add_argument("--when", nargs=2, metavar=("FILE", "LINE"), help="print LINE once FILE exists")
    p.add_argument("--exit-when", metavar="FILE", help="exit with --exit-code once FILE exists")
    p.add_argument("--tick", type=float, default=0.0, help="print a line this often")
    args = p.parse_args()

    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in args.say:
        print(line, flush=True)
    if args.flood:
        sys.stdout.write(("x" * 99 + "\n") * (args.flood // 100))
        sys.stdout.flush()
    if args.child:
        child = subprocess.Popen([sys.executable, "-c", CHILD])
        print(f"child pid {child.pid}", flush=True)
    if args.port:
        serve(args.port, time.monotonic() + args.health_after)
        print(f"listening on {args.port}", flush=True)
    started = time.monotonic()
    next_tick = started
    while True:
        now = time.monotonic()
        if args.exit_after is not None and now - started >= args.exit_after:
            print(f"exiting with {args.exit_code}", flush=True)
            os._exit(args.exit_code)
        if args.exit_when and os.path.exists(args.exit_when):
            print(f"exiting with {args.exit_code}", flush=True)
            os._exit(args.exit_code)
        if args.when and os.path.exists(args.when[0]):
            print(args.when[1], flush=True)
            args.when = None
        if args.tick and now >= next_tick:
            print(f"tick {now - started:.2f}", flush=True)
            next_tick = now + args.tick
        time.sleep(0.02)


if __name__ == "__main__":
    main()
