"""A request for n answers counts as n requests: in admission, in requests a minute, in tokens."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest

from gatewayd.gateway.policy.admission import Admission, Band
from gatewayd.gateway.policy.limits import Limits, LimitTable, Refusal
from gatewayd.gateway.proxy import answers
from tests.gatewayd.gateway.engine_fake import CountingEngine, gateway_before

USER = [{"role": "user", "content": "hello"}]


def test_a_request_counts_its_n_or_its_best_of_answers():
    assert answers({}) == 1
    assert answers({"n": 4}) == 4
    assert answers({"n": 2, "best_of": 5}) == 5
    assert answers({"n": True, "best_of": None}) == 1


def test_a_limit_table_takes_as_many_requests_as_it_is_told():
    table = LimitTable(clock=lambda: 0.0)
    scopes = [("key:k1", Limits(rpm=5))]
    assert not isinstance(table.admit(scopes, 0, requests=4), Refusal)
    assert not isinstance(table.admit(scopes, 0), Refusal)
    refused = table.admit(scopes, 0)
    assert isinstance(refused, Refusal) and refused.limit == "rpm"


async def test_a_request_of_n_slots_holds_n_and_the_next_waits_for_them():
    # Guards n=128 taken as one slot: three more requests were let in beside it onto a
    # 4-slot replica that was already running 128 sequences.
    admission = Admission([Band(name="std", priority=1, max_in_flight=4, queue_ttl_s=5)])
    async with admission.enter("std", 3):
        assert admission.in_flight_total == 3
        async with admission.enter("std"):
            assert admission.in_flight_total == 4
            waiter = asyncio.create_task(admission.enter("std", 2).__aenter__())
            await asyncio.sleep(0.01)
            assert not waiter.done() and admission.depth("std") == 1
        await asyncio.sleep(0)
        assert not waiter.done()  # 3 held, 2 wanted of 4
    await asyncio.wait_for(waiter, 1)
    assert admission.in_flight_total == 2
    admission._release(admission._states["std"], 2)
    # More slots than the band's ceiling: it takes the whole ceiling, so it can pass.
    async with admission.enter("std", 128):
        assert admission.in_flight_total == 4
    assert admission.in_flight_total == 0


async def test_a_cancelled_waiter_for_several_slots_gives_none_away():
    admission = Admission([Band(name="std", priority=1, max_in_flight=2, queue_ttl_s=5)])
    async with admission.enter("std", 2):
        waiter = asyncio.create_task(admission.enter("std", 2).__aenter__())
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert admission.in_flight_total == 0 and admission.depth("std") == 0


async def test_n_answers_spend_n_of_the_keys_requests_a_minute(tmp_path):
    # Guards n counted as one request: a key of 5 a minute got 128 answers in one.
    async with (
        CountingEngine().running() as engine,
        gateway_before(tmp_path, engine, rpm=5) as front,
    ):
        answer = await front.openai.chat.completions.create(
            model="chat", messages=USER, max_tokens=2, n=5
        )
        assert len(answer.choices) == 5
        with pytest.raises(openai.RateLimitError) as err:
            await front.openai.chat.completions.create(model="chat", messages=USER, max_tokens=2)
        assert "5 requests per minute" in err.value.response.json()["error"]["message"]
        assert engine.forwarded == 1


async def test_the_token_estimate_is_n_times_max_tokens(tmp_path):
    async with (
        CountingEngine().running() as engine,
        gateway_before(tmp_path, engine, tpm=100_000) as front,
    ):
        key = front.keys.lookup(front.secret)
        one = front.gateway._admit(key, {"max_tokens": 300}, 40)
        four = front.gateway._admit(key, {"max_tokens": 300, "n": 4}, 40)
        assert (one.estimate, four.estimate) == (10 + 300, 10 + 1200)
        one.settle(0)
        four.settle(0)


async def test_a_request_for_n_answers_holds_n_of_the_models_slots(tmp_path):
    async with (
        CountingEngine().running() as engine,
        gateway_before(tmp_path, engine, slots=4) as front,
    ):
        engine.held = asyncio.Event()
        asked = asyncio.create_task(
            front.openai.completions.create(model="chat", prompt="x", max_tokens=1, n=3)
        )
        try:
            await asyncio.wait_for(engine.arrived.wait(), 5)
            assert front.gateway.bands.held("chat") == 3
            assert front.gateway.clients_in_flight("chat") == 3
        finally:
            engine.held.set()
        assert len((await asyncio.wait_for(asked, 5)).choices) == 3
        assert front.gateway.bands.held("chat") == 0


async def test_token_counts_spend_the_keys_requests_a_minute_like_any_call(tmp_path):
    # Guards /v1/messages/count_tokens left out of the limits: a key of 2 a minute
    # could keep a replica's tokenizer busy without end.
    async with (
        CountingEngine().running() as engine,
        gateway_before(tmp_path, engine, rpm=2) as front,
    ):
        await front.anthropic.messages.create(model="chat", max_tokens=4, messages=USER)
        counted = await front.anthropic.messages.count_tokens(model="chat", messages=USER)
        assert counted.input_tokens == 7
        with pytest.raises(anthropic.RateLimitError):
            await front.anthropic.messages.count_tokens(model="chat", messages=USER)
        assert engine.hits["/tokenize"] == 1
    async with (
        CountingEngine().running() as engine,
        gateway_before(tmp_path / "bad-key", engine) as front,
    ):
        stranger = front.anthropic.with_options(api_key="llmgw-nope")
        with pytest.raises(anthropic.AuthenticationError):
            await stranger.messages.count_tokens(model="chat", messages=USER)
        assert engine.forwarded == 0
