"""Answered means accounted: gatewayd killed -9 right after a run of answers loses no usage row.

Issue 15 found 7 of 342 answered requests missing from the usage table after a
kill -9 of gatewayd: the one-second batch died with the process. Here a real
``llmgw server`` (no node: an outside model answered by a sim engine) answers
a loop of requests through the openai SDK, streamed and not, is killed
outright right after the last answer, and is started again: the usage table
then holds exactly one row per answered request.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import openai
import pytest

from llmgw.config import load_server_config
from llmgw.paths import Paths
from tests.e2e.helpers import LLMGW, env_for, init_on_free_ports, llmgw, wait_until

N = 300


def _sim(key: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentd.sim", "--model", "provider-model", "--port", "0"]
        + ["--ttft-ms", "0", "--itl-ms", "0", "--tokens", "4"],
        env={**os.environ, "LLMGW_ENGINE_KEY": key},
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert "serving provider-model on http://" in line, line
    return proc, line.rsplit(" ", 1)[1].strip()


def _gatewayd(home: Path, log: Path, port: int) -> subprocess.Popen:
    with open(log, "a") as out:
        proc = subprocess.Popen(
            LLMGW + ["server"], env=env_for(home), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def up():
        if proc.poll() is not None:
            raise AssertionError(log.read_text()[-4000:])
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, timeout_s=60, interval_s=0.1)
    return proc


def _usage_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM usage_rows").fetchone()[0]


@pytest.mark.timeout(120)
def test_every_request_answered_before_a_kill_9_of_gatewayd_is_in_the_usage_table_once(
    tmp_path,
):
    home = tmp_path / "home"
    init_on_free_ports(home, "--no-node", "--no-starter")
    paths = Paths.under(home)
    port = int(load_server_config(paths.server_yaml).listen.http.rsplit(":", 1)[1])
    provider_key = paths.provider_keys_dir / "provider.key"  # where gatewayd reads such keys
    provider_key.parent.mkdir(parents=True, exist_ok=True)
    provider_key.write_text("sk-provider\n")
    sim, url = _sim("sk-provider")
    log = tmp_path / "gatewayd.log"
    gatewayd = _gatewayd(home, log, port)
    try:
        spec = tmp_path / "outside.yaml"
        spec.write_text(
            "name: outside\nsource: external\nslots: 16\n"
            f"external:\n  url: {url}/v1\n  model: provider-model\n"
            f"  api_key_files:\n    - file: {provider_key}\n"
        )
        for args in (("model", "add", str(spec)), ("project", "create", "--parents", "a/b/c")):
            done = llmgw(home, "ctl", *args)
            assert done.returncode == 0, done.stderr
        made = llmgw(home, "ctl", "keys", "create", "--project", "a/b/c", "--json")
        assert made.returncode == 0, made.stderr
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key=json.loads(made.stdout)["secret"],
            max_retries=0,
        )
        answered = 0
        for i in range(N):
            ask = {"model": "outside", "messages": [{"role": "user", "content": f"q{i}"}]}
            if i % 2:
                chunks = list(client.chat.completions.create(**ask, max_tokens=4, stream=True))
                assert chunks, "an empty stream"
            else:
                assert client.chat.completions.create(**ask, max_tokens=4).choices
            answered += 1
        gatewayd.kill()  # SIGKILL right after the last answer: no shutdown, no last batch
        gatewayd.wait(timeout=30)
        before = _usage_rows(paths.sqlite_file)
        print(f"usage rows in the store at the kill: {before} of {answered} answered")

        gatewayd = _gatewayd(home, log, port)  # replays the journal before it serves
        gatewayd.terminate()
        gatewayd.wait(timeout=60)
        assert _usage_rows(paths.sqlite_file) == answered, log.read_text()[-4000:]
        assert "replayed into the store" in log.read_text() or before == answered
    finally:
        if gatewayd.poll() is None:
            gatewayd.terminate()
            gatewayd.wait(timeout=60)
        sim.terminate()
        sim.wait(timeout=20)
    assert "Traceback" not in log.read_text(), log.read_text()[-4000:]
