"""The client API fuzzed against a real gatewayd and a sim replica, and its OpenAPI document.

Bodies come from the document's own request schemas, then spoiled: a field
given a wrong type, a huge number, a lone surrogate, a required field taken
out; beside them arbitrary JSON, deep nesting and junk bytes, under good, bad
and missing keys and random gateway headers. Whatever comes in, the answer is
never a 5xx (there is a ready replica), never shows a Python exception, is
an error in the documented shape of its API, and carries x-llmgw-overhead-ms.

Hypothesis drives a sync httpx client in a worker thread while the cluster
runs in the test's event loop; examples are derandomized and no example
database is kept, so a run in CI is the same as a run here.
"""

from __future__ import annotations

import asyncio
import json
import math

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gatewayd.gateway.protocol import openapi, validate
from gatewayd.gateway.routing.router import PROFILES
from proto.llmgw.v1 import ModelProfile, ModelSpec
from tests.cluster_fixture import running_cluster, wait_for

OPENAI_POSTS = {
    "/v1/chat/completions": "ChatCompletionRequest",
    "/v1/completions": "CompletionRequest",
    "/v1/embeddings": "EmbeddingRequest",
}
POSTS = {**OPENAI_POSTS, "/v1/messages": "MessagesRequest"}
ANSWERS = {
    "/v1/models": "ModelList",
    "/v1/chat/completions": "ChatCompletion",
    "/v1/completions": "Completion",
    "/v1/embeddings": "EmbeddingList",
    "/v1/messages": "Message",
}
# Text that only a Python failure puts in an answer.
PYTHON_TEXT = (
    "Traceback (most recent call last)",
    'File "/',
    "Internal Server Error",
    "KeyError",
    "TypeError",
    "AttributeError",
    "ValueError",
    "IndexError",
    "RecursionError",
    "UnicodeEncodeError",
    "UnicodeDecodeError",
    "JSONDecodeError",
    "AssertionError",
    "OverflowError",
    "NoneType",
    "object has no attribute",
    "not subscriptable",
    "unhashable type",
)
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---- the document ------------------------------------------------------------------


def test_the_document_is_openapi_3_1_and_every_reference_resolves():
    doc = openapi.document()
    assert doc["openapi"] == "3.1.0" and doc["info"]["title"] and doc["info"]["version"]
    refs = list(_refs(doc))
    assert refs
    for ref in refs:
        assert _resolve(doc, ref) is not None, ref
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearer"] == {**schemes["bearer"], "type": "http", "scheme": "bearer"}
    assert schemes["apiKey"]["in"] == "header" and schemes["apiKey"]["name"] == "x-api-key"
    for requirement in _all(doc, "security"):
        for alternative in requirement:
            assert set(alternative) <= set(schemes)
    # Served as it is built.
    assert json.loads(openapi.document_bytes()) == doc


def test_the_document_describes_every_endpoint_with_its_errors_and_headers():
    doc = openapi.document()
    ops = {(p, m): op for p, item in doc["paths"].items() for m, op in item.items()}
    assert set(ops) == {
        ("/v1/models", "get"),
        ("/v1/models/{model}", "get"),
        ("/v1/openapi.json", "get"),
        ("/v1/messages/count_tokens", "post"),
        *((p, "post") for p in POSTS),
        # The stateful parts: the Responses API, files and batches.
        ("/v1/responses", "post"),
        ("/v1/responses/{response_id}", "get"),
        ("/v1/responses/{response_id}", "delete"),
        ("/v1/responses/{response_id}/input_items", "get"),
        ("/v1/files", "post"),
        ("/v1/files", "get"),
        ("/v1/files/{file_id}", "get"),
        ("/v1/files/{file_id}", "delete"),
        ("/v1/files/{file_id}/content", "get"),
        ("/v1/batches", "post"),
        ("/v1/batches", "get"),
        ("/v1/batches/{batch_id}", "get"),
        ("/v1/batches/{batch_id}/cancel", "post"),
    }
    assert len({op["operationId"] for op in ops.values()}) == len(ops)
    assert ops["/v1/openapi.json", "get"]["security"] == []
    assert {"apiKey": []} in ops["/v1/messages", "post"]["security"]
    for path, schema in POSTS.items():
        op = ops[path, "post"]
        body = op["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{schema}"}
        names = {_resolve(doc, p["$ref"])["name"] for p in op["parameters"]}
        assert names == {"x-llmgw-profile", "x-llmgw-session"}
        error = "AnthropicError" if path == "/v1/messages" else "Error"
        assert set(op["responses"]) == {"200", *openapi.ERROR_STATUSES}
        for status, response in op["responses"].items():
            assert "x-llmgw-overhead-ms" in response["headers"]
            if status != "200":
                schema_ref = response["content"]["application/json"]["schema"]["$ref"]
                assert schema_ref.endswith("/" + error)
        assert "text/event-stream" in op["responses"]["200"]["content"] or path.endswith(
            "embeddings"
        )
    profile = _resolve(doc, "#/components/parameters/profile")
    assert profile["schema"]["enum"] == ["chat", "batch", "long-context"]

    schemas = doc["components"]["schemas"]
    chat = schemas["ChatCompletionRequest"]["properties"]
    wanted = [
        *("model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p"),
        *("n", "stop", "stream", "stream_options", "tools", "tool_choice", "response_format"),
        *("user", "seed"),
    ]
    assert set(wanted) <= set(chat)
    assert "prompt" in schemas["CompletionRequest"]["required"]
    assert "input" in schemas["EmbeddingRequest"]["required"]
    anthropic = schemas["MessagesRequest"]["properties"]
    assert {"model", "messages", "system", "max_tokens", "stream", "thinking", "tools"} <= set(
        anthropic
    )
    assert schemas["Error"]["properties"]["error"]["required"] == ["message", "type"]
    assert set(schemas["Error"]["properties"]["error"]["properties"]) == {
        "message",
        "type",
        "param",
        "code",
    }


