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


def format_micros(micros: int) -> str:
    """Micro-units as an amount for people: 5000000 → "5.00", 1234567 → "1.234567"."""
    whole, frac = divmod(micros, 1_000_000)
    digits = f"{frac:06d}".rstrip("0").ljust(2, "0")
    return f"{whole:,}.{digits}"


_WIRE = {
    "prompt_per_1k": "prompt_per_thousand",
    "completion_per_1k": "completion_per_thousand",
    "cached_per_1k": "cached_per_thousand",
}


def spec_to_wire(spec: dict) -> dict:
    """A model spec dict with its price named as the admin API names it."""
    price = spec.get("price")
    if not isinstance(price, dict):
        return spec
    return {**spec, "price": {_WIRE.get(k, k): v for k, v in price.items()}}


def spec_from_wire(spec: dict) -> dict:
    """The admin API's model spec dict with its price named as the catalog names it."""
    price = spec.get("price")
    if not isinstance(price, dict):
        return spec
    back = {v: k for k, v in _WIRE.items()}
    return {**spec, "price": {back.get(k, k): v for k, v in price.items()}}
