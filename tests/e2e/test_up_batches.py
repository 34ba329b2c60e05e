"""Batches under ``llmgw up`` as a user runs them, through a kill -9 of gatewayd.

Its own cluster (it is killed), serving sim models: the `openai` SDK uploads a
200-line chat batch and a 200-line embeddings batch and creates both; gatewayd
is killed outright when about half are answered, ``llmgw up`` starts it again,
and both batches finish with every custom_id answered once in their output
files and every request metered once (usage rows with the batch id, read from
the store's file).
"""

from __future__ import annotations

import io
import json
import signal
import sqlite3

import openai
import psutil
import pytest
import yaml

from tests.e2e.helpers import init_on_free_ports, llmgw, nodes_json, start, wait_until

N = 200
PROJECT = "local/default/default"
OTHER = "local/default/other"
# Uploads over this are refused (set in server.yaml below).
CAP_BYTES = 1_000_000


def _lines(kind: str, model: str) -> bytes:
    rows = []
    for i in range(N):
        if kind == "chat":
            url = "/v1/chat/completions"
            body = {"model": model, "messages": [{"role": "user", "content": f"q {i}"}]}
            body["max_tokens"] = 2
        else:
            url, body = "/v1/embeddings", {"model": model, "input": [f"text {i}", "more"]}
        rows.append({"custom_id": f"{kind}-{i}", "method": "POST", "url": url, "body": body})
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def _ready_models(home, *names: str) -> bool:
    res = llmgw(home, "ctl", "replicas", "--json", timeout_s=20)
    if res.returncode != 0:
        return False
    ready = {r["model"] for r in json.loads(res.stdout)["replicas"] if r["state"] == "ready"}
    return set(names) <= ready


def _gatewayd(up: psutil.Process) -> psutil.Process | None:
    for c in up.children():
        try:
            if c.cmdline()[-1:] == ["server"]:
                return c
        except psutil.Error:
            continue
    return None


def _key(home, project: str) -> str:
    res = llmgw(home, "ctl", "keys", "create", "--project", project, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["secret"]


@pytest.fixture
def up_home(tmp_path):
    home = tmp_path / "home"
    init_on_free_ports(home, "--no-starter")
    server_yaml = home / "etc" / "server.yaml"
    cfg = yaml.safe_load(server_yaml.read_text())
    cfg["files"] = {"max_bytes": CAP_BYTES}
    server_yaml.write_text(yaml.safe_dump(cfg))
    up = start(home, "up")
    try:
        yield home, psutil.Process(up.pid)
    finally:
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=60)
        print(out)


def test_two_batches_finish_after_gatewayd_is_killed_with_each_request_answered_and_metered_once(
    up_home,
):
    home, up = up_home
    wait_until(lambda: [n["state"] for n in nodes_json(home) or []] == ["ready"], timeout_s=90)
    for name in ("chat", "embed"):
        served = llmgw(home, "ctl", "model", "serve", f"/m/{name}.gguf", "--engine", "sim",
                       "--name", name, "--cpu")  # fmt: skip
        assert served.returncode == 0, served.stderr
    wait_until(lambda: _ready_models(home, "chat", "embed"), timeout_s=120)
    assert llmgw(home, "ctl", "project", "create", OTHER).returncode == 0
    status = json.loads(llmgw(home, "ctl", "status", "--json").stdout)
    client = openai.OpenAI(base_url=status["gateway_url"], api_key=_key(home, PROJECT))
    other = openai.OpenAI(base_url=status["gateway_url"], api_key=_key(home, OTHER))

    batches = {}
    for kind, model, endpoint in (
        ("chat", "chat", "/v1/chat/completions"),
        ("embed", "embed", "/v1/embeddings"),
    ):
        up_file = client.files.create(
            file=(f"{kind}.jsonl", io.BytesIO(_lines(kind, model))), purpose="batch"
        )
        batches[kind] = client.batches.create(
            input_file_id=up_file.id, endpoint=endpoint, completion_window="24h"
        ).id

    # Another project's key finds no such file; an upload over the cap is refused by name.
    with pytest.raises(openai.NotFoundError):
        other.files.content(up_file.id)
    with pytest.raises(openai.APIStatusError) as big:
        client.files.create(file=("big.jsonl", io.BytesIO(b"x" * (CAP_BYTES + 1))), purpose="batch")
    assert big.value.status_code == 413 and "files.max_bytes" in big.value.message

    def answered() -> int:
        return sum(client.batches.retrieve(b).request_counts.completed for b in batches.values())

    wait_until(lambda: answered() >= N, timeout_s=120, interval_s=0.1)
    before = answered()
    first = _gatewayd(up)
    first.kill()  # SIGKILL: no shutdown, whatever was in flight is lost
    wait_until(lambda: (g := _gatewayd(up)) is not None and g.pid != first.pid, timeout_s=30)

    def finished():
        try:
            got = {k: client.batches.retrieve(b) for k, b in batches.items()}
        except openai.APIConnectionError:  # not listening again yet
            return None
        return got if all(b.status == "completed" for b in got.values()) else None

    done = wait_until(finished, timeout_s=240, interval_s=0.25)
    log = (home / "run" / "log" / "gatewayd.log").read_text()
    print(f"answered before the kill: {before} of {2 * N}")
    print("\n".join(line for line in log.splitlines() if "resumed" in line))
    assert before < 2 * N, "the batches ended before gatewayd was killed"

    for kind, batch in done.items():
        assert batch.request_counts.total == N and batch.request_counts.completed == N
        assert batch.request_counts.failed == 0 and batch.error_file_id is None
        lines = [
            json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()
        ]
        ids = [x["custom_id"] for x in lines]
        assert sorted(ids) == sorted(f"{kind}-{i}" for i in range(N)), f"{kind}: {len(ids)} lines"
        assert all(x["response"]["status_code"] == 200 for x in lines)

    db = sqlite3.connect(home / "var" / "lib" / "llmgw" / "llmgw.db")
    counted = dict(
        db.execute(
            "SELECT batch_id, COUNT(*) FROM usage_rows WHERE batch_id <> '' GROUP BY batch_id"
        ).fetchall()
    )
    db.close()
    assert counted == {batches["chat"]: N, batches["embed"]: N}

    # A bad input file fails its batch in OpenAI's words. A batch over a model with no
    # replica waits (never fails) until it is cancelled, and then ends so.
    bad = client.files.create(
        file=("bad.jsonl", io.BytesIO(_lines("chat", "chat")[:40] + b"\n")), purpose="batch"
    )
    failed = client.batches.create(
        input_file_id=bad.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    idle = llmgw(home, "ctl", "model", "serve", "/m/idle.gguf", "--engine", "sim",
                 "--name", "idle", "--cpu", "--replicas", "0")  # fmt: skip
    assert idle.returncode == 0, idle.stderr
    waiting = client.files.create(
        file=("idle.jsonl", io.BytesIO(_lines("chat", "idle"))), purpose="batch"
    )
    held = client.batches.create(
        input_file_id=waiting.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_until(lambda: client.batches.retrieve(held.id).status == "in_progress")
    ended = {"failed", "cancelled", "completed"}
    failed = wait_until(lambda: (b := client.batches.retrieve(failed.id)).status in ended and b)
    assert failed.status == "failed"
    assert [(e.code, e.line) for e in failed.errors.data] == [("invalid_json_line", 1)]
    assert client.batches.cancel(held.id).status in ("cancelling", "cancelled")
    cancelled = wait_until(lambda: (b := client.batches.retrieve(held.id)).status in ended and b)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at
    assert cancelled.request_counts.completed == 0 and cancelled.output_file_id is None
