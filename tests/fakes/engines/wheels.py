"""Wheels written with the standard library, no network and no build backend.

    path = build_wheel(out_dir, "vllm", "0.11.0", PACKAGES / "vllm",
                       requires=["fake-engine-core==1.0.0"])

A wheel is a zip with the package's files and a ``.dist-info`` directory
(METADATA, WHEEL, RECORD); that is all uv needs to install one. Entries get
a fixed time stamp, so the same sources give the same bytes and the same
sha256 on every run: the hashed requirements stay valid and uv's cache warm.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

PACKAGES = Path(__file__).resolve().parent / "packages"
# 1980-01-01, the earliest a zip can say: any fixed time would do.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def dist_filename(name: str) -> str:
    """A distribution name as wheel file names write it (PEP 427): runs of -_. as _."""
    return re.sub(r"[-_.]+", "_", name)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def build_wheel(
    out_dir: Path,
    name: str,
    version: str,
    source_dir: Path,
    *,
    requires: Iterable[str] = (),
    summary: str = "",
) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` of the packages under ``source_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{dist_filename(name)}-{version}"
    info = f"{stem}.dist-info"
    files: list[tuple[str, bytes]] = []
    for path in sorted(source_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        files.append((path.relative_to(source_dir).as_posix(), path.read_bytes()))
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {summary or f'llmgw test stand-in {name}'}",
        "Requires-Python: >=3.9",
        *(f"Requires-Dist: {r}" for r in requires),
    ]
    files.append((f"{info}/METADATA", ("\n".join(metadata) + "\n").encode()))
    wheel = "Wheel-Version: 1.0\nGenerator: llmgw-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files.append((f"{info}/WHEEL", wheel.encode()))
    record = [f"{arc},{_record_hash(data)},{len(data)}" for arc, data in files]
    record.append(f"{info}/RECORD,,")
    files.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    target = out_dir / f"{stem}-py3-none-any.whl"
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in files:
            entry = zipfile.ZipInfo(arc, date_time=FIXED_TIME)
            entry.external_attr = 0o644 << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, data)
    tmp.replace(target)
    return target


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
