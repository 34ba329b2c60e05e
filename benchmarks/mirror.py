"""Benchmark: the model mirror serving one large file, beside nginx serving the same file.

One file (the starter GGUF, 253 MB, assembled from its PyPI package; or
``--size-mb N`` random bytes) is put into a fresh mirror's store as a model
revision. The mirror (``python -m llmgw mirror serve``, plain HTTP on
127.0.0.1) and nginx from Debian (``sendfile on``, its root the mirror's blob
folder, so both read the same file on the same disk) are then asked for it by
1, 4 and 16 concurrent ``curl`` processes, turn about, each round after a
warm-up that puts the file in the page cache for both. Figures per count:

- aggregate MB/s: bytes all clients received / wall time from the first
  start to the last finish (best of ``--rounds``), and the mirror's share of nginx's;
- CPU s per GB served: the server's user+system CPU time (nginx: its master
  and workers) over the round / GB sent.

Then convergence: a second mirror peered with the first (each names the
other with ``--peer``); ``--converge-mb`` (1,024) of random bytes uploaded to
the first through its management API; the time from the upload's commit
answering to the revision listed by the second.

Goal it is read against: **the mirror at >= 90 % of nginx's aggregate MB/s.**
Printed, never judged.

Run: ``.venv/bin/python benchmarks/mirror.py [--clients 1,4,16] [--rounds 3]
[--converge-mb 1024] [--json out.json]``. Needs nginx (``apt-get install
nginx-light``) and curl. Exit status: 0 when every download was whole; 1 when
one was not or a server did not start; 2 when nginx or curl is missing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llmgw.mirror.wire import FileEntry, Revision
from mirrord.store import MirrorStore

REPO = "google/gemma-3-270m-gguf"
START_WITHIN_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def make_file(work: Path, size_mb: int) -> Path:
    if size_mb:
        path = work / f"random-{size_mb}mb.gguf"
        with path.open("wb") as f:
            for _ in range(size_mb):
                f.write(os.urandom(1 << 20))
        return path
    from llmgw.setup import starter

    if not starter.available():
        raise SystemExit("the starter model's package is not installed; give --size-mb N")
    return starter.assemble(work / "starter")


def hold(store: MirrorStore, path: Path, name: str) -> tuple[Revision, str]:
    """Put ``path`` into the store as REPO's one file; (the revision, the blob's sha256)."""
    sha = sha256_file(path)
    tmp = store.incoming_dir / f"bench-{sha}"
    shutil.copyfile(path, tmp)
    store.adopt_blob(tmp, sha)
    entry = FileEntry(path=name, size=path.stat().st_size, sha256=sha, lfs=True)
    commit = hashlib.sha1(f"{name} {sha}\n".encode()).hexdigest()
    rev = store.put(
        Revision(repo=REPO, commit=commit, files=[entry], source="bench"), refs=["main"]
    )
    return rev, sha


class Server:
    """A server process and the processes whose CPU time is its own."""

    def __init__(self, name: str, proc: subprocess.Popen, url: str) -> None:
        self.name, self.proc, self.url = name, proc, url

    def cpu_s(self) -> float:
        try:
            top = psutil.Process(self.proc.pid)
            procs = [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_http(url: str, headers: dict[str, str], proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_WITHIN_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited while starting (status {proc.returncode})")
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} did not answer {url} within {START_WITHIN_S:g} s")


def start_mirror(
    work: Path, name: str, data: Path, tokens: dict[str, Path], peers: list[str], port: int
) -> Server:
    log = (work / f"{name}.log").open("ab")
    argv = [
        sys.executable, "-m", "llmgw", "mirror", "serve",
        "--data-dir", str(data), "--listen", f"127.0.0.1:{port}", "--upstream", "",
        "--read-token-file", str(tokens["read"]), "--admin-token-file", str(tokens["admin"]),
        # Plain HTTP, as nginx beside it serves: the figures compare serving, not TLS.
        "--plain-http",
    ]  # fmt: skip
    for peer in peers:
        argv += ["--peer", peer]
    env = {**os.environ, "LLMGW_HOME": str(work / f"{name}-home")}
    proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, cwd=work)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health", {}, proc, f"the mirror {name}")
    return Server(name, proc, url)


def start_nginx(work: Path, root: Path) -> Server:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    port = free_port()
    prefix = work / "nginx"
    (prefix / "logs").mkdir(parents=True, exist_ok=True)
    conf = prefix / "nginx.conf"
    # The work folder is private (0700): nginx's workers read it as the user that made it.
    user = "user root;" if os.geteuid() == 0 else ""
    conf.write_text(
        f"""
{user}
daemon off;
worker_processes auto;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        default_type application/octet-stream;
    }}
}}
"""
    )
    proc = subprocess.Popen(
        [nginx, "-p", str(prefix), "-c", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=(prefix / "logs" / "stderr.log").open("ab"),
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/", {}, proc, "nginx")
    return Server("nginx", proc, url)


def fetch_all(url: str, clients: int, headers: list[str], size: int) -> float:
    """``clients`` curl processes fetching ``url`` at once; the wall time. Raises if one fell short."""
    argv = ["curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{http_code}"]
    for h in headers:
        argv += ["-H", h]
    start = time.perf_counter()
    procs = [
        subprocess.Popen([*argv, url], stdout=subprocess.PIPE, text=True) for _ in range(clients)
    ]
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - start
    for out in outs:
        got, code = out.split()
        if int(got) != size or code != "200":
            raise RuntimeError(f"{url}: a client got {got} bytes ({code}), not {size}")
    return wall


def serve_round(server: Server, url: str, clients: int, headers: list[str], size: int) -> dict:
    cpu0 = server.cpu_s()
    wall = fetch_all(url, clients, headers, size)
    cpu = server.cpu_s() - cpu0
    gb = clients * size / 1e9
    return {"mb_s": clients * size / 1e6 / wall, "wall_s": wall, "cpu_s_per_gb": cpu / gb}


def converge(work: Path, tokens: dict[str, Path], size_mb: int) -> dict:
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    a = start_mirror(work, "peer-a", work / "peer-a", tokens, [urls[1]], ports[0])
    b = start_mirror(work, "peer-b", work / "peer-b", tokens, [urls[0]], ports[1])
    admin = {"Authorization": f"Bearer {tokens['admin'].read_text().strip()}"}
    # Reads take the read token; the admin token only writes (a read with it is 403).
    read = {"Authorization": f"Bearer {tokens['read'].read_text().strip()}"}
    try:
        path = work / "converge.bin"
        with path.open("wb") as f:
            for _ in range(size_mb):
                f.write(os.urandom(1 << 20))
        sha = sha256_file(path)
        upload = secrets.token_hex(8)
        with httpx.Client(timeout=600) as c, path.open("rb") as body:
            r = c.put(
                f"{a.url}/v1/uploads/{upload}/weights.safetensors",
                content=body,
                headers={**admin, "X-Llmgw-Sha256": sha},
            )
            r.raise_for_status()
            r = c.post(
                f"{a.url}/v1/uploads/{upload}/commit",
                json={"repo": "bench/converge"},
                headers=admin,
            )
            r.raise_for_status()
            commit = r.json()["commit"]
            added = time.perf_counter()
            deadline = added + 600
            while time.perf_counter() < deadline:
                revs = c.get(f"{b.url}/v1/revisions", headers=read).json()["revisions"]
                if any(rv["commit"] == commit for rv in revs):
                    return {"mb": size_mb, "seconds": time.perf_counter() - added}
                time.sleep(0.1)
        return {"mb": size_mb, "seconds": None}
    finally:
        a.stop()
        b.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=0, help="random bytes in place of the starter")
    ap.add_argument("--converge-mb", type=int, default=1024, help="0: no convergence run")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not shutil.which("curl") or not (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()):
        print("needs curl and nginx (apt-get install curl nginx-light)", file=sys.stderr)
        return 2
    counts = [int(c) for c in args.clients.split(",")]
    report: dict = {"counts": {}, "converge": None}
    with tempfile.TemporaryDirectory(prefix="llmgw-bench-mirror-") as tmp:
        work = Path(tmp)
        tokens = {"read": work / "read-token", "admin": work / "admin-token"}
        for t in tokens.values():
            t.write_text(secrets.token_urlsafe(24) + "\n")
            t.chmod(0o600)
        src = make_file(work, args.size_mb)
        data = work / "mirror"
        store = MirrorStore(data)
        rev, sha = hold(store, src, src.name)
        size = rev.size_bytes
        report["file"] = {"name": src.name, "bytes": size}
        del store
        mirror = start_mirror(work, "mirror", data, tokens, [], free_port())
        nginx = start_nginx(work, data / "blobs")
        read = [f"Authorization: Bearer {tokens['read'].read_text().strip()}"]
        targets = [
            (mirror, f"{mirror.url}/{REPO}/resolve/main/{src.name}", read),
            (nginx, f"{nginx.url}/sha256/{sha[:2]}/{sha}", []),
        ]
        try:
            for server, url, headers in targets:  # warm the page cache for both
                fetch_all(url, 1, headers, size)
            for n in counts:
                rounds: dict[str, list[dict]] = {"mirror": [], "nginx": []}
                for i in range(args.rounds):
                    order = targets if i % 2 == 0 else list(reversed(targets))
                    for server, url, headers in order:
                        rounds[server.name].append(serve_round(server, url, n, headers, size))
                best = {k: max(v, key=lambda r: r["mb_s"]) for k, v in rounds.items()}
                share = best["mirror"]["mb_s"] / best["nginx"]["mb_s"]
                report["counts"][n] = {**best, "mirror_share_of_nginx": share}
                print(
                    f"{n:>3} clients: mirror {best['mirror']['mb_s']:8.0f} MB/s "
                    f"({best['mirror']['cpu_s_per_gb']:.3f} CPU s/GB)   nginx "
                    f"{best['nginx']['mb_s']:8.0f} MB/s ({best['nginx']['cpu_s_per_gb']:.3f} CPU s/GB)"
                    f"   mirror/nginx {share:.0%}",
                    flush=True,
                )
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 1
        finally:
            mirror.stop()
            nginx.stop()
        if args.converge_mb:
            report["converge"] = converge(work, tokens, args.converge_mb)
            c = report["converge"]
            took = f"{c['seconds']:.1f} s" if c["seconds"] is not None else "did not converge"
            print(f"a second mirror holding a {c['mb']} MB add of the first: {took}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if report["converge"] is None or report["converge"]["seconds"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
