"""The bounds Anthropic documents for a Messages request (``POST /v1/messages``, ``count_tokens``).

From Anthropic's API reference: ``max_tokens`` at least 1 (held by the
conversion, ``anthropic_request.py``); at most 100,000 ``messages`` in one
request; ``temperature`` and ``top_p`` from 0 to 1 and ``top_k`` not below 0;
an enabled ``thinking`` budget of at least 1,024 tokens and below
``max_tokens`` (a token count has no ``max_tokens``: only the floor holds
there). They are checked on the client's own body, before it becomes a chat
completion, so a refusal names the client's field.
"""

from __future__ import annotations

from gatewayd.gateway.protocol.errors import ApiError

MAX_MESSAGES = 100_000
MIN_THINKING_BUDGET = 1024
# field → (lowest, highest); None: no bound that way.
_NUMBERS = {"temperature": (0, 1), "top_p": (0, 1), "top_k": (0, None)}


def check_messages(request: dict, *, counting: bool = False) -> None:
    """ApiError(400) naming the first field of ``request`` past Anthropic's bound.

    Types are the conversion's to check; a value of another type is passed
    over here. ``counting``: the body of ``/v1/messages/count_tokens``.
    """
    messages = request.get("messages")
    if isinstance(messages, list) and len(messages) > MAX_MESSAGES:
        _fail(
            "messages",
            f"messages holds {len(messages):,} messages; a request may hold at most"
            f" {MAX_MESSAGES:,}",
        )
    for name, (low, high) in _NUMBERS.items():
        value = request.get(name)
        if not _is_number(value):
            continue
        if (low is not None and not value >= low) or (high is not None and not value <= high):
            span = f"from {low} to {high}" if high is not None else f"at least {low}"
            _fail(name, f"{name} must be {span}, not {value}")
    thinking = request.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not _is_number(budget):
            return
        if budget < MIN_THINKING_BUDGET:
            _fail(
                "thinking.budget_tokens",
                f"thinking.budget_tokens must be at least {MIN_THINKING_BUDGET:,}, not {budget}",
            )
        max_tokens = request.get("max_tokens")
        if not counting and _is_number(max_tokens) and budget >= max_tokens:
            _fail(
                "thinking.budget_tokens",
                f"thinking.budget_tokens must be below max_tokens ({max_tokens}), not {budget}:"
                " thinking counts toward max_tokens",
            )


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fail(param: str, message: str):
    raise ApiError(400, message, code="invalid_value", param=param)
