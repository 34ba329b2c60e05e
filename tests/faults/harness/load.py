"""A steady open-loop load of chat completions, streamed and not, through the official openai SDK.

Open loop: a request starts every ``1/rate`` seconds whether or not the ones
before it have been answered, as clients do; a stalled server does not slow
the load down, it piles it up. Each request's outcome is kept: when it
began and ended (wall clock), answered or not, and if not, its status and
the error's words.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

import openai
from openai import AsyncOpenAI

# Longer than the longest freeze the suite applies (30 s) plus a handover: a
# request held by a frozen control plane is answered late, not failed.
REQUEST_TIMEOUT_S = 90.0


@dataclass
class Outcome:
    began: float
    ended: float
    stream: bool
    answered: bool
    status: int = 200  # an HTTP status, or 0 where no answer came at all
    reason: str = ""


@dataclass
class OpenLoad:
    url: str  # the front's base URL (…/v1 is added)
    secret: str
    model: str
    rate: float = 20.0
    max_tokens: int = 6
    outcomes: list[Outcome] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        """Send until ``stop`` is set, then wait for every request begun to end."""
        client = AsyncOpenAI(
            base_url=self.url + "/v1",
            api_key=self.secret,
            max_retries=0,
            timeout=REQUEST_TIMEOUT_S,
        )
        tasks: set[asyncio.Task] = set()
        period = 1.0 / self.rate
        next_at = time.monotonic()
        n = 0
        try:
            while not stop.is_set():
                task = asyncio.create_task(self._one(client, stream=n % 2 == 1))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
                next_at += period
                delay = next_at - time.monotonic()
                if delay > 0:
                    try:
                        async with asyncio.timeout(delay):
                            await stop.wait()
                    except TimeoutError:
                        pass
            if tasks:
                await asyncio.gather(*tasks)
        finally:
            await client.close()

    async def _one(self, client: AsyncOpenAI, *, stream: bool) -> None:
        began = time.time()
        ask = {
            "model": self.model,
            "messages": [{"role": "user", "content": "how are you?"}],
            "max_tokens": self.max_tokens,
        }
        try:
            if stream:
                chunks = await client.chat.completions.create(
                    **ask, stream=True, stream_options={"include_usage": True}
                )
                usage = None
                async for chunk in chunks:
                    usage = chunk.usage or usage
                # The stream ran to its end ([DONE]) and said what it used.
                answered = usage is not None
                outcome = Outcome(began, time.time(), True, answered)
                if not answered:
                    outcome.status, outcome.reason = 200, "stream ended without its usage"
            else:
                reply = await client.chat.completions.create(**ask)
                outcome = Outcome(began, time.time(), False, bool(reply.choices))
        except openai.APIStatusError as e:
            outcome = Outcome(began, time.time(), stream, False, e.status_code, _words(e))
        except openai.APIError as e:
            outcome = Outcome(began, time.time(), stream, False, 0, _words(e))
        self.outcomes.append(outcome)


def _words(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    cause = e.__cause__
    if cause is not None and not isinstance(e, openai.APIStatusError):
        text += f" ({type(cause).__name__})"
    return text[:120]


def failures_by_reason(outcomes: list[Outcome]) -> Counter[str]:
    return Counter(f"{o.status or 'no answer'}: {o.reason}" for o in outcomes if not o.answered)
