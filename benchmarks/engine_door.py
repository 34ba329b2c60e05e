"""What an engine door costs a request: the sim engine asked directly, through a plain door, through a TLS door.

The engine (``python -m agentd.sim``, no time to first token, no time between
tokens) and the door (``agentd/door``, in a process of its own as in the
agent) run on this machine; requests are sent at a fixed rate with the
gateway's own replica client (``HttpClient``, TLS with a control plane's
certificate for the TLS door, as the gateway does) and their time from send to
the answer's last byte is measured. The three paths are measured in the same
run, one after the other, on the same engine.

    python benchmarks/engine_door.py [--rate 500] [--seconds 10] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gatewayd.gateway.routing.upstream import HttpClient
from llmgw.tls import pki

BODY = json.dumps(
    {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
).encode()

DOOR = """
import asyncio, json, sys
from pathlib import Path
from agentd.door import Doors, DoorRecord, door_context
cfg = json.loads(sys.argv[1])
async def main():
    tls = door_context(Path(cfg["ca"]), Path(cfg["crt"]), Path(cfg["key"])) if cfg["tls"] else None
    doors = Doors(Path(cfg["state"]), "127.0.0.1", tls, plain_over_loopback=not cfg["tls"])
    rec = DoorRecord("bench", 0, cfg["engine_port"], cfg["engine_key"], [cfg["replica_key"]])
    print(await doors.open(rec), flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 20) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


async def measure(
    client: HttpClient, url: str, auth: str, peer: str, rate: float, seconds: float
) -> dict:
    took: list[float] = []
    failed = 0

    async def one() -> None:
        nonlocal failed
        t0 = time.perf_counter()
        try:
            resp = await client.post(url, "/v1/chat/completions", BODY, authorization=auth,
                                     peer_name=peer)  # fmt: skip
            async with resp:
                await resp.read()
            if resp.status != 200:
                failed += 1
                return
        except OSError:
            failed += 1
            return
        took.append((time.perf_counter() - t0) * 1000)

    tasks = []
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    took.sort()
    q = statistics.quantiles(took, n=100) if len(took) > 1 else [0.0] * 99
    return {"requests": n, "failed": failed, "p50_ms": round(q[49], 3), "p99_ms": round(q[98], 3)}


def start(tmp: Path, procs: list) -> tuple[int, dict[bool, int], str, str]:
    """The engine and its two doors, running: (engine port, door ports, engine key, replica key)."""
    engine_key, replica_key = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    ca = pki.create_ca("bench")
    node = pki.issue_node_cert(ca, "bench-node")
    cp = pki.issue_control_plane_client_cert(ca, "bench-cp")
    for name, pair in {"node": node, "cp": cp}.items():
        (tmp / f"{name}.crt").write_bytes(pair.cert_pem)
        (tmp / f"{name}.key").write_bytes(pair.key_pem)
    (tmp / "ca.crt").write_bytes(ca.cert_pem)

    env = {**os.environ, "LLMGW_ENGINE_KEY": engine_key, "PYTHONPATH": str(REPO)}
    port = free_port()
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "agentd.sim", "--model", "bench", "--port", str(port),
         "--ttft-ms", "0", "--itl-ms", "0", "--tokens", "4", "--max-concurrency", "1024"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    ))  # fmt: skip
    doors = {}
    wait_port(port)
    for tls in (False, True):
        cfg = {"tls": tls, "ca": str(tmp / "ca.crt"), "crt": str(tmp / "node.crt"),
               "key": str(tmp / "node.key"), "state": str(tmp / f"doors-{tls}"),
               "engine_port": port, "engine_key": engine_key, "replica_key": replica_key}  # fmt: skip
        p = subprocess.Popen([sys.executable, "-c", DOOR, json.dumps(cfg)], env=env,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
        procs.append(p)
        doors[tls] = int(p.stdout.readline())
    return port, doors, engine_key, replica_key


async def run(rate: float, seconds: float, tmp: Path, started) -> dict:
    port, doors, engine_key, replica_key = started
    ctx = ssl.create_default_context(cafile=str(tmp / "ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(str(tmp / "cp.crt"), str(tmp / "cp.key"))
    client = HttpClient(tls=ctx)
    paths = {
        "direct": (f"http://127.0.0.1:{port}", engine_key, ""),
        "door (loopback, plain)": (f"http://127.0.0.1:{doors[False]}", replica_key, ""),
        "door (TLS, control plane certificate)": (
            f"https://127.0.0.1:{doors[True]}",
            replica_key,
            "bench-node",
        ),
    }
    out = {}
    for name, (url, key, peer) in paths.items():
        await measure(client, url, f"Bearer {key}", peer, rate, 1.0)  # warm the connections
        out[name] = await measure(client, url, f"Bearer {key}", peer, rate, seconds)
    client.close()
    return {"rate": rate, "seconds": seconds, "paths": out}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=500)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="llmgw-door-bench-") as tmp:
        try:
            started = start(Path(tmp), procs)
            result = asyncio.run(run(args.rate, args.seconds, Path(tmp), started))
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(10)
    for name, r in result["paths"].items():
        print(f"{name:40} p50 {r['p50_ms']:7.3f} ms  p99 {r['p99_ms']:7.3f} ms  "
              f"failed {r['failed']}/{r['requests']}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
