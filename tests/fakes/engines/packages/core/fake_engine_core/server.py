"""The OpenAI-compatible server behind the vLLM and SGLang stand-ins: stdlib only.

It runs inside the environment uv built for the stand-in, which holds this
package and the stand-in and nothing else, so it needs nothing but the
standard library. It answers as the real engines do where llmgw looks:

    GET  /health                 200 once loaded (vLLM's and SGLang's both)
    GET  /v1/models              the served model name, with its max_model_len
    POST /v1/chat/completions    an answer, or server-sent events with "stream"
    POST /v1/completions         the same for a prompt
    GET  /metrics                Prometheus text under the engine's own names

``/v1/*`` wants ``Authorization: Bearer <key>`` when the engine has a key,
and says 401 {"error": "Unauthorized"} otherwise, as vLLM does.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fake_engine_core import gpu

# Each answer is these words, as many as were asked for (16 by default).
WORDS = [
    "the",
    "stand-in",
    "engine",
    "answers",
    "with",
    "these",
    "words",
    "one",
    "token",
    "at",
    "a",
    "time",
]
DEFAULT_MAX_TOKENS = 16
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass
class Settings:
    """What the stand-in was started with, as its engine's flags said it."""

    engine: str  # "vllm" or "sglang": the metric names and owned_by
    model_path: str
    served_name: str
    host: str
    port: int
    api_key: str = field(default="", repr=False)
    max_model_len: int = 4096
    max_running: int = 256
    gpu_fraction: float = 0.9
    version: str = ""


@dataclass
class Stats:
    running: int = 0
    waiting: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    ttft_s: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def serve(settings: Settings) -> None:
    """Load (claim the cards), then answer until SIGTERM or SIGINT."""
    print(
        f"INFO {settings.engine} {settings.version} (llmgw stand-in) loading "
        f"{settings.model_path} as {settings.served_name}",
        flush=True,
    )
    procs_file = gpu.claim_cards(settings.gpu_fraction)
    stats = Stats()
    handler = _handler(settings, stats)
    server = ThreadingHTTPServer((settings.host, settings.port), handler)
    server.daemon_threads = True

    def stop(_signum, _frame) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"INFO Uvicorn running on http://{settings.host}:{settings.port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        gpu.release_cards(procs_file)
        print("INFO Shutting down", flush=True)
    sys.exit(0)


def _handler(settings: Settings, stats: Stats) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, format: str, *args) -> None:
            print(f'INFO {self.address_string()} - "{self.requestline}" {args[1]}', flush=True)

        # -- routes ------------------------------------------------------

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/health_generate"):
                self._send(200, b"", "text/plain")
            elif path == "/metrics":
                self._send(200, metrics_text(settings, stats).encode(), "text/plain; version=0.0.4")
            elif path == "/v1/models":
                if self._authorized():
                    self._json(200, models_body(settings))
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if path not in ("/v1/chat/completions", "/v1/completions"):
                self._json(404, {"detail": "Not Found"})
                return
            if not self._authorized():
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._json(400, error("the request body is not JSON"))
                return
            if body.get("model") not in (settings.served_name, None):
                self._json(
                    404, error(f"The model `{body.get('model')}` does not exist.", "NotFoundError")
                )
                return
            chat = path == "/v1/chat/completions"
            if body.get("stream"):
                self._stream(body, chat)
            else:
                self._json(200, answer(settings, stats, body, chat))

        # -- helpers -----------------------------------------------------

        def _authorized(self) -> bool:
            if not settings.api_key:
                return True
            if self.headers.get("authorization", "") == f"Bearer {settings.api_key}":
                return True
            self._json(401, {"error": "Unauthorized"})
            return False

        def _send(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json(self, status: int, obj: dict) -> None:
            self._send(status, json.dumps(obj).encode(), "application/json")

        def _stream(self, body: dict, chat: bool) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("cache-control", "no-cache")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for event in stream_events(settings, stats, body, chat):
                data = f"data: {event}\n\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def error(message: str, kind: str = "BadRequestError") -> dict:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": 400}


def models_body(settings: Settings) -> dict:
    return {
        "object": "list",
        "data": [
            {
                "id": settings.served_name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": settings.engine,
                "root": settings.model_path,
                "parent": None,
                "max_model_len": settings.max_model_len,
            }
        ],
    }


def _prompt_tokens(body: dict, chat: bool) -> int:
    if chat:
        text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    else:
        text = str(body.get("prompt", ""))
    return max(1, len(text.split()))


def _words(body: dict) -> list[str]:
    n = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
    return [WORDS[i % len(WORDS)] for i in range(max(1, int(n)))]


def _begin(stats: Stats) -> float:
    with stats.lock:
        stats.running += 1
    return time.monotonic()


