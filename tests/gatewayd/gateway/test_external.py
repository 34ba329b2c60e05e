"""Outside providers: one endpoint per key file; a key at its limit or refused is passed over."""

from __future__ import annotations

import json
import logging
import os

import pytest
from pydantic import ValidationError

from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.routing.external import ExternalEndpoints
from gatewayd.gateway.routing.forward import Clock, Forwarder
from gatewayd.gateway.routing.router import Router
from llmgw.catalog import Model
from tests.gatewayd.gateway.fakes import Sent, Upstream


def external_spec(url: str, *files, model: str = "gpt-4o-mini") -> dict:
    """A catalog spec; each key file a path, or (path, weight)."""
    keys = []
    for f in files:
        path, weight = f if isinstance(f, tuple) else (f, 0)
        keys.append({"file": str(path), "weight": weight})
    return {
        "name": "gpt",
        "source": "external",
        "external": {"url": url, "model": model, "api_key_files": keys},
    }


# ---- the catalog -------------------------------------------------------------


def test_source_external_is_valid_exactly_with_an_external_section():
    m = Model.model_validate(external_spec("https://api.example.com/v1", "/etc/k1"))
    assert m.is_external and m.profiles == []
    assert m.external.base_url == "https://api.example.com"
    with pytest.raises(ValidationError, match="needs an external section"):
        Model.model_validate({"name": "gpt", "source": "external"})
    with pytest.raises(ValidationError, match="only for source: external"):
        Model.model_validate(
            {"name": "m", "source": "/models/m.gguf", "external": {"url": "https://a"}}
        )
    with pytest.raises(ValidationError, match="leave out its profiles"):
        Model.model_validate({**external_spec("https://a", "/k"), "profiles": [{}]})


def test_key_files_must_be_absolute_and_urls_http():
    with pytest.raises(ValidationError, match="absolute"):
        Model.model_validate(external_spec("https://a", "keys/k1"))
    with pytest.raises(ValidationError, match="absolute"):
        Model.model_validate(external_spec("https://a", "/etc/../k1"))
    with pytest.raises(ValidationError, match="http"):
        Model.model_validate(external_spec("ftp://a", "/k1"))


# ---- endpoints from key files ------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_readable_key_file_is_an_endpoint_of_its_own(tmp_path, caplog):
    (tmp_path / "k1").write_text("sk-one\n")
    (tmp_path / "k3").write_text("sk-three")
    spec = external_spec(
        "https://api.example.com/v1",
        (str(tmp_path / "k1"), 0),
        (str(tmp_path / "missing"), 0),
        (str(tmp_path / "k3"), 2),
    )
    with caplog.at_level(logging.WARNING):
        targets = ExternalEndpoints(keys_dir=tmp_path).targets("gpt", spec)
    assert [t.replica_id for t in targets] == ["external:gpt#1", "external:gpt#3"]
    assert [t.authorization for t in targets] == ["Bearer sk-one", "Bearer sk-three"]
    assert [t.weight for t in targets] == [1, 2]
    assert all(t.external and t.upstream_model == "gpt-4o-mini" for t in targets)
    assert targets[0].base_url == "https://api.example.com"
    assert "missing" in caplog.text and "external:gpt#2" in caplog.text
    assert "sk-" not in caplog.text


def test_a_rotated_key_is_read_again_and_a_spec_change_rebuilds_at_once(tmp_path, caplog):
    key = tmp_path / "k1"
    key.write_text("sk-old")
    clock = FakeClock()
    ends = ExternalEndpoints(keys_dir=tmp_path, recheck_s=5, clock=clock)
    spec = external_spec("https://a", str(key))
    assert ends.targets("gpt", spec)[0].authorization == "Bearer sk-old"
    key.write_text("sk-newer")
    os.utime(key, ns=(1, 10**18))
    assert ends.targets("gpt", spec)[0].authorization == "Bearer sk-old"  # within recheck_s
    clock.now += 5
    assert ends.targets("gpt", spec)[0].authorization == "Bearer sk-newer"
    key.write_text("")
    os.utime(key, ns=(1, 2 * 10**18))
    clock.now += 5
    with caplog.at_level(logging.WARNING):
        assert ends.targets("gpt", spec) == []
    assert "empty" in caplog.text
    other = external_spec("https://b", str(key))
    key.write_text("sk-back")
    assert ends.targets("gpt", other)[0].base_url == "https://b"


