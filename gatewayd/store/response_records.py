"""Stored responses: what ``/v1/responses`` keeps for a project that turned retention on."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

# The longest a project may keep responses (OpenAI keeps them 30 days).
MAX_RETAIN_S = 365 * 86400


class StoredResponse(BaseModel):
    """One response as kept: the Response object, the input items it answered,
    and the conversation before them (``previous_response_id``'s chain)."""

    id: str
    # The owning project's id (ten_…), and its path as the store read it (ignored when written).
    project_id: str
    project: str = ""
    key_id: str = ""
    created_at: datetime
    expires_at: datetime
    response: dict = Field(default_factory=dict)
    input_items: list[dict] = Field(default_factory=list)
    history: list[dict] = Field(default_factory=list)

    def body(self) -> dict:
        return {"response": self.response, "input": self.input_items, "history": self.history}
