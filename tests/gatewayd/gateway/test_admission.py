"""Admission bands: higher bands first, bounded queues, a band's wait, and waiters that leave."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from pydantic import ValidationError

from gatewayd.gateway.policy.admission import (
    Admission,
    Band,
    QueueFull,
    UnknownBand,
    WaitExpired,
)

# Waits in these tests are bounded by tiny ttls; nothing asserts how long
# anything took, only what happened and in which order.
SHORT_TTL_S = 0.05
LONG_TTL_S = 60.0


async def until(condition: Callable[[], bool]) -> None:
    """Let other tasks run until ``condition`` holds (a few loop turns; never a timed sleep)."""
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


class Requests:
    """Requests that enter a band, note that they got in, and hold their slot until released."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.entered: list[str] = []
        self._release: dict[str, asyncio.Event] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def send(self, name: str, band: str) -> asyncio.Task[None]:
        self._release[name] = asyncio.Event()
        task = asyncio.create_task(self._run(name, band))
        self._tasks[name] = task
        return task

    async def _run(self, name: str, band: str) -> None:
        async with self.admission.enter(band):
            self.entered.append(name)
            await self._release[name].wait()

    async def finish(self, name: str) -> None:
        self._release[name].set()
        await self._tasks[name]


def bands(**overrides: dict) -> list[Band]:
    gold = {"name": "gold", "priority": 300, "max_in_flight": 2, "queue_ttl_s": LONG_TTL_S}
    bronze = {"name": "bronze", "priority": 100, "max_in_flight": 1, "queue_ttl_s": LONG_TTL_S}
    gold.update(overrides.get("gold", {}))
    bronze.update(overrides.get("bronze", {}))
    return [Band(**bronze), Band(**gold)]


async def test_a_request_under_its_bands_ceiling_enters_at_once():
    admission = Admission(bands())

    async with admission.enter("gold"):
        assert admission.in_flight("gold") == 1
        assert admission.depth("gold") == 0
    assert admission.in_flight("gold") == 0


async def test_a_saturated_band_waits_and_enters_when_a_slot_frees():
    admission = Admission(bands())
    requests = Requests(admission)
    requests.send("b1", "bronze")
    requests.send("b2", "bronze")
    await until(lambda: admission.depth("bronze") == 1)
    assert requests.entered == ["b1"]

    await requests.finish("b1")
    await until(lambda: requests.entered == ["b1", "b2"])

    assert admission.in_flight("bronze") == 1
    assert admission.depth("bronze") == 0
    await requests.finish("b2")


async def test_a_low_band_stops_at_its_ceiling_while_a_higher_one_still_gets_in():
    # The room left above bronze's ceiling is what keeps people's answers
    # quick while a bulk import floods its own band.
    admission = Admission(bands())
    requests = Requests(admission)
    requests.send("b1", "bronze")
    requests.send("b2", "bronze")
    await until(lambda: admission.depth("bronze") == 1)

    requests.send("g1", "gold")
    await until(lambda: "g1" in requests.entered)

    assert admission.in_flight_total == 2
    assert admission.depth("bronze") == 1
    await requests.finish("g1")
    await requests.finish("b1")
    await requests.finish("b2")


async def test_a_higher_band_is_let_in_first_when_a_slot_frees():
    admission = Admission(bands(bronze={"max_in_flight": 2}))
    requests = Requests(admission)
    requests.send("g1", "gold")
    requests.send("g2", "gold")
    await until(lambda: len(requests.entered) == 2)
    requests.send("b1", "bronze")
    await until(lambda: admission.depth("bronze") == 1)
    requests.send("g3", "gold")
    await until(lambda: admission.depth("gold") == 1)

    await requests.finish("g1")
    await until(lambda: "g3" in requests.entered)

    assert "b1" not in requests.entered
    await requests.finish("g2")
    await until(lambda: "b1" in requests.entered)
    await requests.finish("g3")
    await requests.finish("b1")


async def test_a_lower_bands_waiter_never_jumps_a_higher_ones_even_below_its_own_ceiling():
    # Bronze's ceiling is above gold's here, so there is room for bronze; a
    # gold request waiting still goes first.
    admission = Admission(bands(gold={"max_in_flight": 1}, bronze={"max_in_flight": 3}))
    requests = Requests(admission)
    requests.send("g1", "gold")
    await until(lambda: requests.entered == ["g1"])
    requests.send("g2", "gold")
    await until(lambda: admission.depth("gold") == 1)

    requests.send("b1", "bronze")
    await until(lambda: admission.depth("bronze") == 1)
    assert requests.entered == ["g1"]

    await requests.finish("g1")
    await until(lambda: requests.entered == ["g1", "g2", "b1"])
    await requests.finish("g2")
    await requests.finish("b1")


async def test_a_bands_waiters_enter_in_the_order_they_came():
    admission = Admission(bands())
    requests = Requests(admission)
    requests.send("b1", "bronze")
    await until(lambda: requests.entered == ["b1"])
    for name in ("b2", "b3", "b4"):
        requests.send(name, "bronze")
        await until(lambda name=name: admission.depth("bronze") == int(name[1]) - 1)

    for name in ("b1", "b2", "b3"):
        await requests.finish(name)
        await until(lambda name=name: requests.entered[-1] == f"b{int(name[1]) + 1}")

    assert requests.entered == ["b1", "b2", "b3", "b4"]
    await requests.finish("b4")


