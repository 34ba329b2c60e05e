"""``/v1/responses``: create a response, and read, list the input of, or delete a stored one.

A response is made by converting the request to a chat completion and
sending it through ``Gateway.complete`` — the same limits, budgets,
admission, retries and usage metering as ``/v1/chat/completions`` — with a
``Relay`` as its send. (Engines that serve ``/v1/responses`` themselves, vLLM's,
get the chat completion too: the gateway meters tokens from chat's usage,
and stored responses need the conversation in the gateway's own hands.)

llmgw keeps no text unless told twice: the key's project must keep responses
(``llmgw ctl project retention PATH 24h``) and the request must say
``store: true``. ``store`` is false by default. Only then do
``previous_response_id``, ``GET /v1/responses/{id}``, ``…/input_items`` and
``DELETE`` work; a project without retention gets a 400 naming the setting.
Another project's response is a 404, as if it did not exist.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl

from gatewayd.gateway.protocol import bounds, validate
from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.gateway.protocol.responses import request as requests
from gatewayd.gateway.protocol.responses.answer import Envelope, new_id
from gatewayd.gateway.protocol.responses.relay import Relay
from gatewayd.store.response_records import StoredResponse
from llmgw.errors import StoreError

log = logging.getLogger(__name__)

CHAT = "/v1/chat/completions"
PREFIX = "/v1/responses"
DEFAULT_LIST = 20


def retention_off(project: str, param: str) -> ApiError:
    return ApiError(
        400,
        f"stored responses are off for the project {project} (its retain_responses setting"
        f" is off), so {param} cannot be used; an admin turns them on with:"
        f" llmgw ctl project retention {project} 24h",
        code="retention_off",
        param=param,
    )


def _not_found(response_id: str) -> ApiError:
    return ApiError(
        404, f"no response {response_id!r} is stored for this project", code="not_found"
    )


def input_record(items: list[dict]) -> list[dict]:
    """The input items as kept and listed: each with an id, messages' text as parts."""
    kept = []
    for item in items:
        item = dict(item)
        kind = item.setdefault("type", "message")
        if kind == "message":
            if isinstance(item.get("content"), str):
                part = "output_text" if item.get("role") == "assistant" else "input_text"
                item["content"] = [{"type": part, "text": item["content"]}]
            item.setdefault("status", "completed")
        prefix = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}
        item.setdefault("id", new_id(prefix.get(kind, "item")))
        kept.append(item)
    return kept


class Responses:
    """The route handler; ``gateway`` forwards, ``store`` keeps what retention allows."""

    def __init__(self, gateway, store):
        self._gateway = gateway
        self._store = store

    async def __call__(self, call) -> None:
        rest = call.path[len(PREFIX) :].strip("/")
        method = call.method
        if not rest:
            if method != "POST":
                raise ApiError(405, f"{PREFIX} takes POST", code="method_not_allowed")
            await self.create(call)
            return
        response_id, _, tail = rest.partition("/")
        if tail == "input_items" and method == "GET":
            await self.input_items(call, response_id)
        elif not tail and method == "GET":
            stored = await self._stored(call, response_id, "GET /v1/responses/{id}")
            await call.json(200, stored.response)
        elif not tail and method == "DELETE":
            await self._retention(call, "DELETE /v1/responses/{id}")
            if not await self._store.delete_response(call.key.project_id, response_id):
                raise _not_found(response_id)
            await call.json(200, {"id": response_id, "object": "response", "deleted": True})
        else:
            raise ApiError(404, f"no route for {method} {call.path}", code="unknown_route")

    # ---- create ------------------------------------------------------------

    async def create(self, call) -> None:
        request = validate.parse(await call.body())
        requests.check(request)
        bounds.check(PREFIX, request)
        store = request.get("store") is True
        previous = request.get("previous_response_id")
        retain_s = 0
        if store:
            retain_s = await self._retention(call, "store")
        history: list[dict] = []
        if previous:
            await self._retention(call, "previous_response_id")
            before = await self._stored(call, previous, "previous_response_id")
            history = before.history + before.input_items + before.response.get("output", [])
        chat = requests.to_chat(request, history)
        validate.check(CHAT, chat)
        envelope = Envelope(request, store=store)
        on_done = None
        if store:
            kept_input = input_record(requests.input_items(request.get("input")))

            async def on_done(response: dict) -> None:
                if response.get("status") not in ("completed", "incomplete"):
                    return
                await self._keep(call, envelope, response, kept_input, history, retain_s)

        relay = Relay(call, envelope, on_done)
        body = json.dumps(chat).encode()
        try:
            await self._gateway.complete(call, CHAT, body, chat, send=relay.send)
        except Exception as e:
            if isinstance(e, ApiError) or not relay.streaming:
                raise
            # The engine broke off a stream already begun: end it as OpenAI does.
            log.warning("a response stream broke off: %s", e)
            call.req.status = 502  # accounted as failed, not answered
            await relay.broke_off("the engine broke off its answer; try again")

    async def _keep(self, call, envelope, response, kept_input, history, retain_s) -> None:
        now = datetime.now(UTC)
        try:
            await self._store.put_response(
                StoredResponse(
                    id=envelope.id,
                    project_id=call.key.project_id,
                    project=call.key.project,
                    key_id=call.key.key_id,
                    created_at=now,
                    expires_at=now + timedelta(seconds=retain_s),
                    response=response,
                    input_items=kept_input,
                    history=history,
                )
            )
        except StoreError as e:  # the answer still reaches the client; it is only not kept
            log.warning("response %s was not stored: %s", envelope.id, e)

    # ---- stored ------------------------------------------------------------

    async def _retention(self, call, param: str) -> int:
        retain_s = await self._store.retention_of(call.key.project_id)
        if retain_s <= 0:
            raise retention_off(call.key.project, param)
        return retain_s

    async def _stored(self, call, response_id: str, param: str) -> StoredResponse:
        await self._retention(call, param)
        stored = await self._store.get_response(call.key.project_id, response_id, datetime.now(UTC))
        if stored is None:
            raise _not_found(response_id)
        return stored

    async def input_items(self, call, response_id: str) -> None:
        stored = await self._stored(call, response_id, "GET /v1/responses/{id}/input_items")
        query = _query(call.scope)
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise ApiError(400, "'order' must be asc or desc", code="invalid_value", param="order")
        try:
            limit = int(query.get("limit", DEFAULT_LIST))
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            raise ApiError(
                400, "'limit' must be from 1 to 100", code="invalid_value", param="limit"
            )
        items = list(stored.input_items)
        if order == "desc":
            items.reverse()
        after = query.get("after")
        if after:
            ids = [i.get("id") for i in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        page = items[:limit]
        await call.json(
            200,
            {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": len(items) > limit,
            },
        )


def _query(scope) -> dict[str, str]:
    raw = scope.get("query_string", b"").decode("latin-1")
    return dict(parse_qsl(raw))