def _end(stats: Stats, started: float, prompt: int, generated: int) -> None:
    with stats.lock:
        stats.running -= 1
        stats.finished += 1
        stats.prompt_tokens += prompt
        stats.generation_tokens += generated
        stats.ttft_s.append(time.monotonic() - started)


def answer(settings: Settings, stats: Stats, body: dict, chat: bool) -> dict:
    started = _begin(stats)
    words = _words(body)
    prompt = _prompt_tokens(body, chat)
    _end(stats, started, prompt, len(words))
    text = " ".join(words)
    usage = {
        "prompt_tokens": prompt,
        "completion_tokens": len(words),
        "total_tokens": prompt + len(words),
    }
    base = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "created": int(time.time()),
        "model": settings.served_name,
        "usage": usage,
    }
    finish = "length"
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None,
            "finish_reason": finish,
        }
        return {**base, "object": "chat.completion", "choices": [choice]}
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {**base, "object": "text_completion", "choices": [choice]}


def stream_events(settings: Settings, stats: Stats, body: dict, chat: bool):
    """The JSON of each server-sent event, then "[DONE]"."""
    started = _begin(stats)
    words = _words(body)
    prompt = _prompt_tokens(body, chat)
    ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    created = int(time.time())
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(delta_text: str | None, finish: str | None, *, role: bool = False) -> str:
        if chat:
            delta = {"role": "assistant", "content": ""} if role else {"content": delta_text}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {
                "index": 0,
                "text": delta_text or "",
                "logprobs": None,
                "finish_reason": finish,
            }
        return json.dumps(
            {
                "id": ident,
                "object": kind,
                "created": created,
                "model": settings.served_name,
                "choices": [choice],
            }
        )

    try:
        if chat:
            yield chunk(None, None, role=True)
        for i, word in enumerate(words):
            last = i == len(words) - 1
            yield chunk(word if i == 0 else f" {word}", "length" if last else None)
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": len(words),
                "total_tokens": prompt + len(words),
            }
            yield json.dumps(
                {
                    "id": ident,
                    "object": kind,
                    "created": created,
                    "model": settings.served_name,
                    "choices": [],
                    "usage": usage,
                }
            )
        yield "[DONE]"
    finally:
        _end(stats, started, prompt, len(words))


def metrics_text(settings: Settings, stats: Stats) -> str:
    """The engine's /metrics: vLLM's names for vLLM, SGLang's for SGLang."""
    with stats.lock:
        running, waiting = stats.running, stats.waiting
        prompt, generated, finished = stats.prompt_tokens, stats.generation_tokens, stats.finished
        ttft = list(stats.ttft_s)
    label = f'model_name="{settings.served_name}"'
    kv = min(1.0, running / max(1, settings.max_running))
    if settings.engine == "sglang":
        gauges = [
            ("sglang:num_running_reqs", "The number of running requests.", running),
            ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", waiting),
            ("sglang:token_usage", "The token usage.", kv),
            ("sglang:gen_throughput", "The generation throughput (token/s).", 0.0),
        ]
        counters = [
            ("sglang:prompt_tokens", "Number of prefill tokens processed.", prompt),
            ("sglang:generation_tokens", "Number of generation tokens processed.", generated),
            ("sglang:num_requests", "The number of processed requests.", finished),
        ]
        histogram = "sglang:time_to_first_token_seconds"
    else:
        gauges = [
            (
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                running,
            ),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv),
            ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", kv),
        ]
        counters = [
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", prompt),
            ("vllm:generation_tokens", "Number of generation tokens processed.", generated),
            ("vllm:request_success", "Count of successfully processed requests.", finished),
        ]
        histogram = "vllm:time_to_first_token_seconds"
    lines: list[str] = []
    for name, help_text, value in gauges:
        lines += [
            f"# HELP {name} {help_text}",
            f"# TYPE {name} gauge",
            f"{name}{{{label}}} {value}",
        ]
    for name, help_text, value in counters:
        lines += [
            f"# HELP {name}_total {help_text}",
            f"# TYPE {name}_total counter",
            f"{name}_total{{{label}}} {float(value)}",
        ]
    lines += [
        f"# HELP {histogram} Histogram of time to first token in seconds.",
        f"# TYPE {histogram} histogram",
    ]
    for bound in TTFT_BUCKETS_S:
        count = sum(1 for t in ttft if t <= bound)
        lines.append(f'{histogram}_bucket{{{label},le="{bound}"}} {float(count)}')
    lines.append(f'{histogram}_bucket{{{label},le="+Inf"}} {float(len(ttft))}')
    lines.append(f"{histogram}_count{{{label}}} {float(len(ttft))}")
    lines.append(f"{histogram}_sum{{{label}}} {sum(ttft)}")
    return "\n".join(lines) + "\n"