@pytest.mark.parametrize("path", sorted(OPENAI_POSTS))
def test_every_body_the_document_allows_passes_the_gateways_checks(path):
    # The document and validate.check say the same: what one allows, the other passes.
    doc = openapi.document()

    @FUZZ
    @given(body=from_schema(doc["components"]["schemas"][OPENAI_POSTS[path]], doc))
    def passes(body):
        request = validate.parse(json.dumps(body).encode())
        validate.check(path, request)

    passes()


def _refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _all(node, key):
    if isinstance(node, dict):
        if key in node:
            yield node[key]
        for value in node.values():
            yield from _all(value, key)
    elif isinstance(node, list):
        for value in node:
            yield from _all(value, key)


def _resolve(doc: dict, ref: str):
    assert ref.startswith("#/"), ref
    node = doc
    for part in ref[2:].split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    return node


# ---- strategies ------------------------------------------------------------------


def from_schema(schema: dict, doc: dict) -> st.SearchStrategy:
    """Values a JSON schema allows, for the keywords the document uses."""
    if "$ref" in schema:
        return st.deferred(lambda: from_schema(_resolve(doc, schema["$ref"]), doc))
    if "oneOf" in schema:
        return st.one_of([from_schema(s, doc) for s in schema["oneOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    types = schema.get("type")
    if types is None:
        return PLAIN_JSON
    if isinstance(types, list):
        strategy = st.one_of([from_schema({**schema, "type": t}, doc) for t in types])
    else:
        strategy = _typed(schema, types, doc)
    if "not" in schema:
        refused = schema["not"]["const"]
        strategy = strategy.filter(lambda v: v != refused)
    return strategy


def _typed(schema: dict, kind: str, doc: dict) -> st.SearchStrategy:
    low, high = schema.get("minimum"), schema.get("maximum")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(low, high)
    if kind == "number":
        ints = st.integers(
            None if low is None else math.ceil(low), None if high is None else math.floor(high)
        )
        return ints | st.floats(low, high, allow_nan=False, allow_infinity=False)
    if kind == "string":
        return st.text(min_size=schema.get("minLength", 0), max_size=12)
    if kind == "array":
        items = from_schema(schema.get("items", {}), doc)
        return st.lists(items, min_size=schema.get("minItems", 0), max_size=3)
    properties = schema.get("properties")
    if not properties:
        return st.dictionaries(st.text(max_size=6), PLAIN_JSON, max_size=3)
    required = set(schema.get("required", ()))
    return st.fixed_dictionaries(
        {k: from_schema(v, doc) for k, v in properties.items() if k in required},
        optional={k: from_schema(v, doc) for k, v in properties.items() if k not in required},
    )


PLAIN_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
# Lone surrogates, astral characters, controls, right-to-left: text a server must carry.
TEXT = st.text(
    st.characters() | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    max_size=12,
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=12,
)
# Values a field is not meant to hold.
WRONG = (
    JSON
    | st.sampled_from([0, -1, 2**31, 2**63, 10**30, 10**400, -(10**400), 1e308, -0.0, True, ""])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(min_value=2**31, max_value=10**4000)
)


# Numbers past what 32 and 64 bits and floats hold, where the gateway does arithmetic.
COUNTS = ["max_tokens", "max_completion_tokens", "n", "seed", "dimensions", "temperature"]
HUGE = [2**31, 2**63, 2**64, 10**400, -(10**400), 1e308, -1e308, 5e-324]


def _dump(value, draw) -> bytes:
    # Both ways clients send text: all escaped, or as UTF-8 (surrogates as raw bytes).
    if draw(st.booleans()):
        return json.dumps(value).encode()
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


@st.composite
def bodies(draw, path: str, doc: dict):
    kind = draw(
        st.sampled_from(
            ["valid"] * 4 + ["wrong type"] * 4 + ["huge", "missing", "json", "deep", "junk"]
        )
    )
    if kind == "junk":
        return draw(st.binary(max_size=64))
    if kind == "json":
        return _dump(draw(JSON), draw)
    if kind == "deep":
        # Past ~950 levels Python's json gives up with a RecursionError: refused as 400.
        depths = [10, 128, 129, 900, 3_000]
        depth = draw(st.sampled_from(depths))
        return b'{"model": "chat", "messages": ' + b"[" * depth + b"]" * depth + b"}"
    body = draw(from_schema(doc["components"]["schemas"][POSTS[path]], doc))
    # Mostly the served model, so that most bodies get as far as the replica.
    body["model"] = draw(st.sampled_from(["chat"] * 6 + ["nope", ""]))
    if body["model"] == "nope":
        body["model"] = draw(TEXT)
    if path == "/v1/messages" or "max_tokens" in body:
        body["max_tokens"] = draw(st.integers(1, 4))
    if path != "/v1/embeddings" and draw(st.booleans()):
        # Streams are rare among the drawn bodies; they take another path through the relay.
        body["stream"] = True
    if kind == "wrong type":
        for field in draw(st.lists(st.sampled_from(sorted(body)), min_size=1, max_size=2)):
            body[field] = draw(WRONG)
    elif kind == "huge":
        body[draw(st.sampled_from(COUNTS))] = draw(st.sampled_from(HUGE))
    elif kind == "missing":
        del body[draw(st.sampled_from(sorted(body)))]
    return _dump(body, draw)


HEADER_TEXT = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=24)


@st.composite
def headers(draw, secrets: tuple[str, str]) -> dict:
    # Mostly a good key, so that most requests get past it.
    secret = draw(st.sampled_from(secrets))
    out = dict(
        draw(
            st.sampled_from(
                [{"authorization": f"Bearer {secret}"}] * 12
                + [
                    {"x-api-key": secret},
                    {"authorization": f"bearer   {secret}"},
                    {},
                    {"authorization": "Bearer llmgw-nope"},
                    {"authorization": f"Basic {secret}"},
                    {"authorization": "Bearer"},
                    {"x-api-key": "nope"},
                    {"authorization": None},
                ]
            )
        )
    )
    if out.get("authorization", "") is None:
        out["authorization"] = draw(HEADER_TEXT)
    if draw(st.booleans()):
        profile = draw(st.sampled_from([*PROFILES, None]))
        out["x-llmgw-profile"] = draw(HEADER_TEXT) if profile is None else profile
    if draw(st.booleans()):
        out["x-llmgw-session"] = draw(HEADER_TEXT)
    if draw(st.booleans()):
        out["content-type"] = draw(st.sampled_from(["application/json", "text/plain"]))
    return out


# ---- the server -----------------------------------------------------------------


@pytest.fixture
async def served(tmp_path):
    """A cluster serving the sim model "chat" fast (no waits, 3 tokens), and two keys for it.

    The second key has a rate limit and tokens-a-minute limit."""
    async with running_cluster(tmp_path) as cluster:
        await cluster.start_agent("cpu-node")
        profile = ModelProfile(
            name="default",
            engine="sim",
            startup_timeout_s=60,
            args=["--ttft-ms", "0", "--itl-ms", "0", "--tokens", "3"],
        )
        spec = ModelSpec(
            name="chat",
            source="/models/none.gguf",
            replicas_min=1,
            replicas_max=1,
            slots=16,
            profiles=[profile],
        )
        async with cluster.admin() as admin:
            await admin.put_model(spec)
            await admin.create_tenant("project", "acme/ml/search", parents=True)
            key = await admin.create_key("acme/ml/search", name="fuzz")
            # Limits take the estimate of every request: a key that has them
            # walks the limit tables with whatever max_tokens comes in.
            limited = await admin.create_key("acme/ml/search", rpm=100_000, tpm=1_000_000)

            async def ready():
                rs = (await admin.list_replicas("chat")).replicas
                return rs and rs[0].state == "ready"

            await wait_for(ready, attempts=400)
        yield f"http://127.0.0.1:{cluster.server.ports['http']}", (key.secret, limited.secret)


def check_answer(path: str, sent: bytes, r: httpx.Response, doc: dict) -> None:
    """What every answer must be, whatever was sent."""
    where = f"{r.status_code} for {sent[:300]!r}: {r.content[:500]!r}"
    assert r.status_code < 500, where
    assert float(r.headers["x-llmgw-overhead-ms"]) >= 0, where
    for text in PYTHON_TEXT:
        assert text.encode() not in r.content or text.encode() in sent, where
    if r.status_code == 200:
        if r.headers["content-type"].startswith("text/event-stream"):
            assert r.content.startswith(b"event: " if path == "/v1/messages" else b"data: "), where
            return
        answer = r.json()
        for field in doc["components"]["schemas"][ANSWERS[path]]["required"]:
            assert field in answer, where
        return
    assert r.status_code in {400, 401, 403, 404, 405, 413, 429}, where
    if r.status_code == 429:
        assert r.headers["retry-after"].isdigit(), where
    body = r.json()
    if path == "/v1/messages":
        assert body["type"] == "error", where
        error = body["error"]
        assert isinstance(error["type"], str) and isinstance(error["message"], str), where
        return
    error = body["error"]
    assert isinstance(error["message"], str) and isinstance(error["type"], str), where
    assert isinstance(error.get("param"), str | None), where
    assert isinstance(error.get("code"), str | int | None), where


@pytest.mark.parametrize("path", sorted(POSTS))
async def test_no_body_or_header_gets_a_5xx_a_traceback_or_an_undocumented_error(served, path):
    base, secrets = served

    def fuzz():
        with httpx.Client(base_url=base, timeout=30) as http:
            doc = http.get("/v1/openapi.json").json()

            @FUZZ
            @given(body=bodies(path, doc), sent_headers=headers(secrets))
            def one(body, sent_headers):
                r = http.post(path, content=body, headers=sent_headers)
                check_answer(path, body, r, doc)

            one()

    await asyncio.to_thread(fuzz)


async def test_the_document_and_the_model_list_are_served_whatever_the_headers(served):
    base, secrets = served

    def fuzz():
        with httpx.Client(base_url=base, timeout=30) as http:
            r = http.get("/v1/openapi.json")
            assert r.status_code == 200 and r.json() == openapi.document()
            doc = r.json()

            @FUZZ
            @given(sent_headers=headers(secrets))
            def one(sent_headers):
                r = http.get("/v1/models", headers=sent_headers)
                check_answer("/v1/models", b"", r, doc)
                if r.status_code == 200:
                    assert [m["id"] for m in r.json()["data"]] == ["chat"]

            one()

    await asyncio.to_thread(fuzz)


async def test_a_known_bad_body_is_refused_naming_its_field_over_the_wire(served):
    # The checks reached through the gateway, in each API's error shape.
    base, (secret, limited) = served
    auth = {"authorization": f"Bearer {secret}"}
    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.post(
            "/v1/chat/completions",
            headers=auth,
            json={"model": "chat", "messages": [{"role": "user", "content": "x"}], "top_p": 3},
        )
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "top_p"
        r = await http.post(
            "/v1/messages",
            headers={"x-api-key": secret},
            content=b'{"model": "chat", "max_tokens": 2, "messages": '
            b'[{"role": "user", "content": "\\ud800"}]}',
        )
        assert r.status_code == 400 and r.json()["type"] == "error"
        assert "surrogate" in r.json()["error"]["message"]
        # 10**400 tokens overflowed the float of the tokens-a-minute bucket: a 500.
        for secret_ in (secret, limited):
            r = await http.post(
                "/v1/chat/completions",
                headers={"authorization": f"Bearer {secret_}"},
                json={
                    "model": "chat",
                    "messages": [{"role": "user", "content": "x"}],
                    "max_tokens": 10**400,
                },
            )
            assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


async def test_a_messages_body_nested_past_pythons_recursion_limit_is_a_400(served):
    base, (secret, _) = served
    nest = b"[" * 3_000 + b"]" * 3_000
    async with httpx.AsyncClient(base_url=base) as http:
        r = await http.post(
            "/v1/messages",
            headers={"x-api-key": secret},
            content=b'{"model": "chat", "max_tokens": 1, "messages": ' + nest + b"}",
        )
    assert r.status_code == 400 and r.json()["type"] == "error"
