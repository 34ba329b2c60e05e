"""``/v1/batches``: create, list, show and cancel a project's batches (OpenAI's Batch API).

Answered on every control plane from the store; the leader's runner takes up
a batch made or cancelled on any of them within a second.
"""

from __future__ import annotations

import json

from gatewayd.batches.book import BatchBook, BatchRefused
from gatewayd.batches.files_api import int_param, query, store_away
from gatewayd.batches.objects import batch_object
from gatewayd.gateway.protocol.errors import ApiError
from llmgw.errors import StoreError

# A create request is a few hundred bytes; nothing bigger is read.
MAX_CREATE_BYTES = 64 * 1024


def _api_error(e: BatchRefused) -> ApiError:
    return ApiError(e.status, e.message, param=e.param, code=e.code or None)


class BatchesApi:
    def __init__(self, book: BatchBook) -> None:
        self._book = book

    async def handle(self, call) -> None:
        parts = call.path.removeprefix("/v1/batches").strip("/").split("/")
        method, project_id = call.method, call.key.project_id
        try:
            if parts == [""] and method == "POST":
                body = await call.body(MAX_CREATE_BYTES)
                try:
                    request = json.loads(body)
                except ValueError:
                    raise ApiError(400, "the body is not JSON", code="invalid_json") from None
                rec = await self._book.create(project_id, call.key.key_id, request)
                return await call.json(200, batch_object(rec))
            if parts == [""] and method == "GET":
                return await self._list(call)
            if len(parts) == 1 and method == "GET":
                rec = await self._book.get(parts[0], project_id)
                if rec is None:
                    raise BatchRefused(404, f"no batch {parts[0]!r}", code="batch_not_found")
                return await call.json(200, batch_object(rec))
            if len(parts) == 2 and parts[1] == "cancel" and method == "POST":
                rec = await self._book.cancel(parts[0], project_id)
                return await call.json(200, batch_object(rec))
        except BatchRefused as e:
            raise _api_error(e) from None
        except StoreError as e:
            raise store_away(e) from None
        raise ApiError(404, f"no route for {method} {call.path}", code="unknown_route")

    async def _list(self, call) -> None:
        q = query(call)
        limit = int_param(q, "limit", 20, 1, 100)
        recs = await self._book.list(call.key.project_id, after=q.get("after", ""), limit=limit + 1)
        data = [batch_object(r) for r in recs[:limit]]
        page = {"object": "list", "data": data, "has_more": len(recs) > limit}
        if data:
            page |= {"first_id": data[0]["id"], "last_id": data[-1]["id"]}
        await call.json(200, page)