def test_a_key_file_outside_the_providers_directory_is_never_read(tmp_path, caplog):
    # Guards: api_key_files read any one-line file gatewayd could read (the engine key,
    # the store's DSN file) and sent it as a Bearer token to the model's url.
    keys_dir = tmp_path / "secrets" / "providers"
    keys_dir.mkdir(parents=True)
    (keys_dir / "ok.key").write_text("sk-provider")
    engine_key = tmp_path / "secrets" / "engine-key"
    engine_key.write_text("engine-secret-3f2a")
    (keys_dir / "link.key").symlink_to(engine_key)  # inside by its name, outside by its target
    spec = external_spec(
        "https://collector.example/v1",
        str(engine_key),
        str(keys_dir / "link.key"),
        str(keys_dir / "ok.key"),
    )
    with caplog.at_level(logging.WARNING):
        targets = ExternalEndpoints(keys_dir=keys_dir).targets("gpt", spec)
    assert [(t.replica_id, t.authorization) for t in targets] == [
        ("external:gpt#3", "Bearer sk-provider")
    ]
    assert f"is not in {keys_dir}" in caplog.text and f"leads to {engine_key}" in caplog.text
    assert "engine-secret" not in caplog.text


def test_a_provider_asking_no_key_is_one_endpoint_without_one():
    spec = external_spec("http://10.0.0.5:8000")
    (t,) = ExternalEndpoints(keys_dir=None).targets("gpt", spec)
    assert t.replica_id == "external:gpt" and t.authorization == "" and t.external


# ---- forwarding to the keys --------------------------------------------------


def body(**extra) -> bytes:
    return json.dumps(
        {"model": "gpt", "messages": [{"role": "user", "content": "hi"}], **extra}
    ).encode()


async def forwarder_for(tmp_path, upstream: Upstream, *keys: str):
    files = []
    for i, k in enumerate(keys):
        f = tmp_path / f"key{i}"
        f.write_text(k)
        files.append(str(f))
    spec = external_spec(upstream.url + "/v1", *files)
    ends = ExternalEndpoints(keys_dir=tmp_path)
    router = Router(lambda m: ends.targets("gpt", spec))
    fwd = Forwarder(router, "engine-key")
    await fwd.start()
    return router, fwd


async def test_a_refused_key_is_passed_over_named_by_its_endpoint_and_never_shown(tmp_path, caplog):
    async with Upstream({"sk-good": 200}).running() as up:
        router, fwd = await forwarder_for(tmp_path, up, "sk-wrong", "sk-good")
        try:
            with caplog.at_level(logging.WARNING):
                for i in range(6):
                    sent = Sent()
                    out = await fwd.forward(
                        "/v1/chat/completions", body(), "gpt", f"s{i}", sent, Clock(0)
                    )
                    assert sent.status == 200 and out.target.replica_id == "external:gpt#2"
                    assert out.prompt_tokens == 3 and out.completion_tokens == 2
        finally:
            await fwd.close()
    # The provider's name of the model was sent, with each key's own header.
    assert {b["model"] for _, b in up.seen} == {"gpt-4o-mini"}
    assert "Bearer engine-key" not in {a for a, _ in up.seen}
    assert "external_key_refused" in caplog.text and "external:gpt#1" in caplog.text
    assert up.url in caplog.text and "sk-wrong" not in caplog.text
    # Refused once, then left out while its breaker is open.
    assert router.key_refusals == {"external:gpt#1": 1}


async def test_a_key_at_its_limit_is_passed_over_for_as_long_as_the_provider_says(tmp_path):
    async with Upstream({"sk-a": 429, "sk-b": 200}).running() as up:
        up.retry_after = "30"
        router, fwd = await forwarder_for(tmp_path, up, "sk-a", "sk-b")
        try:
            for i in range(4):
                sent = Sent()
                await fwd.forward("/v1/chat/completions", body(), "gpt", f"x{i}", sent, Clock(0))
                assert sent.status == 200
        finally:
            await fwd.close()
    assert [a for a, _ in up.seen].count("Bearer sk-a") == 1
    # Still out: the provider said 30 s.
    assert [t.replica_id for t in router.candidates("gpt")] == ["external:gpt#2"]
    assert router.key_refusals == {}


async def test_with_a_single_key_its_401_reaches_the_client_as_a_502_in_its_words(tmp_path):
    # The client's own key was good: a provider refusing ours is the gateway's failure.
    async with Upstream({"sk-good": 200}).running() as up:
        router, fwd = await forwarder_for(tmp_path, up, "sk-wrong")
        try:
            for _ in range(2):
                sent = Sent()
                with pytest.raises(ApiError) as err:
                    await fwd.forward("/v1/chat/completions", body(), "gpt", "", sent, Clock(0))
                assert err.value.status == 502 and err.value.code == "upstream_error"
                assert "outside provider" in err.value.message
                assert "(401): status 401" in err.value.message and sent.status == 0
        finally:
            await fwd.close()
    assert router.key_refusals == {"external:gpt#1": 2}


async def test_no_readable_key_means_no_endpoint_ready(tmp_path):
    spec = external_spec("https://a", str(tmp_path / "none"))
    ends = ExternalEndpoints(keys_dir=tmp_path)
    fwd = Forwarder(Router(lambda m: ends.targets("gpt", spec)), "k")
    await fwd.start()
    try:
        with pytest.raises(ApiError) as err:
            await fwd.forward("/v1/chat/completions", body(), "gpt", "", Sent(), Clock(0))
    finally:
        await fwd.close()
    assert err.value.status == 503
