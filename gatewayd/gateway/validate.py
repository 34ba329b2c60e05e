"""What a client request must look like before it is sent on: 400s that name the field."""

from __future__ import annotations

import json

from gatewayd.gateway.errors import ApiError


def parse(body: bytes) -> dict:
    """The request body as a JSON object with a model name; ApiError(400) otherwise."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body is not valid JSON", code="invalid_json") from None
    if not isinstance(request, dict):
        raise ApiError(400, "the body must be a JSON object", code="invalid_json")
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(
            400, "'model' must be a non-empty string", code="invalid_type", param="model"
        )
    if "stream" in request and not isinstance(request["stream"], bool):
        raise ApiError(400, "'stream' must be true or false", code="invalid_type", param="stream")
    return request


def check(path: str, request: dict) -> None:
    """The checks of one endpoint (``/v1/chat/completions`` …) beyond ``parse``'s."""
