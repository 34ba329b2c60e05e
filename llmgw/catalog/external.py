"""A model answered by an outside OpenAI-compatible provider rather than by replicas."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class ExternalKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A file holding the provider's API key (read by the control plane, never stored).
    file: str
    # Share of the traffic beside the other keys; 0 counts as 1.
    weight: Annotated[int, Field(ge=0)] = 0


class External(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    model: str = ""
    api_key_files: list[ExternalKey] = Field(default_factory=list)
