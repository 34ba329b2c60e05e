"""Admission bands changed while requests run and wait (the kept settings changed): none is lost."""

from __future__ import annotations

import asyncio

import pytest

from gatewayd.gateway.policy.admission import Admission, Band, QueueFull, UnknownBand
from gatewayd.gateway.policy.bands import BandPools
from llmgw.config import AdmissionConfig, BandConfig
from tests.gatewayd.gateway.test_admission import LONG_TTL_S, Requests, until


def _band(name: str, priority: int = 100, max_in_flight: int = 1, max_queue: int = 10) -> Band:
    return Band(
        name=name,
        priority=priority,
        max_in_flight=max_in_flight,
        max_queue=max_queue,
        queue_ttl_s=LONG_TTL_S,
    )


async def test_a_smaller_queue_keeps_the_waiters_it_has_and_refuses_the_next():
    # Regression guarded: a settings change dropping (or failing) requests
    # already queued, where it should only bound the ones still to come.
    admission = Admission([_band("default", max_queue=10)])
    reqs = Requests(admission)
    reqs.send("running", "default")
    await until(lambda: reqs.entered == ["running"])
    waiting = [reqs.send(f"w{i}", "default") for i in range(3)]
    await until(lambda: admission.depth("default") == 3)

    admission.reband([_band("default", max_queue=1)])

    assert admission.depth("default") == 3 and admission.in_flight("default") == 1
    with pytest.raises(QueueFull):
        async with admission.enter("default"):
            pass
    await reqs.finish("running")
    for name in ("w0", "w1", "w2"):
        await until(lambda name=name: name in reqs.entered)
        await reqs.finish(name)
    assert all(t.done() and t.exception() is None for t in waiting)


async def test_a_wider_ceiling_lets_waiters_in_at_once():
    admission = Admission([_band("default", max_in_flight=1)])
    reqs = Requests(admission)
    reqs.send("a", "default")
    reqs.send("b", "default")
    await until(lambda: admission.depth("default") == 1)

    admission.reband([_band("default", max_in_flight=2)])

    await until(lambda: reqs.entered == ["a", "b"])
    await reqs.finish("a")
    await reqs.finish("b")


async def test_a_band_taken_out_serves_what_it_holds_and_takes_nothing_new():
    admission = Admission([_band("gold", 300), _band("bulk", 50)])
    reqs = Requests(admission)
    reqs.send("g", "gold")
    await until(lambda: reqs.entered == ["g"])
    reqs.send("b", "bulk")
    await until(lambda: admission.depth("bulk") == 1)

    admission.reband([_band("gold", 300), _band("silver", 200)])

    with pytest.raises(UnknownBand):
        admission.enter("bulk")
    await reqs.finish("g")
    await until(lambda: "b" in reqs.entered)
    await reqs.finish("b")
    reqs.send("s", "silver")
    await until(lambda: "s" in reqs.entered)
    await reqs.finish("s")


async def test_the_pools_take_new_bands_for_every_model_they_hold():
    pools = BandPools(AdmissionConfig(), lambda _model: 1)
    inside, release = asyncio.Event(), asyncio.Event()

    async def hold():
        async with pools.enter("m", "default"):
            inside.set()
            await release.wait()

    task = asyncio.create_task(hold())
    await inside.wait()

    pools.reconfigure(
        AdmissionConfig(
            bands=[BandConfig(name="default"), BandConfig(name="bulk", priority=10)],
            default_band="bulk",
        )
    )

    assert pools.band_names == ["default", "bulk"]
    assert pools.band_of("") == "bulk" and pools.in_flight("default") == 1
    release.set()
    await task
    assert pools.in_flight("default") == 0
