"""``POST /v1/messages/count_tokens``: what a Messages request's prompt costs, by the engine's tokenizer.

Anthropic's API answers ``{"input_tokens": N}``. The request is turned into
the chat request ``/v1/messages`` would send (the same conversion), and a
replica of the model counts it with the tokenizer and chat template it
serves with, so the count is the prompt_tokens its answer would report:

- llama.cpp's server: ``POST /apply-template`` renders the messages (and
  tools) with the model's template, ``POST /tokenize`` with ``add_special``
  counts the text as its completions do (BOS included). Two calls, but the
  count is exact where joining the texts would miss every template marker.
- vLLM, SGLang and the sim: ``POST /tokenize`` with the chat ``messages``
  (vLLM's TokenizeChatRequest), answered with ``count``.

Nothing is generated and no usage is metered: Anthropic's API does not bill it.
It is limited as every call is: the key's check, then its requests a minute
(one request, no tokens: a count spends none of the model's), so a client
cannot keep a replica's tokenizer busy past its key's rate.
"""

from __future__ import annotations

import json
import logging

import aiohttp

from gatewayd.gateway.protocol import bounds, messages
from gatewayd.gateway.protocol.anthropic_request import AnthropicRequestError
from gatewayd.gateway.protocol.errors import ApiError, engine_error
from gatewayd.gateway.routing.router import Router, Target

log = logging.getLogger(__name__)

PATH = "/v1/messages/count_tokens"
# Engines whose /tokenize takes chat messages (vLLM's shape).
CHAT_TOKENIZE = frozenset(("vllm", "sglang", "sim"))


class TokenCounter:
    """The route's handler: ``gateway.add_route(PATH, TokenCounter(...))``.

    ``post(target, path, payload)`` sends one JSON request to a target
    (``Forwarder.post``) and answers (status, body);
    ``known(model)`` says whether the catalog has the model;
    ``admit(key)`` takes one request from the key's rate limits and answers the
    ticket to settle (ApiError 429 when spent), as every forwarded call does.
    """

    def __init__(self, router: Router, post, known, admit=None) -> None:
        self._router = router
        self._post = post
        self._known = known
        self._admit = admit

    async def __call__(self, call) -> None:
        if call.method != "POST":
            raise ApiError(405, f"{PATH} takes POST", code="method_not_allowed")
        body = await call.body()
        try:
            request = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "the body is not valid JSON", code="invalid_json") from None
        if not isinstance(request, dict):
            raise ApiError(400, "the body must be a JSON object", code="invalid_json")
        # count_tokens takes no max_tokens; the conversion wants one.
        request.setdefault("max_tokens", 1)
        try:
            _, chat = messages.to_chat(json.dumps(request).encode())
        except AnthropicRequestError as e:
            raise ApiError(400, str(e), code="invalid_request", param=e.field) from None
        bounds.check_messages(request, counting=True)
        model = call.req.model = chat["model"]
        if not self._known(model):
            raise ApiError(404, f"the model {model!r} does not exist", code="model_not_found")
        if not call.key.allows(model):
            raise ApiError(
                403, f"this API key may not use the model {model!r}", code="model_not_allowed"
            )
        ticket = self._admit(call.key) if self._admit is not None else None
        try:
            count = await self.count(model, chat)
        finally:
            if ticket is not None:
                ticket.settle(0)  # no model tokens were spent
        await call.json(200, {"input_tokens": count})

    async def count(self, model: str, chat: dict) -> int:
        """The tokens of the chat request's prompt, by the first replica that answers."""
        targets = self._router.candidates(model, "", "chat")
        if not targets:
            raise ApiError(503, f"no replica of {model!r} is ready yet", code="no_replica_ready")
        why = ""
        for target in targets:
            try:
                return await self._count_on(target, chat)
            except ApiError as e:
                if e.status < 500:
                    raise
                why = e.message
            except (OSError, aiohttp.ClientError, TimeoutError) as e:
                why = f"{target.replica_id}: {e.__class__.__name__}"
                log.warning("%s could not count tokens (%r); trying the next", target.replica_id, e)
        raise ApiError(
            502, f"no replica of {model!r} could count the tokens ({why})", code="upstream_error"
        )

    async def _count_on(self, target: Target, chat: dict) -> int:
        conversation = {"messages": chat["messages"]}
        if chat.get("tools"):
            conversation["tools"] = chat["tools"]
        if target.external:
            raise ApiError(
                400,
                f"{chat['model']!r} is answered by an outside provider: its tokens are not"
                " counted here",
                code="not_supported",
            )
        if target.engine in CHAT_TOKENIZE:
            answer = await self._call(
                target,
                "/tokenize",
                {"model": chat["model"], **conversation, "add_generation_prompt": True},
            )
            count = answer.get("count")
            if type(count) is not int:
                count = len(answer.get("tokens") or ())
            return count
        rendered = await self._call(target, "/apply-template", conversation)
        prompt = rendered.get("prompt")
        if not isinstance(prompt, str):
            raise ApiError(502, f"{target.replica_id} rendered no prompt", code="upstream_error")
        answer = await self._call(target, "/tokenize", {"content": prompt, "add_special": True})
        tokens = answer.get("tokens")
        if not isinstance(tokens, list):
            raise ApiError(502, f"{target.replica_id} counted no tokens", code="upstream_error")
        return len(tokens)

    async def _call(self, target: Target, path: str, payload: dict) -> dict:
        status, data = await self._post(target, path, payload)
        if status != 200:
            raise engine_error(status, data, model=payload.get("model") or target.replica_id)
        try:
            answer = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            answer = None
        if not isinstance(answer, dict):
            raise ApiError(
                502, f"{target.replica_id} answered {path} with no JSON", code="upstream_error"
            )
        return answer
