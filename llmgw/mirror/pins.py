"""The control plane's pins of the wheels it put on the cluster's mirrors: file name → sha256.

``llmgw ctl mirror add DIR --wheels`` has gatewayd read each wheel on its own
machine, hash it and upload it; that sha256 is pinned here, in the control
plane's data dir (``Paths.mirror_pins_file``), before the mirror's answer is
believed. ``node add`` installs from a mirror only what these pins name, with
``pip install --require-hashes``: a wheel replaced on the mirror (or on a
peer it copied from) afterwards is refused on the node by name.

The file is JSON, written whole to a temp file and renamed, under a lock so
two uploads at once both land::

    {"wheels": {"six-1.16.0-py2.py3-none-any.whl":
                {"sha256": "…", "pinned_at": "2026-…Z"}}}
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, field_validator

from llmgw.errors import ConfigError
from llmgw.fsutil import write_atomic
from llmgw.mirror.names import SHA256_RE, check_file_name

log = logging.getLogger(__name__)


class WheelPin(BaseModel):
    sha256: str
    pinned_at: datetime

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str) -> str:
        if not SHA256_RE.fullmatch(v):
            raise ValueError(f"{v!r} is not a sha256 (64 lowercase hex)")
        return v


class WheelPins(BaseModel):
    wheels: dict[str, WheelPin] = Field(default_factory=dict)

    def sha256s(self) -> dict[str, str]:
        return {name: pin.sha256 for name, pin in self.wheels.items()}


def load_pins(path: Path) -> WheelPins:
    """The pins at ``path``; none when it does not exist (no wheel was put through here)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return WheelPins()
    try:
        return WheelPins.model_validate_json(text)
    except ValidationError as e:
        raise ConfigError(
            f"the mirror pins {path} cannot be read: {e.errors()[0]['msg']}",
            hint="restore it from a backup, or add the wheels again (llmgw ctl mirror add DIR "
            "--wheels pins each one)",
        ) from e


def pin_wheels(path: Path, sha256_by_name: Mapping[str, str]) -> list[str]:
    """Pin each wheel (file name → the sha256 the control plane read); the names whose pin
    changed (a wheel of that name put again with other bytes, by the operator)."""
    for name, sha in sha256_by_name.items():
        check_file_name(name)
        if not SHA256_RE.fullmatch(sha):
            raise ValueError(f"{name}: {sha!r} is not a sha256")
    changed: list[str] = []
    with _locked(path):
        pins = load_pins(path)
        now = datetime.now(UTC)
        for name, sha in sha256_by_name.items():
            held = pins.wheels.get(name)
            if held is not None and held.sha256 == sha:
                continue
            if held is not None:
                changed.append(name)
            pins.wheels[name] = WheelPin(sha256=sha, pinned_at=now)
        write_atomic(path, pins.model_dump_json(indent=1) + "\n", mode=0o644)
    for name in changed:
        log.warning("pinned %s again with other bytes (sha256 %s)", name, sha256_by_name[name])
    return changed


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_name(f".{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
