"""The client API described as an OpenAPI 3.1 document, served at ``/v1/openapi.json``."""

from __future__ import annotations

import json
from functools import cache

from llmgw import __version__


@cache
def document_bytes() -> bytes:
    return json.dumps(document()).encode()


def document() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "llmgw client API", "version": __version__},
        "paths": {},
    }
