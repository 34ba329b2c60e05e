"""The model mirror as a new user meets it, with no internet: ``llmgw up`` with two mirrors.

A fake upstream hub on loopback (tests/fakes/hub.py) holds the starter GGUF
and a small safetensors repository. ``llmgw server init --mirror`` sets up a
mirror beside the control plane, whose upstream is that hub; a second
``llmgw mirror serve``, its certificate from ``llmgw mirror cert``, is peered
with it both ways. Both serve HTTPS with certificates of the cluster CA. The
cluster names both mirrors, each behind a proxy that notes what the agent
asks and can hold a file mid-way (tests/e2e/mirror_proxy.py). Then, as a user
would:

- ``llmgw ctl mirror add hf:…@main`` pins what main names, and
  ``huggingface_hub`` pointed at the mirror gets byte-identical files, resumes
  a cut download with a 206, and is told an unknown repository is not found;
- ``llmgw ctl model plan`` of the hf: GGUF shows its real size (read from the
  mirror) and ``llmgw ctl model serve`` serves it with llama.cpp from weights
  the agent fetched from the mirrors — the first killed half-way through the
  file, the rest taken from the second at the byte reached;
- what is added on one mirror appears on the other, and a removal disappears
  from both.

The tests run in order on one cluster (module scope): each leaves it as the
next expects.
"""

from __future__ import annotations

import hashlib
import json
import signal
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from tests.e2e.helpers import LLMGW, env_for, free_port, init_on_free_ports, llmgw, start
from tests.e2e.helpers import wait_until as poll
from tests.e2e.mirror_proxy import MirrorProxy, ProxyTls
from tests.fakes.hub import FakeHub
from tests.fakes.tiny_repo import make_tiny_repo

REPO = "google/gemma-3-270m-gguf"
FILE = "gemma-3-270m-Q4_K_M.gguf"
TINY = "acme/tiny-llama"
# Bounds on waits for what must happen, never timing assertions.
UP_WITHIN_S = 120.0
COPIED_WITHIN_S = 180.0
SERVED_WITHIN_S = 300.0


def wait_until(fn, *, timeout_s: float, interval_s: float = 0.5):
    return poll(fn, timeout_s=timeout_s, interval_s=interval_s)


