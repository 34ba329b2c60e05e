"""The files of deploy/, read by the harness so that what it runs is what docs/ha.md tells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def deploy_file(relative: str) -> Path:
    path = DEPLOY / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the harness runs deploy/'s own files")
    return path


def load_yaml(relative: str) -> dict[str, Any]:
    return yaml.safe_load(deploy_file(relative).read_text())


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
