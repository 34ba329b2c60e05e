"""A warm wheelhouse: wheels for every runtime dependency of llmgw, cached outside the repo.

``llmgw node add --wheelhouse DIR`` installs llmgw on a node from wheels it
copies there, with no index: the node (a network namespace in the tests) has
no route to PyPI. Building the wheelhouse downloads ~40 wheels once; it is
kept under /tmp, keyed by a hash of pyproject.toml's runtime dependencies, the
Python version and the platform, so later runs (and the benchmark) reuse it
and a change of dependencies builds a new one beside it.

Run as a script to build (or find) it ahead of the tests:
``.venv/bin/python -m tests.e2e.wheelhouse``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_ROOT = Path(os.environ.get("LLMGW_TEST_WHEELHOUSE_ROOT", "/tmp"))
PREFIX = "llmgw-test-wheelhouse-"
# Marks a wheelhouse whose pip run finished; a half-built one never has it.
COMPLETE_MARK = ".complete"
# pip resolves and downloads ~40 wheels (a few MB each); 15 minutes is for a slow mirror.
BUILD_TIMEOUT_S = 900


def runtime_dependencies(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """llmgw's ``[project] dependencies``, as written (no dev or starter extras)."""
    with pyproject.open("rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def wheelhouse_key(requirements: list[str]) -> str:
    """A short hash naming the wheelhouse of these requirements on this Python and platform."""
    digest = hashlib.sha256()
    for part in (
        *sorted(requirements),
        f"{sys.implementation.name}{sys.version_info.major}.{sys.version_info.minor}",
        sysconfig.get_platform(),
    ):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:16]


def wheelhouse_dir(requirements: list[str] | None = None) -> Path:
    """Where the wheelhouse of these requirements (default: llmgw's) lives, built or not."""
    reqs = runtime_dependencies() if requirements is None else requirements
    return CACHE_ROOT / f"{PREFIX}{wheelhouse_key(reqs)}"


def is_complete(path: Path) -> bool:
    return (path / COMPLETE_MARK).exists()


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    # Two test sessions started together must not both download into the same place.
    lock_path = path.with_name(path.name + ".lock")
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class WheelhouseError(RuntimeError):
    """pip could not fetch or build a wheel for some dependency."""


def ensure_wheelhouse(
    requirements: list[str] | None = None, *, python: str = sys.executable
) -> Path:
    """The wheelhouse's folder, building it first when it is missing or half built.

    ``pip wheel`` rather than ``pip download``: it leaves a wheel for every
    requirement, building one where PyPI only has a source archive, so the node
    never compiles anything. The folder is filled under a temporary name and
    renamed when pip finished: a run killed half way leaves no wheelhouse that
    looks whole.
    """
    reqs = runtime_dependencies() if requirements is None else requirements
    target = wheelhouse_dir(reqs)
    if is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(target):
        if is_complete(target):  # another session built it while we waited
            return target
        shutil.rmtree(target, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        try:
            proc = subprocess.run(
                [python, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"]
                + ["--prefer-binary", "--wheel-dir", str(staging), *reqs],
                capture_output=True,
                text=True,
                timeout=BUILD_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
            if proc.returncode != 0:
                raise WheelhouseError(
                    f"pip wheel failed ({proc.returncode}) building {target}:\n"
                    f"{proc.stdout}\n{proc.stderr}"
                )
            (staging / COMPLETE_MARK).write_text("\n".join(reqs) + "\n")
            staging.chmod(0o755)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def wheel_names(path: Path) -> list[str]:
    """The wheels in a wheelhouse, by file name."""
    return sorted(p.name for p in path.glob("*.whl"))


@pytest.fixture(scope="session")
def warm_wheelhouse() -> Path:
    """The wheelhouse of llmgw's runtime dependencies, built on first use (PyPI needed once)."""
    try:
        return ensure_wheelhouse()
    except (WheelhouseError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"could not build the test wheelhouse: {e}")


if __name__ == "__main__":
    built = ensure_wheelhouse()
    print(f"{built}: {len(wheel_names(built))} wheels")
