"""A model answered by an outside OpenAI-compatible provider rather than by replicas.

In the catalog::

    - name: gpt-mini
      source: external
      external:
        url: https://api.example.com/v1
        model: gpt-4o-mini
        api_key_files:
          - file: /etc/llmgw/secrets/provider-a.key
          - file: /etc/llmgw/secrets/provider-b.key
            weight: 2

Each key file is an endpoint of its own (``external:gpt-mini#1``, ``#2`` …)
with its own breaker, so a key at its limit or refused is passed over for
another. The files are read by the control plane; only their paths are stored.
"""

from __future__ import annotations

import posixpath
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The source string of a model an outside provider answers.
EXTERNAL_SOURCE = "external"


class ExternalKey(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A file holding the provider's API key (read by the control plane, never stored).
    file: str
    # Share of the traffic beside the other keys; 0 counts as 1.
    weight: Annotated[int, Field(ge=0)] = 0

    @field_validator("file")
    @classmethod
    def _absolute(cls, v: str) -> str:
        v = v.strip()
        if not v.startswith("/") or posixpath.normpath(v) != v.rstrip("/"):
            raise ValueError(
                f"api key file {v!r} must be an absolute path without '..' "
                "(it is read by the control plane, whatever its working directory)"
            )
        return v

    @property
    def share(self) -> int:
        return self.weight or 1


class External(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The provider's base URL, with or without its trailing /v1.
    url: str
    # The provider's name of the model; empty: the catalog name.
    model: str = ""
    api_key_files: list[ExternalKey] = Field(default_factory=list)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        v = v.strip()
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"external url {v!r} must be http(s)://host[:port][/path]")
        if parts.query or parts.fragment:
            raise ValueError(f"external url {v!r} must not carry a query or a fragment")
        return v

    @property
    def base_url(self) -> str:
        """The URL requests' ``/v1/…`` paths are appended to."""
        return self.url.rstrip("/").removesuffix("/v1")

    def upstream_model(self, name: str) -> str:
        return self.model or name

    def endpoint(self, name: str, index: int) -> str:
        """The endpoint name of the key at ``index`` (from 0): ``external:NAME#1`` for the first."""
        return f"external:{name}#{index + 1}"
