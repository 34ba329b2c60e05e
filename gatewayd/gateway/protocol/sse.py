"""An engine's event stream read as it is relayed: its usage, and when its first token came.

The gateway counts every streamed answer's tokens. It asks the engine for
``stream_options.include_usage`` even when the client did not; ``UsageTap``
then takes the usage-only chunk at the end out of what the client gets, so
the client sees the stream it asked for. Without ``fix``, frames pass
through as the engine wrote them: only frames that mention usage are parsed,
and only until the first token those that might carry it. With ``fix`` (a
``conform`` function), every chunk is parsed, put in OpenAI's shape under the
client's model name, and written again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Protocol

from gatewayd.gateway.protocol.conform_stream import Make, StreamConformer


class _Counts(Protocol):
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ttft_s: float | None


def usage_into(outcome: _Counts, usage: dict | None) -> None:
    """OpenAI's ``usage`` object into the outcome's token counts (what is missing counts 0)."""
    if not isinstance(usage, dict):
        return
    try:
        outcome.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        outcome.completion_tokens = int(usage.get("completion_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        outcome.cached_tokens = int(details.get("cached_tokens") or 0)
    except (ValueError, TypeError, AttributeError):
        pass


def error_chunk(chunk: dict) -> dict:
    """An engine's error event in OpenAI's error shape (``code`` a string or null)."""
    error = chunk.get("error")
    if not isinstance(error, dict):
        error = {"message": str(error)}
    message = error.get("message")
    code = error.get("code")
    return {
        "error": {
            "message": message if isinstance(message, str) else "the engine failed mid-answer",
            "type": "server_error",
            "param": None,
            "code": code if isinstance(code, str) else "upstream_error",
        }
    }


def has_token(chunk: dict) -> bool:
    """Whether a chunk carries part of the answer (not only the role of what follows)."""
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and (
            delta.get("content")
            or delta.get("reasoning_content")
            or delta.get("reasoning")
            or delta.get("tool_calls")
        ):
            return True
        if choice.get("text") or choice.get("finish_reason"):
            return True
    return False


def frame_json(frame: bytes) -> dict | None:
    """The JSON object of one event's ``data:`` lines; None for ``[DONE]`` or anything else."""
    data = [line[5:].strip() for line in frame.splitlines() if line.startswith(b"data:")]
    if not data:
        return None
    payload = b"\n".join(data)
    if payload == b"[DONE]":
        return None
    try:
        chunk = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return chunk if isinstance(chunk, dict) else None


def _null_usage_only(frame: bytes) -> bool:
    # Engines asked for usage send "usage": null on every chunk but the last.
    n = frame.count(b'"usage"')
    return n == frame.count(b'"usage": null') + frame.count(b'"usage":null')


class UsageTap:
    """Fed the stream's bytes as they come; answers the bytes to relay now.

    ``drop_usage``: the client did not ask for usage, so the usage-only
    chunk is not relayed. ``sent_at`` (``time.perf_counter()``) is when the
    request went out; the outcome's ``ttft_s`` is set at the first token.
    """

    def __init__(
        self,
        outcome: _Counts,
        *,
        drop_usage: bool,
        sent_at: float,
        fix: Callable[[dict, str], dict] | None = None,
        model: str = "",
        make: Make | None = None,
    ) -> None:
        self._outcome = outcome
        self._fix = StreamConformer(fix, model, make) if fix is not None else None
        self._drop_usage = drop_usage
        self._sent_at = sent_at
        self._buf = b""
        self._sep: bytes | None = None
        self._first_token = False

    def feed(self, piece: bytes) -> bytes:
        buf = self._buf + piece if self._buf else piece
        sep = self._sep
        if sep is None:
            # Engines end events with a blank line; a few write it CRLF.
            if b"\n" not in buf:
                self._buf = buf
                return b""
            sep = self._sep = b"\r\n\r\n" if b"\r\n" in buf else b"\n\n"
        cut = buf.rfind(sep)
        if cut < 0:
            self._buf = buf
            return b""
        cut += len(sep)
        done, self._buf = buf[:cut], buf[cut:]
        # After the first token only a real usage object matters; engines asked
        # for usage write "usage": null in every chunk, so look at them all at
        # once (if the whole holds only nulls, each frame does).
        if self._fix is None and self._first_token and _null_usage_only(done):
            return done
        return self._frames(done, sep)

    def flush(self) -> bytes:
        """What is left at the end of the stream (an event without its blank line)."""
        rest, self._buf = self._buf, b""
        if not rest.strip():
            return rest
        if self._fix is not None:
            out = self._fixed(rest)
            return out if out is not None else b""
        return rest if self._keep(rest) else b""

    def _frames(self, done: bytes, sep: bytes) -> bytes:
        if self._fix is not None:
            out = []
            for frame in done.split(sep)[:-1]:
                fixed = self._fixed(frame)
                if fixed is not None:
                    out.append(fixed + sep)
            return b"".join(out)
        kept, dropped = [], False
        for frame in done.split(sep)[:-1]:
            if self._keep(frame):
                kept.append(frame)
            else:
                dropped = True
        if not dropped:
            return done
        return b"".join(f + sep for f in kept)

    def _fixed(self, frame: bytes) -> bytes | None:
        """The frame in OpenAI's shape, or None when it is not relayed."""
        if self._first_token:
            # A plain token chunk like those before it: no usage, nothing to count.
            fast = self._fix.fast(frame)
            if fast is not None:
                return fast
        chunk = frame_json(frame)
        if chunk is None:
            return frame
        if "error" in chunk and "choices" not in chunk:
            # An engine failing mid-stream says so in a chunk of its own (llama.cpp does).
            return b"data: " + json.dumps(error_chunk(chunk)).encode()
        if not self._seen(chunk):
            return None
        if self._drop_usage and chunk.get("usage") is not None:
            chunk.pop("usage")
        return self._fix.slow(frame, chunk)

    def _keep(self, frame: bytes) -> bool:
        if self._first_token and (b'"usage"' not in frame or _null_usage_only(frame)):
            return True
        chunk = frame_json(frame)
        if chunk is None:
            return True
        return self._seen(chunk)

    def _seen(self, chunk: dict) -> bool:
        """Counts what the chunk carries; False if it is not relayed (usage nobody asked for)."""
        if not self._first_token and has_token(chunk):
            self._first_token = True
            self._outcome.ttft_s = time.perf_counter() - self._sent_at
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            usage_into(self._outcome, usage)
            if self._drop_usage and not chunk.get("choices"):
                return False
        return True
