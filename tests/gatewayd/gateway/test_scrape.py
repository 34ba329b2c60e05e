"""Engine metrics: the few load figures read from each engine's own names, kept a short while."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from agentd.sim.metrics import SimMetrics
from gatewayd.gateway.metering.scrape import EngineStats, Scraper, parse_metrics
from gatewayd.gateway.routing.router import Target

LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.25
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 3
"""


def test_the_sims_vllm_names_are_read():
    m = SimMetrics("chat", max_concurrency=4)
    m.started()
    m.waiting.inc()
    m.waiting.inc()
    stats = parse_metrics(m.render().decode(), at=5.0)
    assert stats == EngineStats(waiting=2, running=1, kv_usage=0.25, at=5.0)


def test_llama_cpp_names_are_read():
    assert parse_metrics(LLAMACPP) == EngineStats(waiting=3, running=2, kv_usage=0.25)


def test_series_of_one_name_add_up_and_labels_with_spaces_do_not_confuse_the_parser():
    text = (
        'vllm:num_requests_waiting{model_name="a b",engine="0"} 2.0\n'
        'vllm:num_requests_waiting{model_name="a b",engine="1"} 3.0 1712345678000\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.2\n'
        'vllm:kv_cache_usage_perc{engine="1"} 0.4\n'
        "vllm:gpu_cache_usage_perc 0.9\n"
        "vllm:num_requests_running NaN\n"
        "broken line without value{\n"
    )
    stats = parse_metrics(text)
    assert stats.waiting == 5 and stats.running == 0
    assert abs(stats.kv_usage - 0.3) < 1e-9  # the newer name wins, as the mean of its series


def test_older_vllm_cache_name_and_no_cache_figure_at_all():
    assert parse_metrics("vllm:gpu_cache_usage_perc 0.5\n").kv_usage == 0.5
    assert parse_metrics("vllm:num_requests_waiting 1\n").kv_usage is None
    assert parse_metrics("# nothing we read\nprocess_cpu_seconds_total 3\n") is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_scrape_reads_every_ready_replica_and_a_failed_one_keeps_its_figures_a_while():
    up = {"ok": True}
    seen_keys = []

    async def metrics(request):
        seen_keys.append(request.headers.get("authorization"))
        if not up["ok"]:
            return web.Response(status=503)
        return web.Response(text=LLAMACPP)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    clock = FakeClock()
    targets = [
        Target("r1", f"http://127.0.0.1:{port}"),
        Target("external:gpt#1", "https://api.example.com", external=True),
    ]
    scraper = Scraper(lambda: targets, engine_key="ek", keep_s=5.0, clock=clock)
    try:
        async with aiohttp.ClientSession() as http:
            await scraper.scrape_once(http)
            assert scraper.stats("r1").waiting == 3
            assert scraper.stats("external:gpt#1") is None  # providers are not asked
            assert seen_keys == ["Bearer ek"]
            up["ok"] = False
            clock.now += 3
            await scraper.scrape_once(http)
            assert scraper.stats("r1").waiting == 3  # kept for a while
            clock.now += 3
            await scraper.scrape_once(http)
            assert scraper.stats("r1") is None
            up["ok"] = True
            await scraper.scrape_once(http)
            assert scraper.stats("r1") is not None
            targets.pop(0)  # the replica is gone: so are its figures
            await scraper.scrape_once(http)
            assert scraper.stats("r1") is None
    finally:
        await runner.cleanup()


async def test_a_replica_that_does_not_answer_at_all_is_skipped_without_error():
    clock = FakeClock()
    scraper = Scraper(lambda: [Target("r1", "http://127.0.0.1:9")], timeout_s=0.5, clock=clock)
    async with aiohttp.ClientSession() as http:
        await scraper.scrape_once(http)
    assert scraper.stats("r1") is None