async def test_a_full_queue_turns_a_request_away_at_once_with_retry_after():
    admission = Admission(bands(bronze={"max_queue": 1}))
    requests = Requests(admission)
    requests.send("b1", "bronze")
    requests.send("b2", "bronze")
    await until(lambda: admission.depth("bronze") == 1)

    with pytest.raises(QueueFull) as refused:
        async with admission.enter("bronze"):
            pass

    assert refused.value.status == 503
    assert refused.value.retry_after_s == 10
    assert "bronze's queue is full" in refused.value.message
    assert admission.depth("bronze") == 1
    await requests.finish("b1")
    await requests.finish("b2")


async def test_a_band_with_no_queue_refuses_as_soon_as_it_is_saturated():
    admission = Admission(bands(bronze={"max_queue": 0}))
    requests = Requests(admission)
    requests.send("b1", "bronze")
    await until(lambda: requests.entered == ["b1"])

    with pytest.raises(QueueFull):
        async with admission.enter("bronze"):
            pass
    await requests.finish("b1")


async def test_a_request_that_waits_out_its_band_is_answered_504_with_retry_after():
    admission = Admission(bands(bronze={"queue_ttl_s": SHORT_TTL_S}))
    requests = Requests(admission)
    requests.send("b1", "bronze")
    await until(lambda: requests.entered == ["b1"])

    with pytest.raises(WaitExpired) as expired:
        async with admission.enter("bronze"):
            pass

    assert expired.value.status == 504
    assert expired.value.retry_after_s == 10
    assert admission.depth("bronze") == 0
    assert admission.in_flight("bronze") == 1
    await requests.finish("b1")
    assert admission.in_flight_total == 0


async def test_a_waiter_that_expires_at_the_head_no_longer_holds_back_lower_bands():
    # gold's waiter keeps bronze out while it waits; once it gives up, the
    # slot bronze has room for is bronze's.
    admission = Admission(
        bands(gold={"max_in_flight": 1, "queue_ttl_s": SHORT_TTL_S}, bronze={"max_in_flight": 2})
    )
    requests = Requests(admission)
    requests.send("g1", "gold")
    await until(lambda: requests.entered == ["g1"])
    waiting_gold = requests.send("g2", "gold")
    await until(lambda: admission.depth("gold") == 1)
    requests.send("b1", "bronze")
    await until(lambda: admission.depth("bronze") == 1)

    with pytest.raises(WaitExpired):
        await waiting_gold

    await until(lambda: requests.entered == ["g1", "b1"])
    await requests.finish("g1")
    await requests.finish("b1")


async def test_a_cancelled_waiter_leaves_the_queue_and_the_next_one_gets_the_slot():
    admission = Admission(bands())
    requests = Requests(admission)
    requests.send("b1", "bronze")
    await until(lambda: requests.entered == ["b1"])
    gone = requests.send("b2", "bronze")
    requests.send("b3", "bronze")
    await until(lambda: admission.depth("bronze") == 2)

    gone.cancel()
    await until(lambda: admission.depth("bronze") == 1)
    await requests.finish("b1")

    await until(lambda: requests.entered == ["b1", "b3"])
    assert gone.cancelled()
    await requests.finish("b3")
    assert admission.in_flight_total == 0


async def test_a_waiter_cancelled_just_after_being_let_in_gives_its_slot_back():
    # Guards a leak: granted and then cancelled before it ran, the slot
    # would otherwise stay taken for good.
    admission = Admission(bands())
    requests = Requests(admission)
    requests.send("b1", "bronze")
    await until(lambda: requests.entered == ["b1"])
    late = requests.send("b2", "bronze")
    await until(lambda: admission.depth("bronze") == 1)

    requests._release["b1"].set()
    await until(lambda: admission.in_flight("bronze") == 1 and admission.depth("bronze") == 0)
    late.cancel()
    with pytest.raises(asyncio.CancelledError):
        await late

    assert requests.entered == ["b1"]
    assert admission.in_flight_total == 0
    async with admission.enter("bronze"):
        assert admission.in_flight("bronze") == 1


async def test_a_request_that_fails_gives_its_slot_back():
    admission = Admission(bands())

    with pytest.raises(RuntimeError):
        async with admission.enter("bronze"):
            raise RuntimeError("the replica went away")

    assert admission.in_flight_total == 0


async def test_an_unknown_band_is_named_with_the_ones_there_are():
    admission = Admission(bands())

    with pytest.raises(UnknownBand, match="'silver'; the bands are bronze, gold"):
        admission.enter("silver")


def test_two_bands_of_one_name_are_refused():
    with pytest.raises(ValueError, match="two admission bands are named 'gold'"):
        Admission([Band(name="gold", priority=1, max_in_flight=1)] * 2)


def test_a_band_waits_thirty_seconds_unless_told_otherwise():
    assert Band(name="gold", priority=300, max_in_flight=8).queue_ttl_s == 30.0


def test_a_band_needs_room_for_at_least_one_request():
    with pytest.raises(ValidationError):
        Band(name="gold", priority=300, max_in_flight=0)
