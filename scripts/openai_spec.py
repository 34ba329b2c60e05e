"""Writes the part of OpenAI's published API description llmgw answers for, for the tests.

OpenAI's description (MIT licensed, github.com/openai/openai-openapi) is about
3 MB of YAML; the tests need only the paths llmgw serves in OpenAI's shape and
the components those reach. This keeps those, unchanged, as JSON:

    python scripts/openai_spec.py [DESCRIPTION] [OUT]

DESCRIPTION defaults to ../shared/reference/openai-openapi.yaml beside the
checkout, OUT to tests/fixtures/openai/openapi.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DESCRIPTION = ROOT.parent / "shared/reference/openai-openapi.yaml"
DEFAULT_OUT = ROOT / "tests/fixtures/openai/openapi.json"
# The OpenAI-shaped paths llmgw serves.
PATHS = (
    "/chat/completions",
    "/completions",
    "/embeddings",
    "/models",
    "/models/{model}",
    "/responses",
    "/responses/{response_id}",
    "/responses/{response_id}/input_items",
    "/files",
    "/files/{file_id}",
    "/files/{file_id}/content",
    "/batches",
    "/batches/{batch_id}",
    "/batches/{batch_id}/cancel",
)


def _refs(value, out: set[str]) -> None:
    if isinstance(value, dict):
        ref = value.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/"):
            out.add(ref)
        for v in value.values():
            _refs(v, out)
    elif isinstance(value, list):
        for v in value:
            _refs(v, out)


def trim(document: dict) -> dict:
    """The description with only ``PATHS`` and every component they reach."""
    paths = {p: document["paths"][p] for p in PATHS if p in document["paths"]}
    components: dict[str, dict] = {}
    todo: set[str] = set()
    _refs(paths, todo)
    seen: set[str] = set()
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        _, _, kind, name = ref.split("/", 3)
        value = document["components"][kind][name]
        components.setdefault(kind, {})[name] = value
        _refs(value, todo)
    schemes = document["components"].get("securitySchemes")
    if schemes:
        components["securitySchemes"] = schemes
    out = {k: v for k, v in document.items() if k not in ("paths", "components", "webhooks")}
    out["paths"] = paths
    out["components"] = {k: dict(sorted(v.items())) for k, v in sorted(components.items())}
    # YAML reads some examples as dates; JSON knows only strings.
    return json.loads(json.dumps(out, default=str))


def load(path: Path) -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open(encoding="utf-8") as f:
        return yaml.load(f, Loader=loader)


def render(document: dict) -> str:
    return json.dumps(document, indent=1, sort_keys=False, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    source = Path(argv[1]) if len(argv) > 1 else DEFAULT_DESCRIPTION
    out = Path(argv[2]) if len(argv) > 2 else DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(trim(load(source))), encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size // 1024} KiB) from {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
