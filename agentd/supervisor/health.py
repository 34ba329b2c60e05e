"""Whether an engine answers: the one test of a replica being ready.

A process that runs is not a replica that serves: llama.cpp and vLLM take
seconds to minutes loading weights before they answer. Ready means the
health endpoint returned 200; until then the shard is "starting".
"""

from __future__ import annotations

import asyncio

import httpx

# One probe's limit: a loaded engine answers /health in milliseconds, and a
# busy one within this.
PROBE_TIMEOUT_S = 2.0
BACKOFF_INITIAL_S = 0.2
BACKOFF_MAX_S = 2.0


def _client() -> httpx.AsyncClient:
    # trust_env=False: an HTTP(S)_PROXY in the agent's environment must not
    # send a probe of 127.0.0.1 through a proxy.
    return httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, trust_env=False)


async def _probe(client: httpx.AsyncClient, url: str) -> str | None:
    """None when ``url`` answers 200; otherwise what happened, in a few words."""
    try:
        response = await client.get(url)
    except httpx.ConnectError:
        return "nothing listens there yet"
    except httpx.TimeoutException:
        return f"no answer within {PROBE_TIMEOUT_S:g} s"
    except httpx.HTTPError as e:
        return f"the request failed: {e.__class__.__name__}"
    if response.status_code == 200:
        return None
    return f"it answered {response.status_code}"


async def probe_once(url: str) -> str | None:
    """One probe: None when healthy, else why not."""
    async with _client() as client:
        return await _probe(client, url)


async def wait_healthy(
    url: str,
    deadline_s: float,
    *,
    initial_s: float = BACKOFF_INITIAL_S,
    max_s: float = BACKOFF_MAX_S,
) -> str | None:
    """Probe ``url`` with backoff until it answers 200 or ``deadline_s`` passes.

    None when it answered; otherwise the last reason it did not.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    delay_s = initial_s
    async with _client() as client:
        while True:
            why = await _probe(client, url)
            if why is None:
                return None
            left_s = deadline - loop.time()
            if left_s <= 0:
                return why
            await asyncio.sleep(min(delay_s, left_s))
            delay_s = min(delay_s * 1.5, max_s)
