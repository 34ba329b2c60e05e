"""/mcp's HTTP rules on a real gatewayd, request by request: key, Origin, size, headers,
versions, sessions — and a hypothesis fuzz of all of it: never a 5xx, never a traceback.

One gatewayd for the module, with a small body limit so sizes near it are cheap.
"""

from __future__ import annotations

import asyncio
import json
import logging

import aiohttp
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from gatewayd.mcp.endpoint import legacy
from tests.cluster_fixture import running_cluster
from tests.gatewayd.mcp.endpoint.kit import Gateway

pytestmark = pytest.mark.asyncio(loop_scope="module")

LIMIT = 4096
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
ORIGIN_OK = "http://agent.example"


class _Problems(logging.Handler):
    """Records what must never be logged for a client's request: errors and tracebacks."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record):
        watched = record.name.startswith(("gatewayd.mcp", "gatewayd.http", "uvicorn"))
        if watched and (record.exc_info or record.levelno >= logging.ERROR):
            self.seen.append(self.format(record))


def _configure(cfg) -> None:
    cfg.mcp.max_body_bytes = LIMIT
    cfg.mcp.allowed_origins = [ORIGIN_OK]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(tmp_path_factory):
    problems = _Problems()
    logging.getLogger().addHandler(problems)
    try:
        async with running_cluster(tmp_path_factory.mktemp("mcp"), configure=_configure) as c:
            g = Gateway(c)
            g.problems = problems
            await g.key("a", "Acme/ml/search")
            await g.key("b", "Acme/ops/infra")
            await g.grant("project:Acme/ml/search", "llmgw:admin")
            async with aiohttp.ClientSession() as http:
                g.http = http
                yield g
    finally:
        logging.getLogger().removeHandler(problems)


def _auth(g, key="a") -> dict:
    return {"Authorization": f"Bearer {g.keys[key]}"}


def _modern(g, method, params=None, *, req_id=1, key="a", **extra) -> tuple[dict, bytes]:
    headers = {
        **_auth(g, key),
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
    }
    headers.update(extra)
    p = {"_meta": META, **(params or {})}
    body = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": p}
    return headers, json.dumps(body).encode()


async def _post(g, headers, body) -> tuple[int, dict | None, aiohttp.ClientResponse]:
    async with g.http.post(g.url, headers=headers, data=body) as r:
        raw = await r.read()
        return r.status, (json.loads(raw) if raw else None), r


async def _initialize(g, key="a", version="2025-11-25") -> str:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t"}},
    }
    status, answer, r = await _post(g, _auth(g, key), json.dumps(body).encode())
    assert status == 200, answer
    return r.headers["mcp-session-id"]


# --- key, Origin, size ----------------------------------------------------------


async def test_a_request_without_a_valid_key_is_401_with_a_bearer_challenge(gw):
    headers, body = _modern(gw, "tools/list")
    for auth in (None, "Bearer llmgw-not-a-key", "Basic Zm9vOmJhcg=="):
        h = {k: v for k, v in headers.items() if k != "Authorization"}
        if auth:
            h["Authorization"] = auth
        status, answer, r = await _post(gw, h, body)
        assert status == 401
        challenge = r.headers["WWW-Authenticate"]
        assert challenge.startswith('Bearer realm="llmgw", error="invalid_token"')
        assert answer["id"] is None and answer["error"]["message"] in challenge


async def test_a_foreign_origin_is_403_and_the_gateways_own_or_a_listed_one_passes(gw):
    port = gw.server.ports["http"]
    for origin, want in (
        ("http://evil.example", 403),
        ("null", 403),
        (f"http://127.0.0.1:{port}", 200),
        (ORIGIN_OK, 200),
    ):
        headers, body = _modern(gw, "ping", Origin=origin)
        status, answer, _ = await _post(gw, headers, body)
        assert status == want, (origin, answer)


async def test_a_body_over_the_limit_is_413_saying_what_the_limit_is(gw):
    headers, body = _modern(gw, "ping")
    big = body[:-1] + b"," + b'"pad":"' + b"x" * LIMIT + b'"}'
    status, answer, _ = await _post(gw, headers, big)
    assert status == 413
    assert answer["error"]["message"] == (
        "the body is over the 4096 bytes /mcp takes (mcp.max_body_bytes)"
    )

    async def chunks():  # no Content-Length: counted as it arrives
        for _ in range(8):
            yield b" " * 1024

    status, answer, _ = await _post(gw, headers, chunks())
    assert status == 413 and "mcp.max_body_bytes" in answer["error"]["message"]
    # Just within the limit is answered.
    fits = body + b" " * (LIMIT - len(body))
    status, _, _ = await _post(gw, headers, fits)
    assert status == 200


# --- 2026-07-28 -----------------------------------------------------------------


async def test_routing_headers_that_disagree_with_the_body_are_a_400_header_mismatch(gw):
    headers, body = _modern(gw, "tools/list")
    headers["mcp-method"] = "ping"
    status, answer, _ = await _post(gw, headers, body)
    assert status == 400 and answer["error"]["code"] == -32020

    headers, body = _modern(gw, "tools/call", {"name": "hr.lookup"}, **{"mcp-name": "hr.other"})
    status, answer, _ = await _post(gw, headers, body)
    assert status == 400 and answer["error"]["code"] == -32020 and answer["id"] == 1

    headers, body = _modern(gw, "tools/list")
    twice = CIMultiDict(headers)
    twice.add("mcp-method", "tools/list")
    status, answer, _ = await _post(gw, twice, body)
    assert status == 400 and answer["error"]["code"] == -32020
    assert "more than once" in answer["error"]["message"]


async def test_a_version_not_served_is_refused_naming_those_that_are(gw):
    headers, body = _modern(gw, "tools/list", **{"mcp-protocol-version": "2099-01-01"})
    body = body.replace(MODERN.encode(), b"2099-01-01")
    status, answer, _ = await _post(gw, headers, body)
    assert status == 400
    assert answer["error"]["code"] == -32022
    assert answer["error"]["data"]["supported"] == [MODERN]


async def test_discover_answers_what_the_gateway_serves(gw):
    status, answer, _ = await _post(gw, *_modern(gw, "server/discover"))
    result = answer["result"]
    assert status == 200 and result["supportedVersions"] == [MODERN]
    assert result["capabilities"] == {"tools": {"listChanged": True}}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "llmgw"


async def test_an_unknown_method_is_404_method_not_found(gw):
    status, answer, _ = await _post(gw, *_modern(gw, "tasks/list"))
    assert status == 404 and answer["error"]["code"] == -32601


async def test_a_notification_at_2026_07_28_is_accepted_with_202(gw):
    headers, _ = _modern(gw, "notifications/cancelled")
    body = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled"}).encode()
    status, answer, _ = await _post(gw, headers, body)
    assert status == 202 and answer is None


async def test_get_and_delete_at_2026_07_28_are_405_allowing_post(gw):
    headers, _ = _modern(gw, "ping")
    for verb in ("GET", "DELETE"):
        async with gw.http.request(verb, gw.url, headers=headers) as r:
            assert r.status == 405 and r.headers["Allow"] == "POST"


# --- sessions -------------------------------------------------------------------


async def test_initialize_answers_the_clients_version_if_known_else_the_newest(gw):
    for asked, got in (("2025-03-26", "2025-03-26"), ("1999-01-01", "2025-11-25")):
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": asked, "capabilities": {}}}  # fmt: skip
        status, answer, r = await _post(gw, _auth(gw), json.dumps(body).encode())
        assert status == 200 and answer["result"]["protocolVersion"] == got
        assert len(r.headers["mcp-session-id"]) == 32


async def test_a_session_request_without_an_id_is_400_and_with_an_unknown_one_404(gw):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    status, answer, _ = await _post(gw, _auth(gw), body)
    assert status == 400 and "Mcp-Session-Id" in answer["error"]["message"]
    status, _, _ = await _post(gw, {**_auth(gw), "mcp-session-id": "0" * 32}, body)
    assert status == 404


async def test_another_keys_session_id_is_answered_as_unknown(gw):
    sid = await _initialize(gw, "a")
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    status, _, _ = await _post(gw, {**_auth(gw, "b"), "mcp-session-id": sid}, body)
    assert status == 404
    status, answer, _ = await _post(gw, {**_auth(gw, "a"), "mcp-session-id": sid}, body)
    assert status == 200 and "tools" in answer["result"]


async def test_a_key_past_its_session_cap_loses_its_least_recently_used_one(gw, monkeypatch):
    # Guards: a client that initializes in a loop without DELETE filling memory.
    monkeypatch.setattr(legacy, "MAX_SESSIONS_PER_KEY", 2)
    first, second = await _initialize(gw, "b"), await _initialize(gw, "b")
    third = await _initialize(gw, "b")
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
    got = []
    for sid in (first, second, third):
        status, _, _ = await _post(gw, {**_auth(gw, "b"), "mcp-session-id": sid}, body)
        got.append(status)
    assert got == [404, 200, 200]


async def test_notifications_in_a_session_are_202_and_delete_ends_it(gw):
    sid = await _initialize(gw)
    h = {**_auth(gw), "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    status, _, _ = await _post(gw, h, note)
    assert status == 202
    async with gw.http.delete(gw.url, headers=h) as r:
        assert r.status == 200
    async with gw.http.delete(gw.url, headers=h) as r:
        assert r.status == 404


async def test_open_streams_end_when_the_gateway_stops_so_its_http_server_can(gw):
    # Guards: uvicorn waiting for ever on a GET stream at gatewayd's stop.
    sid = await _initialize(gw)
    h = {**_auth(gw), "mcp-session-id": sid, "Accept": "text/event-stream"}
    async with gw.http.get(gw.url, headers=h) as r:
        assert r.status == 200 and r.headers["content-type"] == "text/event-stream"
        gw.rt.end_streams()  # what GatewayServer.stop does before it waits for uvicorn
        assert await asyncio.wait_for(r.read(), 30) == b""


# --- fuzz -----------------------------------------------------------------------

_printable = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _printable,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_printable, inner, max_size=4),
    max_leaves=12,
)
_methods = st.sampled_from(
    ["initialize", "tools/list", "tools/call", "ping", "server/discover", "prompts/list",
     "resources/list", "subscriptions/listen", "notifications/initialized", "x/y"]
) | _printable  # fmt: skip
_ids = st.integers() | _printable | st.none() | st.booleans() | st.lists(st.integers(), max_size=2)
_tool_names = st.sampled_from(["llmgw_admin.node_logs", "llmgw_admin.list_nodes", "hr.x"])
_known = st.sampled_from(
    ["initialize", "tools/list", "tools/call", "ping", "server/discover", "prompts/list",
     "resources/list", "subscriptions/listen", "notifications/initialized", "x/y"]
)  # fmt: skip


@st.composite
def _message(draw, modern: bool):
    """A JSON-RPC message, well-formed nine parts in ten in each of its fields."""
    msg: dict = {}
    for field, usual, odd in (
        ("jsonrpc", "2.0", _json),
        ("id", draw(st.integers(0, 99)), _ids),
        ("method", draw(_known), _printable),
    ):
        value = _mostly(draw, usual, odd, "(absent)")
        if value != "(absent)":
            msg[field] = value
    params: dict = {}
    if modern:
        params["_meta"] = _mostly(draw, META, _json)
    if msg.get("method") == "tools/call" or draw(st.booleans()):
        params["name"] = _mostly(draw, draw(_tool_names), _json)
        params["arguments"] = _mostly(
            draw, draw(st.dictionaries(_printable, _json, max_size=3)), _json
        )
    if msg.get("method") == "initialize":
        params["protocolVersion"] = _mostly(draw, "2025-11-25", MODERN, _json)
    if msg.get("method") == "subscriptions/listen":
        params["notifications"] = _mostly(draw, {"toolsListChanged": False}, _json)
    msg["params"] = _mostly(draw, params, _json)
    if draw(st.integers(0, 19)) == 0:
        msg["result"] = draw(_json)
    return msg


def _mostly(draw, usual, *others):
    """``usual`` nine times in ten, else one of ``others`` (strategies or values)."""
    if draw(st.integers(0, 9)) < 9:
        return usual
    pick = draw(st.sampled_from(others))
    return draw(pick) if isinstance(pick, st.SearchStrategy) else pick


@st.composite
def _request(draw, sid: str):
    modern = draw(st.booleans())
    msg = draw(_message(modern))
    method = msg.get("method")
    version = _mostly(draw, MODERN if modern else None, "2025-11-25", "2025-03-26", _printable)
    routing_method = method if isinstance(method, str) and modern else None
    params = msg.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    headers: dict[str, str] = {}
    for header, value in (
        ("mcp-protocol-version", version),
        ("mcp-method", _mostly(draw, routing_method, _methods)),
        ("mcp-name", _mostly(draw, name if isinstance(name, str) else None, _printable)),
        ("mcp-session-id", _mostly(draw, None if modern else sid, _printable)),
        ("origin", _mostly(draw, None, ORIGIN_OK, _printable)),
        ("content-type", _mostly(draw, "application/json", "text/plain")),
    ):
        if value is not None:
            headers[header] = value
    kind = _mostly(draw, "message", "json", "bytes")
    if kind == "message":
        body = json.dumps(msg).encode()
    elif kind == "json":
        body = json.dumps(draw(_json)).encode()
    else:
        body = draw(st.binary(max_size=64))
    # Sizes near the limit: just within, just past, far past.
    room = LIMIT - len(body)
    body += b" " * max(0, draw(st.sampled_from([0, 0, 0, room, room + 1, 10 * LIMIT])))
    verb = _mostly(draw, "POST", "GET", "DELETE", "PUT")
    auth = _mostly(draw, "good", "bad", "none")
    return verb, auth, headers, body


async def test_nothing_a_client_sends_gets_a_5xx_or_a_traceback(gw):
    sid = await _initialize(gw)
    loop = asyncio.get_running_loop()

    async def send(verb, auth, headers, body):
        if auth == "good":
            headers.update(_auth(gw))
        elif auth == "bad":
            headers["Authorization"] = "Bearer llmgw-nope"
        headers.setdefault("accept", "application/json, text/event-stream")
        data = body if verb in ("POST", "PUT") else None
        # A stream (GET, subscriptions/listen) that opens is left at its first bytes.
        async with gw.http.request(verb, gw.url, headers=headers, data=data) as r:
            if r.headers.get("content-type", "").startswith("application/json"):
                json.loads(await r.read())
            return r.status

    # Hypothesis runs in a thread of its own; each example's request runs in the
    # gateway's loop, where the server and the client session live.
    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(req=_request(sid))
    def one(req):
        status = asyncio.run_coroutine_threadsafe(send(*req), loop).result(30)
        assert status < 500, (status, req)

    await asyncio.to_thread(one)
    assert gw.problems.seen == []
