"""What usage accounting keeps: one record per request, and sums of them.

A request's record holds counts, times and names, never what was asked or
answered. ``UsageSum`` is what a question over a period gets back: totals of
the requests that share the values of the dimensions asked for.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from pydantic import BaseModel, Field

# What usage can be grouped by. team and org are read off the project's path
# (Org/team/project); key is the key id.
USAGE_DIMENSIONS = ("project", "team", "org", "key", "model", "served_model", "replica", "status")


class UsageFields(Protocol):
    """The fields a request's usage is written from.

    Both the gateway's cheap ``UsageRow`` and ``UsageRecord`` have them, so the
    hot path never builds a pydantic model per request.
    """

    at: datetime
    key_id: str
    # The project's path when the request was made, and its id ("" when unknown):
    # reports show a row under the id's path now (or last), else under this path.
    project: str
    project_id: str
    model: str
    served_model: str
    replica: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost_micros: int
    latency_ms: float
    ttft_ms: float | None
    status: int
    profile: str
    # The batch the request was part of; "" for a client's own.
    batch_id: str


class UsageRecord(BaseModel):
    """One request as usage accounting stored it."""

    at: datetime
    key_id: str = ""
    # The project's path (Org/team/project): as the store read it, the id's path now
    # (or last); as written, the path the request was made under.
    project: str = ""
    # The project's id (ten_…); "" when none was known.
    project_id: str = ""
    # The model the client asked for, and the one that answered.
    model: str = ""
    served_model: str = ""
    # A replica id, or the name of an outside endpoint.
    replica: str = ""
    # cached_tokens are counted within prompt_tokens, as OpenAI's usage counts them.
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_micros: int = 0
    latency_ms: float = 0.0
    # None: no first token came (an error, or an answer not streamed).
    ttft_ms: float | None = None
    # The HTTP status the client got.
    status: int = 200
    profile: str = ""
    batch_id: str = ""


class UsageSum(BaseModel):
    """Totals of the requests sharing one value of each dimension grouped by."""

    # Dimension → value, e.g. {"project": "Acme/ml/search", "status": "200"}.
    group: dict[str, str] = Field(default_factory=dict)
    requests: int = 0
    # Requests answered with status >= 400.
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_micros: int = 0
    latency_ms_sum: float = 0.0
    ttft_ms_sum: float = 0.0
    # Requests that had a first token: the divisor of the TTFT average.
    ttft_count: int = 0

    @property
    def latency_ms_avg(self) -> float:
        return self.latency_ms_sum / self.requests if self.requests else 0.0

    @property
    def ttft_ms_avg(self) -> float:
        return self.ttft_ms_sum / self.ttft_count if self.ttft_count else 0.0
