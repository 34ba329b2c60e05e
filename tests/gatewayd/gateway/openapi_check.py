"""Objects checked against OpenAI's published API description (the part llmgw serves:
tests/fixtures/openai/openapi.json, written by scripts/openai_spec.py)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema_rs

DESCRIPTION = Path(__file__).resolve().parents[2] / "fixtures/openai/openapi.json"


@functools.cache
def _components() -> dict:
    return json.loads(DESCRIPTION.read_text(encoding="utf-8"))["components"]


@functools.cache
def _validator(schema: str):
    root = {"$ref": f"#/components/schemas/{schema}", "components": _components()}
    return jsonschema_rs.Draft202012Validator(root, validate_formats=False)


def schema_errors(value: dict, schema: str) -> list[str]:
    """Where ``value`` breaks the description's ``schema`` (empty: it validates)."""
    return [f"{e.instance_path}: {e.message}" for e in _validator(schema).iter_errors(value)]


def response_errors(response: dict) -> list[str]:
    return schema_errors(response, "Response")


@functools.cache
def _event_schemas() -> dict[str, str]:
    """Event type (``response.created``) → the name of its schema in the description."""
    names = {}
    schemas = _components()["schemas"]
    for ref in schemas["ResponseStreamEvent"]["anyOf"]:
        name = ref["$ref"].rsplit("/", 1)[-1]
        kind = schemas[name].get("properties", {}).get("type", {})
        for value in kind.get("enum", ()) or ([kind["const"]] if "const" in kind else []):
            names[value] = name
    return names


def event_errors(event: dict) -> list[str]:
    """Where a Responses stream event breaks its own schema (an unknown type is one error)."""
    name = _event_schemas().get(event.get("type", ""))
    if name is None:
        return [f"no event type {event.get('type')!r} in the description"]
    return schema_errors(event, name)
