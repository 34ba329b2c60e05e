"""OpenAI's Responses API (``/v1/responses``) over chat completions, and stored responses."""

from __future__ import annotations


def mount(server) -> None:
    """Serve ``/v1/responses`` on ``server.gateway``."""
