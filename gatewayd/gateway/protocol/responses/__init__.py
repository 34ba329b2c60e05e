"""OpenAI's Responses API (``/v1/responses``) over chat completions, and stored responses."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from gatewayd.gateway.protocol.responses.handler import PREFIX, Responses
from llmgw.errors import StoreError

log = logging.getLogger(__name__)

# How often responses past their project's retention are forgotten.
EXPIRE_EVERY_S = 60.0


def mount(server) -> None:
    """Serve ``/v1/responses`` on ``server.gateway``; forget expired responses in the background."""
    server.gateway.add_route(PREFIX, Responses(server.gateway, server.store))
    server._tasks.append(asyncio.create_task(_expire_loop(server.store), name="responses-expiry"))


async def _expire_loop(store, every_s: float = EXPIRE_EVERY_S) -> None:
    while True:
        try:
            n = await store.expire_responses(datetime.now(UTC))
            if n:
                log.info("forgot %d stored responses past their retention", n)
        except StoreError as e:  # the store may be away a while; the next round tries again
            log.warning("expired responses were not forgotten: %s", e)
        await asyncio.sleep(every_s)
