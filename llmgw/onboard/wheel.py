"""The wheel of this very llmgw, which ``node add`` installs on nodes: the control plane's exact version.

Built once per content and cached: from a source checkout, by calling
setuptools' PEP 517 hook on a copy of the tree (nothing written into the
checkout, no network); from an installed wheel, by packing the installed
files again from the distribution's RECORD.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import llmgw
from llmgw.fsutil import sha256_file
from llmgw.onboard.events import OnboardError

PACKAGES = ("llmgw", "gatewayd", "agentd", "tui", "proto", "mirrord")
_SOURCE_SUFFIXES = {".py", ".sql", ".tcss", ".proto", ".typed"}
_TOP_FILES = ("pyproject.toml", "README.md", "LICENSE", "setup.cfg", "MANIFEST.in")


@dataclass(frozen=True)
class SelfWheel:
    path: Path
    sha256: str
    version: str


def self_wheel(cache_dir: Path) -> SelfWheel:
    """The cached wheel of the running llmgw, built if its content changed."""
    tree = source_tree()
    if tree is not None:
        digest = _tree_digest(tree)
        out = cache_dir / digest[:16]
        found = sorted(out.glob("llmgw-*.whl")) if out.is_dir() else []
        wheel = found[0] if found else _build_from_source(tree, out)
    else:
        dist = metadata.distribution("llmgw")
        digest = hashlib.sha256((dist.read_text("RECORD") or "").encode()).hexdigest()
        out = cache_dir / f"installed-{digest[:16]}"
        name = f"llmgw-{dist.version}-py3-none-any.whl"
        wheel = out / name if (out / name).exists() else _repack_installed(dist, out / name)
    return SelfWheel(wheel, sha256_file(wheel), llmgw.__version__)


def source_tree() -> Path | None:
    """The checkout llmgw runs from (pyproject.toml beside the package), or None."""
    root = Path(llmgw.__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "llmgw" / "__init__.py").is_file():
        return root
    return None


def _source_files(root: Path) -> list[Path]:
    files = [root / f for f in _TOP_FILES if (root / f).is_file()]
    for pkg in PACKAGES:
        for dirpath, dirnames, filenames in os.walk(root / pkg):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            files.extend(
                Path(dirpath) / f
                for f in sorted(filenames)
                if Path(f).suffix in _SOURCE_SUFFIXES or f == "py.typed"
            )
    return files


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in _source_files(root):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _build_from_source(root: Path, out: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix="llmgw-wheel-") as tmp:
        copy = Path(tmp) / "src"
        for f in _source_files(root):
            dest = copy / f.relative_to(root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest)
        built = Path(tmp) / "dist"
        built.mkdir()
        hook = (
            "import sys; from setuptools import build_meta as b; print(b.build_wheel(sys.argv[1]))"
        )
        proc = subprocess.run(
            [sys.executable, "-c", hook, str(built)],
            cwd=copy,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            raise OnboardError(
                f"could not build the llmgw wheel from {root}: {proc.stderr.strip()[-800:]}",
                hint="check that setuptools is installed beside llmgw (pip install setuptools)",
            )
        name = proc.stdout.strip().splitlines()[-1]
        out.mkdir(parents=True, exist_ok=True)
        final = out / name
        tmp_final = out / f".{name}.tmp"
        shutil.copyfile(built / name, tmp_final)
        os.replace(tmp_final, final)
        return final


def _repack_installed(dist: metadata.Distribution, target: Path) -> Path:
    """A wheel of the installed files, with a RECORD of their hashes."""
    files = [f for f in dist.files or [] if not str(f).startswith("..")]
    dist_info = next(
        (str(f).split("/")[0] for f in files if str(f).endswith(".dist-info/METADATA")), ""
    )
    if not dist_info:
        raise OnboardError(
            "the installed llmgw has no METADATA to pack a wheel from",
            hint="install llmgw from a wheel or run it from a checkout",
        )
    buf = io.BytesIO()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in files:
            rel = str(f)
            if rel.endswith(".pyc") or rel == f"{dist_info}/RECORD" or "/INSTALLER" in rel:
                continue
            data = Path(f.locate()).read_bytes()
            z.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            writer.writerow([rel, f"sha256={digest.decode()}", len(data)])
        writer.writerow([f"{dist_info}/RECORD", "", ""])
        z.writestr(f"{dist_info}/RECORD", record.getvalue())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, target)
    return target
