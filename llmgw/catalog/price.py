"""What a model charges: micro-units of money per 1,000 tokens."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, NonNegativeInt


class Price(BaseModel):
    """What a model charges, in micro-units per 1,000 tokens.

    ``cached_per_1k`` is for the prompt tokens the answer counts as
    ``cached_tokens`` (read from a prefix cache rather than computed). Left
    out — or 0, as configurations written before there was a cached rate
    say it — they cost what any prompt token does.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_per_1k: NonNegativeInt = 0
    completion_per_1k: NonNegativeInt = 0
    cached_per_1k: NonNegativeInt | None = None