@dataclass
class Mirrored:
    home: Path
    hub: FakeHub
    gguf: Path
    gguf_commit: str
    tiny_commit: str
    tiny_files: dict[str, bytes]
    # The mirrors themselves (the first run by `llmgw up`), and the proxies the cluster names.
    m1: str
    m2: str
    p1: MirrorProxy
    p2: MirrorProxy
    read_token: str
    admin_token: str
    # The cluster CA: every client checks the mirrors' certificates against it.
    ca: Path
    up: subprocess.Popen
    key: str
    gateway_url: str

    def ctl(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
        return llmgw(self.home, "ctl", *args, timeout_s=timeout_s)

    def ctl_json(self, *args: str, timeout_s: float = 120):
        res = self.ctl(*args, "--json", timeout_s=timeout_s)
        assert res.returncode == 0, res.stdout + res.stderr
        return json.loads(res.stdout)

    def held(self, url: str) -> set[tuple[str, str]] | None:
        """(repo, commit) of what the mirror at ``url`` holds; None when it does not answer."""
        try:
            r = httpx.get(f"{url}/v1/revisions", headers=self.read, timeout=10, verify=self.verify)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        return {(v["repo"], v["commit"]) for v in r.json()["revisions"]}

    @property
    def read(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.read_token}"}

    @property
    def verify(self) -> ssl.SSLContext:
        return _verify(self.ca)


def _verify(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def _healthy(url: str, ca: Path) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2, verify=_verify(ca)).status_code == 200
    except httpx.HTTPError:
        return False


def _mirror_child(up: subprocess.Popen) -> psutil.Process | None:
    for c in psutil.Process(up.pid).children():
        try:
            if c.cmdline()[-2:] == ["mirror", "serve"]:
                return c
        except psutil.Error:
            continue
    return None


def _ready_replica(m: Mirrored, model: str) -> dict | None:
    res = m.ctl("replicas", "--json", timeout_s=20)
    if res.returncode != 0:
        return None
    for r in json.loads(res.stdout)["replicas"]:
        if r["model"] == model and r["state"] == "ready" and r["endpoint"]:
            return r
    return None


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory, gemma3_270m_gguf: Path) -> Iterator[Mirrored]:
    work = tmp_path_factory.mktemp("mirror-acceptance")
    home = work / "home"
    tiny = make_tiny_repo().files
    with FakeHub.in_thread() as hub:
        gguf_commit = hub.add_repo(REPO, {FILE: gemma3_270m_gguf.read_bytes(), "README.md": b"#\n"})
        tiny_commit = hub.add_repo(TINY, tiny)
        m1_port, m2_port = free_port(), free_port()
        m1, m2 = f"https://127.0.0.1:{m1_port}", f"https://127.0.0.1:{m2_port}"
        init_on_free_ports(home, "--mirror", "--mirror-listen", f"127.0.0.1:{m1_port}")
        etc = home / "etc"
        ca = etc / "pki" / "ca.crt"
        mirror_yaml = yaml.safe_load((etc / "mirror.yaml").read_text())
        mirror_yaml.update(upstream=hub.url, peers=[m2], sync_interval_s=2)
        (etc / "mirror.yaml").write_text(yaml.safe_dump(mirror_yaml))
        # A certificate from the cluster CA for the second mirror (and the proxies).
        issued = llmgw(home, "mirror", "cert", "--host", "127.0.0.1", "--json")
        assert issued.returncode == 0, issued.stderr
        bundle = json.loads(issued.stdout)
        tls = ProxyTls.of(bundle["cert"], bundle["key"], str(ca))
        p1, p2 = MirrorProxy(m1_port, tls).start(), MirrorProxy(m2_port, tls).start()
        server_yaml = yaml.safe_load((etc / "server.yaml").read_text())
        server_yaml["mirror"]["urls"] = [p1.url, p2.url]
        server_yaml["mirror"]["probe_interval_s"] = 1
        # No internet: a hub asked past the mirrors would fail the tests.
        server_yaml["hub_url"] = "http://127.0.0.1:9"
        (etc / "server.yaml").write_text(yaml.safe_dump(server_yaml, sort_keys=False))
        secrets = etc / "secrets"
        second = subprocess.Popen(
            [*LLMGW, "mirror", "serve", "--data-dir", str(work / "mirror-2"),
             "--listen", f"127.0.0.1:{m2_port}", "--upstream", "", "--peer", m1,
             "--sync-interval", "2",
             "--read-token-file", str(secrets / "mirror-read-token"),
             "--admin-token-file", str(secrets / "mirror-admin-token"),
             "--tls-cert", bundle["cert"], "--tls-key", bundle["key"],
             "--client-ca", bundle["ca_cert"]],
            env=env_for(work / "mirror-2-home"),
            stdout=(work / "mirror-2.log").open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        up = start(home, "up")
        try:
            wait_until(lambda: _healthy(m1, ca) and _healthy(m2, ca), timeout_s=UP_WITHIN_S)
            wait_until(
                lambda: (
                    (r := llmgw(home, "ctl", "nodes", "--json", timeout_s=20)).returncode == 0
                    and any(n["state"] == "ready" for n in json.loads(r.stdout)["nodes"])
                ),
                timeout_s=UP_WITHIN_S,
            )
            created = llmgw(
                home, "ctl", "keys", "create", "--project", "local/default/default", "--json"
            )
            assert created.returncode == 0, created.stderr
            status = json.loads(llmgw(home, "ctl", "status", "--json").stdout)
            yield Mirrored(
                home=home,
                hub=hub,
                gguf=gemma3_270m_gguf,
                gguf_commit=gguf_commit,
                tiny_commit=tiny_commit,
                tiny_files=tiny,
                m1=m1,
                m2=m2,
                p1=p1,
                p2=p2,
                read_token=(secrets / "mirror-read-token").read_text().strip(),
                admin_token=(secrets / "mirror-admin-token").read_text().strip(),
                ca=ca,
                up=up,
                key=json.loads(created.stdout)["secret"],
                gateway_url=status["gateway_url"],
            )
        finally:
            up.send_signal(signal.SIGTERM)
            out, _ = up.communicate(timeout=60)
            second.terminate()
            second.wait(30)
            p1.close()
            p2.close()
    assert up.returncode == 0, out


def _add(m: Mirrored, source: str) -> dict:
    """``ctl mirror add SOURCE --json``: its last line, which names what is now held."""
    res = m.ctl("mirror", "add", source, "--json", timeout_s=600)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    assert lines[-1]["pull"]["state"] == "done", lines[-1]
    return lines[-1]["revision"]


def _hf_env(tmp_path: Path, m: Mirrored) -> dict[str, str]:
    # Read by huggingface_hub when first imported; each call names its cache_dir too.
    # SSL_CERT_FILE: the cluster CA, as a user points hf at the mirror (README).
    import huggingface_hub

    # Its shared client was maybe made before, without the CA: the next is made with it.
    huggingface_hub.close_session()
    return {
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "SSL_CERT_FILE": str(m.ca),
    }


def test_an_add_is_pinned_and_huggingface_hub_gets_byte_identical_files_from_the_mirror(
    mirrored: Mirrored, tmp_path: Path, monkeypatch
):
    m = mirrored
    gguf = _add(m, f"hf:{REPO}@main")
    tiny = _add(m, f"hf:{TINY}@main")
    assert (gguf["repo"], gguf["commit"], gguf["refs"]) == (REPO, m.gguf_commit, ["main"])
    assert (tiny["repo"], tiny["commit"]) == (TINY, m.tiny_commit)
    listed = m.ctl_json("mirror", "list")
    assert {(r["repo"], r["commit"]) for r in listed["revisions"]} >= {
        (REPO, m.gguf_commit),
        (TINY, m.tiny_commit),
    }

    for k, v in _hf_env(tmp_path, m).items():
        monkeypatch.setenv(k, v)
    from huggingface_hub import hf_hub_download, snapshot_download
    from huggingface_hub.errors import RepositoryNotFoundError

    cache = tmp_path / "hf-cache"
    folder = Path(snapshot_download(TINY, endpoint=m.m1, token=m.read_token, cache_dir=cache))
    got = {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }
    assert got == m.tiny_files
    path = Path(hf_hub_download(REPO, FILE, endpoint=m.m1, token=m.read_token, cache_dir=cache))
    assert _sha256(path) == _sha256(m.gguf)
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download("acme/no-such-model", endpoint=m.m1, token=m.read_token, cache_dir=cache)
    # The upstream was asked for each file once: by the mirror's pull, never by the clients.
    assert len(m.hub.downloads(REPO, FILE)) == 1


def test_a_download_cut_at_half_resumes_with_a_206_and_is_byte_identical(
    mirrored: Mirrored, tmp_path: Path, monkeypatch
):
    m = mirrored
    for k, v in _hf_env(tmp_path, m).items():
        monkeypatch.setenv(k, v)
    from huggingface_hub import hf_hub_download

    half = m.gguf.stat().st_size // 2
    reached = m.p1.hold(f"/{REPO}/resolve/", half)
    # Cut the moment half the file has gone: the client asks again for the rest.
    cutter = threading.Thread(target=lambda: reached.wait(120) and m.p1.drop(), daemon=True)
    cutter.start()
    path = Path(
        hf_hub_download(
            REPO, FILE, endpoint=m.p1.url, token=m.read_token, cache_dir=tmp_path / "hf-cache"
        )
    )
    cutter.join(10)
    assert reached.is_set()
    assert _sha256(path) == _sha256(m.gguf)
    gets = m.p1.downloads(f"/{REPO}/resolve/")
    assert gets[0].range == ""
    resumed = gets[-1].range
    assert resumed.startswith("bytes=") and int(resumed[6:].split("-")[0]) > 0, gets
    assert m.p1.status_of(gets[-1]) == 206, m.p1.answered[-5:]


def test_an_hf_gguf_is_planned_from_the_mirror_and_served_from_it_when_its_first_mirror_dies(
    mirrored: Mirrored,
):
    m = mirrored
    size = m.gguf.stat().st_size
    source = f"hf:{REPO}:{FILE}"
    plan = m.ctl_json("model", "plan", source, "--engine", "llama.cpp")
    assert plan["facts"]["weights_bytes"] == size
    assert not any("size is unknown" in n for n in plan.get("notes", []))
    # The second mirror holds the file (copied from its peer) before the first dies.
    wait_until(lambda: (REPO, m.gguf_commit) in (m.held(m.m2) or set()), timeout_s=COPIED_WITHIN_S)

    reached = m.p1.hold(f"/{REPO}/resolve/{m.gguf_commit}/{FILE}", size // 2)
    served = m.ctl_json(
        "model", "serve", source, "--name", "gemma-mirrored", "--cpu", "--context", "2048"
    )
    assert served["spec"]["commit"] == m.gguf_commit
    assert reached.wait(SERVED_WITHIN_S), "the agent never fetched the file from the first mirror"
    first = _mirror_child(m.up)
    assert first is not None
    first.send_signal(signal.SIGKILL)
    m.p1.drop()

    wait_until(lambda: _ready_replica(m, "gemma-mirrored"), timeout_s=SERVED_WITHIN_S, interval_s=1)
    answer = httpx.post(
        f"{m.gateway_url}/chat/completions",
        headers={"Authorization": f"Bearer {m.key}"},
        json={"model": "gemma-mirrored", "max_tokens": 4,
              "messages": [{"role": "user", "content": "Hi"}]},
        timeout=120,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] > 0
    # The rest came from the second mirror at the byte reached; the file was not started over.
    rest = m.p2.downloads(f"/{FILE}")
    assert rest, m.p2.requests
    assert all(r.range.startswith("bytes=") for r in rest), rest
    assert int(rest[0].range[6:].split("-")[0]) > size // 4, rest
    weights = m.home / "var" / "lib" / "llmgw-agent" / "weights"
    fetched = [p for p in weights.rglob(FILE) if p.is_file()]
    assert fetched and _sha256(fetched[0]) == _sha256(m.gguf)
    # The upstream hub was never asked by the node.
    assert len(m.hub.downloads(REPO, FILE)) == 1


def test_two_peered_mirrors_carry_each_others_adds_and_removals(mirrored: Mirrored):
    m = mirrored
    # The first mirror is back (its supervisor restarted it after the kill).
    wait_until(lambda: _healthy(m.m1, m.ca), timeout_s=UP_WITHIN_S)
    # Added on the first in the first test: held on the second too.
    wait_until(lambda: (TINY, m.tiny_commit) in (m.held(m.m2) or set()), timeout_s=COPIED_WITHIN_S)
    peers = m.ctl_json("mirror", "peers", "list")
    assert [p["url"] for p in peers["peers"]] == [m.m2]

    removed = m.ctl_json("mirror", "rm", TINY, "--yes")
    assert [r["commit"] for r in removed["removed"]] == [m.tiny_commit]
    for url in (m.m1, m.m2):
        wait_until(
            lambda url=url: (held := m.held(url)) is not None and (TINY, m.tiny_commit) not in held,
            timeout_s=COPIED_WITHIN_S,
        )
    status = m.ctl_json("status")
    assert [x["url"] for x in status["mirrors"]] == [m.p1.url, m.p2.url]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()
