"""How quickly the console paints and answers keys, with a big cluster changing under it.

The real ``llmgw`` console runs in a pseudo-terminal of its own (a separate
process, as an operator runs it), pointed by its LLMGW_HOME at a fake admin
server in this process: a real grpclib server with the admin token check,
holding N nodes (mixed GPU and CPU), M models and a replica per model, and
streaming changes to every open ``Watch`` (node heartbeats, models and
replicas changing) at a steady rate.

Two figures, read against the goal "start to first painted screen under 1 s;
with 1,000 nodes and 500 models streaming updates, a key press answered
within 100 ms":

- **start**: from spawning ``llmgw`` to its first frame (the footer drawn),
  and to the whole cluster shown (the header's "N/N nodes ready" over the
  Overview);
  ``--starts`` runs, each a fresh process, Python imports included, with the
  cluster quiet.
- **keys**: with the updates streaming, the time from a key written to the
  terminal to the first output of the screen it switches to (n, m, p, k, u, o
  in turn; each screen's own status line is the mark). Screens are visited once
  before measuring, so the figure is a switch, not a first load.

The console's frames are read from the terminal as they come (no terminal
emulator in between); the marks are plain text Textual writes in one piece.
Figures are printed (and written with ``--json``), never asserted.

    .venv/bin/python benchmarks/console.py [--nodes 1000] [--models 500] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import multiprocessing
import os
import platform
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from console_cluster import FakeCluster, serve

from llmgw.config import dump_yaml, load_server_config
from llmgw.fsutil import write_atomic
from llmgw.paths import Paths
from llmgw.setup.cluster_init import init_server

# What each key switches to, and the text that screen's status line starts with:
# the first time it is read after the key, that screen has been painted.
SWITCHES = [
    ("n", b"Nodes: "),
    ("m", b"Models: "),
    ("p", b"Replicas: "),
    ("k", b"No organizations yet"),
    ("u", b"Usage by "),
    ("o", b"Live from "),
]
# gatewayd's default heartbeat interval: each heartbeat is announced on "nodes".
HEARTBEAT_INTERVAL_S = 2.0
# A key not answered in this long is counted as missed (and the run goes on).
KEY_TIMEOUT_S = 10.0


def make_home(root: Path, admin_port: int) -> Paths:
    """An LLMGW_HOME whose server.yaml sends the console to the fake server."""
    paths = Paths.under(root / "home")
    init_server(paths, hosts=["localhost"], cluster_name="bench")
    cfg = load_server_config(paths.server_yaml)
    cfg.listen.admin = f"127.0.0.1:{admin_port}"
    write_atomic(paths.server_yaml, dump_yaml(cfg))
    return paths


# -- the console in a terminal ---------------------------------------------------------


def llmgw_command() -> list[str]:
    script = Path(sys.executable).with_name("llmgw")
    return [str(script)] if script.exists() else [sys.executable, "-m", "llmgw"]


@dataclass
class Terminal:
    """``llmgw`` on the slave side of a pty; everything it writes is kept with when it came."""

    proc: subprocess.Popen
    master: int
    output: bytearray = field(default_factory=bytearray)
    arrived: list[tuple[float, int]] = field(default_factory=list)  # (time, output length)
    started: float = 0.0

    @classmethod
    def spawn(cls, home: Path, size: tuple[int, int]) -> Terminal:
        master, slave = os.openpty()
        cols, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env.update(LLMGW_HOME=str(home), TERM="xterm-256color")
        started = time.perf_counter()
        proc = subprocess.Popen(
            llmgw_command(),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        os.close(slave)
        os.set_blocking(master, False)
        term = cls(proc, master, started=started)
        asyncio.get_running_loop().add_reader(master, term._read)
        return term

    def _read(self) -> None:
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # the console exited: EIO on the master
            asyncio.get_running_loop().remove_reader(self.master)
            return
        if chunk:
            self.output += chunk
            self.arrived.append((time.perf_counter(), len(self.output)))

    async def wait_for(self, mark: bytes, *, after: int = 0, timeout_s: float = 30) -> float:
        """When ``mark`` first arrived past output offset ``after`` (perf_counter seconds)."""
        deadline = time.perf_counter() + timeout_s
        while time.perf_counter() < deadline:
            at = self.output.find(mark, after)
            if at >= 0:
                end = at + len(mark)
                return next(t for t, n in self.arrived if n >= end)
            if self.proc.poll() is not None:
                tail = bytes(self.output[-2000:]).decode(errors="replace")
                raise RuntimeError(f"the console exited ({self.proc.returncode}): {tail}")
            await asyncio.sleep(0.002)
        raise TimeoutError(mark)

    def press(self, key: str) -> tuple[float, int]:
        """Type ``key``; when, and how much output had come before it."""
        offset = len(self.output)
        os.write(self.master, key.encode())
        return time.perf_counter(), offset

    async def close(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.master, b"q")
        try:
            await asyncio.wait_for(asyncio.to_thread(self.proc.wait), 10)
        except TimeoutError:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)


# -- the runs --------------------------------------------------------------------------


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _summary(samples_ms: list[float]) -> dict:
    if not samples_ms:
        return {"n": 0}
    ordered = sorted(samples_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(p95, 1),
        "max_ms": round(ordered[-1], 1),
    }


async def measure_starts(home: Path, size, runs: int, nodes: int) -> dict:
    first, rows = [], []
    for _ in range(runs):
        term = Terminal.spawn(home, size)
        try:
            first.append(_ms(await term.wait_for(b"Quit") - term.started))
            shown = f"{nodes}/{nodes} nodes ready".encode()
            rows.append(_ms(await term.wait_for(shown) - term.started))
        finally:
            await term.close()
    return {"first_frame": _summary(first), "cluster_shown": _summary(rows)}


async def measure_keys(home: Path, size, presses: int, settle_s: float) -> dict:
    term = Terminal.spawn(home, size)
    proc = psutil.Process(term.proc.pid)
    try:
        await term.wait_for(b"Live from ")
        # Visit every screen once: first visits read whole lists; then they are live.
        first_visit: dict[str, float | None] = {}
        for key, mark in SWITCHES:
            sent, offset = term.press(key)
            try:
                shown = await term.wait_for(mark, after=offset, timeout_s=3 * KEY_TIMEOUT_S)
                first_visit[key] = _ms(shown - sent)
            except TimeoutError:
                first_visit[key] = None  # reported; the timed presses still run
        await asyncio.sleep(settle_s)
        samples: dict[str, list[float]] = {key: [] for key, _ in SWITCHES}
        missed = 0
        proc.cpu_percent()
        started = time.perf_counter()
        for i in range(presses):
            key, mark = SWITCHES[i % len(SWITCHES)]
            sent, offset = term.press(key)
            try:
                shown = await term.wait_for(mark, after=offset, timeout_s=KEY_TIMEOUT_S)
            except TimeoutError:
                missed += 1
                continue
            samples[key].append(_ms(shown - sent))
            # A person does not type faster than the screen answers; a pause between keys
            # lets the updates pile up as they would.
            await asyncio.sleep(0.15)
        window_s = time.perf_counter() - started
        cpu = proc.cpu_percent()
        moves, moves_missed = await measure_moves(term, presses)
        missed += moves_missed
    finally:
        await term.close()
    every = [s for v in samples.values() for s in v]
    return {
        "first_visit_ms": first_visit,
        "all": _summary(every),
        "per_key": {k: _summary(v) for k, v in samples.items()},
        "moves": _summary(moves),
        "missed": missed,
        "console_cpu_percent": round(cpu, 1),
        "window_s": round(window_s, 1),
    }


async def measure_moves(term: Terminal, presses: int) -> tuple[list[float], int]:
    """The arrow key on the Nodes table, the updates streaming: from the key to the next
    row highlighted (its node id drawn again). The cursor starts on the first row, where
    the first visit left it; the rows are the nodes in order."""
    sent, offset = term.press("n")
    await term.wait_for(b"Nodes: ", after=offset, timeout_s=3 * KEY_TIMEOUT_S)
    samples: list[float] = []
    missed = 0
    for row in range(1, presses + 1):
        sent, offset = term.press("\x1b[B")
        try:
            shown = await term.wait_for(f"node-{row:04d}".encode(), after=offset)
        except TimeoutError:
            missed += 1
            continue
        samples.append(_ms(shown - sent))
        await asyncio.sleep(0.15)
    return samples, missed


def _server_main(conn, nodes: int, models: int, token: str, node_eps: float, model_eps: float):
    """The fake cluster, in a process of its own: the console and the clock reading its
    terminal must not wait for the events being made and encoded."""

    async def serve_until_stopped() -> None:
        cluster = FakeCluster(nodes, models)
        server, port = await serve(cluster, token)
        conn.send(port)
        loop = asyncio.get_running_loop()
        churn = None
        while True:
            command = await loop.run_in_executor(None, conn.recv)
            if command == "churn":
                churn = asyncio.create_task(cluster.churn(node_eps, model_eps))
            elif command == "stop":
                break
        if churn is not None:
            churn.cancel()
        server.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2)
        conn.send(
            {
                "replicas": len(cluster.replicas),
                "events_published": cluster.events_published,
                "events_sent": cluster.events_sent,
            }
        )

    asyncio.run(serve_until_stopped())


async def run(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="llmgw-console-bench-") as tmp:
        root = Path(tmp)
        # The token is the one init_server writes; the server is started before the file
        # names its port, so the home is made twice: once for the token, once for the port.
        paths = Paths.under(root / "home")
        init_server(paths, hosts=["localhost"], cluster_name="bench")
        token = paths.admin_token_file.read_text().strip()
        ours, theirs = multiprocessing.Pipe()
        server = multiprocessing.get_context("spawn").Process(
            target=_server_main,
            args=(theirs, args.nodes, args.models, token)
            + (args.node_events_per_s, args.model_events_per_s),
            daemon=True,
        )
        server.start()
        loop = asyncio.get_running_loop()
        port = await loop.run_in_executor(None, ours.recv)
        make_home(root, port)
        # Start with the cluster quiet (the goal says nothing of updates), then stream.
        try:
            starts = await measure_starts(paths.home, args.size, args.starts, args.nodes)
            ours.send("churn")
            keys = await measure_keys(paths.home, args.size, args.presses, args.settle_s)
        finally:
            ours.send("stop")
            counts = await loop.run_in_executor(None, ours.recv)
            server.join(5)
    return {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "cluster": {
            "nodes": args.nodes,
            "models": args.models,
            "node_events_per_s": args.node_events_per_s,
            "model_events_per_s": args.model_events_per_s,
            **counts,
        },
        "terminal": f"{args.size[0]}x{args.size[1]}",
        "start": starts,
        "keys": keys,
    }


def report(result: dict) -> str:
    c, s, k = result["cluster"], result["start"], result["keys"]

    def line(name: str, f: dict) -> str:
        if not f.get("n"):
            return f"  {name:<22} no samples"
        return (
            f"  {name:<22} p50 {f['p50_ms']:>7.1f} ms  p95 {f['p95_ms']:>7.1f} ms"
            f"  max {f['max_ms']:>7.1f} ms  (n={f['n']})"
        )

    head = (
        f"console benchmark: {c['nodes']} nodes, {c['models']} models, {c['replicas']} replicas,"
        f" {c['node_events_per_s']:g} node + {c['model_events_per_s']:g} model events/s"
        f" ({c['events_published']} published, {c['events_sent']} sent after coalescing),"
        f" terminal {result['terminal']}, {result['machine']['cpus']} CPUs"
    )
    out = [
        head,
        "start (spawn → …, cluster quiet):",
        line("first frame", s["first_frame"]),
        line("whole cluster shown", s["cluster_shown"]),
        "key press → the screen it switches to:",
        line("all keys", k["all"]),
    ]
    out += [line(f"  {key}", f) for key, f in k["per_key"].items()]
    out.append("arrow key on the Nodes table → the next row highlighted:")
    out.append(line("down", k["moves"]))
    firsts = ", ".join(
        f"{key} {'not shown' if ms is None else f'{ms:.0f} ms'}"
        for key, ms in k["first_visit_ms"].items()
    )
    out.append(f"  first visits (whole lists read): {firsts}")
    out.append(f"  missed (>{KEY_TIMEOUT_S:g} s): {k['missed']}")
    out.append(f"  console CPU while streaming: {k['console_cpu_percent']}% of one core")
    return "\n".join(out)


def _size(text: str) -> tuple[int, int]:
    cols, _, rows = text.partition("x")
    return int(cols), int(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--models", type=int, default=500)
    parser.add_argument(
        "--node-events-per-s",
        type=float,
        default=None,
        help="node changes a second (default: every node's heartbeat, one per 2 s each,"
        " as gatewayd announces them)",
    )
    parser.add_argument("--model-events-per-s", type=float, default=50.0)
    parser.add_argument("--starts", type=int, default=5, help="console starts to time")
    parser.add_argument("--presses", type=int, default=40, help="key presses to time")
    parser.add_argument("--settle-s", type=float, default=2.0, help="streaming before the keys")
    parser.add_argument("--size", type=_size, default=(200, 50), help="terminal COLSxROWS")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    if args.node_events_per_s is None:
        args.node_events_per_s = args.nodes / HEARTBEAT_INTERVAL_S
    if shutil.which("llmgw") is None and not Path(sys.executable).with_name("llmgw").exists():
        print("note: no llmgw script beside this Python; running python -m llmgw", file=sys.stderr)
    result = asyncio.run(run(args))
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["keys"]["missed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
