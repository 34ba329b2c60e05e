"""Through the gateway: an answer ends only once its usage row is on disk, and rows wait out
a store that is down, then arrive once it is back."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import openai

from gatewayd.gateway.metering.journal import UsageJournal
from gatewayd.gateway.metering.usage import UsageWriter
from gatewayd.gateway.policy.keys import KeyCache
from gatewayd.gateway.proxy import Gateway
from gatewayd.gateway.routing.router import Router, Target
from gatewayd.http.app import make_app
from gatewayd.store import SqliteStore
from llmgw.errors import StoreError
from tests.gatewayd.gateway.fakes import Upstream

PROJECT = "acme/ml/search"


async def _setup(tmp_path, upstream: Upstream):
    store = SqliteStore(tmp_path / "llmgw.db")
    await store.open()
    keys = KeyCache(store)
    await keys.tenancy.create("project", PROJECT, parents=True)
    _, secret = await keys.create(PROJECT, "t", [], 0)
    await keys.refresh()
    ready = {"chat": [Target(replica_id="r1", base_url=upstream.url)]}
    journal = UsageJournal(tmp_path / "usage-journal")
    await journal.open()
    usage = UsageWriter(store, journal=journal)
    gateway = Gateway(
        keys, Router(lambda m: ready.get(m, [])), engine_key="k",
        models=lambda: [("chat", True)], known=ready.__contains__, usage=usage,
    )  # fmt: skip
    await gateway.start()
    app = make_app(is_leader=lambda: True, routable=lambda: (True, ""), gateway=gateway)
    client = openai.AsyncOpenAI(
        base_url="http://gateway/v1", api_key=secret, max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app)),
    )  # fmt: skip
    return store, usage, gateway, client


async def _rows(store: SqliteStore) -> int:
    async with store._conn.execute("SELECT count(*) FROM usage_rows") as cur:
        return (await cur.fetchone())[0]


async def test_rows_of_answers_given_while_the_store_is_down_arrive_once_it_is_back(
    tmp_path, monkeypatch
):
    # Guards rows dropped, or written twice, across a store outage of any length.
    async with Upstream().running() as upstream:
        store, usage, gateway, client = await _setup(tmp_path, upstream)
        real = store.record_usage

        async def down(rows):
            raise StoreError("could not write usage rows: the database is gone", hint="retry")

        monkeypatch.setattr(store, "record_usage", down)
        ask = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
        for i in range(20):
            if i % 2:
                assert [c async for c in await client.chat.completions.create(**ask, stream=True)]
            else:
                assert (await client.chat.completions.create(**ask)).choices
        try:
            await usage.flush()
        except StoreError:
            pass
        assert await _rows(store) == 0

        monkeypatch.setattr(store, "record_usage", real)
        assert await usage.flush() == 20
        assert await usage.flush() == 0
        assert await _rows(store) == 20
        await client.close()
        await gateway.close()
        await usage.close()
        await store.close()


async def _asgi(gateway: Gateway, secret: str, body: dict, sent: list) -> None:
    data = json.dumps(body).encode()
    scope = {
        "type": "http", "method": "POST", "path": "/v1/chat/completions",
        "headers": [(b"authorization", f"Bearer {secret}".encode())],
    }  # fmt: skip
    got = False

    async def receive():
        nonlocal got
        if got:
            await asyncio.Event().wait()  # the client stays connected
        got = True
        return {"type": "http.request", "body": data, "more_body": False}

    async def send(message):
        sent.append(message)

    await gateway(scope, receive, send)


def _ended(sent: list) -> bool:
    return any(m["type"] == "http.response.body" and not m.get("more_body") for m in sent)


async def test_an_answer_does_not_end_before_its_usage_row_is_on_disk(tmp_path):
    # Guards the loss at its root: a client answered (its last bytes, a stream's
    # [DONE]) while its row was only in memory, which a kill -9 then loses.
    async with Upstream().running() as upstream:
        store, usage, gateway, client = await _setup(tmp_path, upstream)
        secret = client.api_key
        journal = usage.journal
        write = journal._write
        for stream in (False, True):
            entered, release = threading.Event(), threading.Event()

            def held_write(fd, data, entered=entered, release=release):
                entered.set()
                release.wait(30)
                write(fd, data)

            journal._write = held_write
            sent: list = []
            ask = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
            call = asyncio.ensure_future(_asgi(gateway, secret, ask | {"stream": stream}, sent))
            assert await asyncio.to_thread(entered.wait, 30)  # the row is being written
            body = b"".join(m.get("body", b"") for m in sent)
            assert sent and not _ended(sent) and b"[DONE]" not in body
            release.set()
            await call
            assert _ended(sent)
            assert (b"[DONE]" in b"".join(m.get("body", b"") for m in sent)) == stream
        journal._write = write
        await client.close()
        await gateway.close()
        await usage.close()
        assert await _rows(store) == 2
        await store.close()
