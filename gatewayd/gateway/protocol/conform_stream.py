"""A stream's chunks put in OpenAI's shape at the cost of a byte replace, once the engine is learnt.

Parsing and writing again every chunk of every stream cost the gateway half
again its CPU per streamed request (measured: 0.92 → 1.37 CPU-s per 1,000
streams of the sim). But an engine writes its token chunks all alike: when
conforming one of them changed nothing but the model's name (and dropped a
``"usage": null``), the next ones need only those bytes swapped. So the first
token chunks are parsed and conformed (``conform.chunk``), and the result
compared with the engine's own; if they agree but for those two, later
chunks of the same make are fixed in their bytes. Anything else — a chunk
with usage, a finish reason, tool calls, logprobs, an error, a role, or bytes
not as learnt — takes the parsed path. What is learnt of an engine (a
``Make``) is kept by the forwarder per replica, so later streams from it
parse only their first token, finish and usage chunks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

# Token chunks parsed before giving up on learning the engine's make.
LEARN_TRIES = 4
# What only a chunk that is not a plain token chunk holds.
_SLOW = (
    b'"usage":{',
    b'"usage": {',
    b'"timings"',
    b'"error"',
    b'"tool_calls"',
    b'"function_call"',
    b'"role"',
    b'"refusal"',
    b'"logprobs":{',
    b'"logprobs": {',
    b'"reasoning',
    b'"finish_reason":"',
    b'"finish_reason": "',
)
# One scan for all of them (a loop of `in` tests took five times as long).
_SLOW_RE = re.compile(b"|".join(re.escape(marker) for marker in _SLOW))
_NULL_FINISH = (b'"finish_reason":null', b'"finish_reason": null')
_NULL_USAGE = (b',"usage":null', b', "usage": null', b'"usage":null,', b'"usage": null, ')


@dataclass
class Make:
    """How one engine writes its token chunks, once learnt (``served`` set)."""

    # The engine's `"model": "…"` bytes, and the client's name written the same way.
    served: bytes | None = None
    asked: bytes = b""
    # Its `"usage": null` bytes (b"" when it writes none) and its null finish reason.
    usage: bytes = b""
    finish: bytes = b""
    tries: int = LEARN_TRIES


class StreamConformer:
    """Conforms one stream's chunks for the client asking for ``model``.

    ``make``: what is known of the engine's chunks, shared by its streams.
    """

    def __init__(
        self, fix: Callable[[dict, str], dict], model: str, make: Make | None = None
    ) -> None:
        self._fix = fix
        self._model = model
        self._make = make if make is not None else Make()

    def fast(self, frame: bytes) -> bytes | None:
        """The frame fixed in its bytes, or None when it must be parsed."""
        make = self._make
        served = make.served
        if served is None or frame.count(served) != 1 or make.finish not in frame:
            return None
        if _SLOW_RE.search(frame) is not None:
            return None
        if make.usage:
            if frame.count(make.usage) != 1:
                return None
            frame = frame.replace(make.usage, b"")
        elif b'"usage"' in frame:
            return None
        return frame.replace(served, make.asked) if served != make.asked else frame

    def slow(self, frame: bytes, chunk: dict) -> bytes:
        """The parsed chunk conformed and written again; learns the engine's make from it."""
        original = self._original(frame, chunk)
        fixed = self._fix(chunk, self._model)
        if original is not None:
            self._learn(frame, original, fixed)
        return b"data: " + json.dumps(fixed).encode()

    def _original(self, frame: bytes, chunk: dict) -> dict | None:
        # Only plain token chunks teach anything; a copy of the chunk before
        # it is conformed (it is conformed in place).
        make = self._make
        if make.served is not None or make.tries <= 0 or not chunk.get("choices"):
            return None
        if _SLOW_RE.search(frame) is not None:
            return None
        make.tries -= 1
        return json.loads(json.dumps(chunk))

    def _learn(self, frame: bytes, original: dict, fixed: dict) -> None:
        served = original.get("model")
        if not isinstance(served, str):
            return
        expected = {**original, "model": self._model}
        usage: bytes = b""
        if "usage" in expected:
            if expected.pop("usage") is not None:
                return
            usage = next((u for u in _NULL_USAGE if frame.count(u) == 1), b"")
            if not usage:
                return
        if expected != fixed:
            return  # conforming changed more than the name: every chunk is parsed
        finish = next((f for f in _NULL_FINISH if f in frame), b"")
        for spaced in (b'"model":', b'"model": '):
            candidate = spaced + json.dumps(served).encode()
            if frame.count(candidate) == 1 and finish:
                make = self._make
                make.usage, make.finish = usage, finish
                make.asked = spaced + json.dumps(self._model).encode()
                make.served = candidate
                return
