"""vLLM and SGLang: a Python environment built by uv from pinned, hashed PyPI packages.

An engine version comes with one requirements file per CUDA build it is
offered in (``cu124``, ``cu128``, …), every line ``name==version`` with its
``--hash``. The node takes the best build its driver and GPUs can run (the
table below), refuses a requirements file that names anything but a PyPI
package, and has uv install it:

    uv venv --no-config --relocatable --python 3.12 <scratch>/venv
    uv pip install --no-config --python <scratch>/venv/bin/python --require-hashes
        --exclude-newer <released + 1 day> --index-url https://pypi.org/simple
        [--extra-index-url https://download.pytorch.org/whl/<build>] -r <scratch>/requirements.txt

``--exclude-newer`` resolves as PyPI stood a day after the release: a package
uploaded later (a yanked-and-replaced wheel, a hijacked name) cannot get in
even where a hash would let it. ``--no-config`` and a scrubbed environment keep
a uv.toml or UV_INDEX_URL on the node from pointing uv elsewhere.
``--relocatable`` because the environment is built under a scratch name and
renamed into place.

A node without an NVIDIA GPU, or with GPUs older than the engine supports,
skips these engines (``NotHere``): that is not a fault of the node.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, urlsplit

from agentd.provision.llamacpp import (
    Installation,
    InstallError,
    Say,
    install_dir,
    publish,
    scratch_dir,
    size_words,
)
from llmgw.aio import within
from llmgw.errors import LlmgwError
from llmgw.inventory import Inventory

log = logging.getLogger(__name__)

PYPI = "https://pypi.org/simple"
# Where uv keeps the interpreters it fetches, under engines_dir: the
# engine user runs them, so they are shared with its group as the
# environments are.
PYTHONS_DIR = ".python"
PYTORCH_INDEX = "https://download.pytorch.org/whl/{tag}"
# A vLLM environment is 8–12 GB (torch and its CUDA libraries); starting one
# that fills the disk halfway leaves the node worse off than not starting.
MIN_FREE_BYTES = 25 * 10**9
# torch alone is ~2.5 GB: an hour covers a slow link; ten minutes covers
# making an empty environment, which may first fetch a Python.
INSTALL_TIMEOUT_S = 3600.0
VENV_TIMEOUT_S = 600.0
CHECK_TIMEOUT_S = 120.0
# Asks the environment which version of the engine it holds, without
# importing it (importing vLLM imports torch and CUDA: seconds, every recheck).
CHECK_CODE = "import importlib.metadata as m; print(m.version({dist!r}))"


@dataclass(frozen=True)
class PythonEngine:
    """What the node needs to know about one Python engine."""

    name: str
    label: str  # how people write it
    dist: str  # its PyPI distribution
    min_cc: tuple[int, int]


ENGINES: dict[str, PythonEngine] = {
    # vLLM's kernels start at Volta; SGLang's at Turing.
    "vllm": PythonEngine("vllm", "vLLM", "vllm", (7, 0)),
    "sglang": PythonEngine("sglang", "SGLang", "sglang", (7, 5)),
}


@dataclass(frozen=True)
class CudaBuild:
    """One CUDA build of PyTorch (and so of the engines built on it)."""

    tag: str  # "cu124"
    cuda: str  # "12.4"
    min_driver: int  # the driver branch it needs, 550 for R550
    min_cc: tuple[int, int]  # the oldest GPU it has kernels for
    max_cc: tuple[int, int]  # the newest


# Best first: what vLLM and SGLang publish and PyTorch builds them on.
# vLLM's PyPI wheels are CUDA 12.8 (0.9-0.11), then CUDA 12.9 (0.12 on),
# and CUDA 13.0 wheels sit beside them in its GitHub releases; SGLang
# follows PyTorch's cu126/cu128/cu129/cu130. A build is taken only on a
# driver at least its own CUDA's minimum (R580 for 13.0, R575 for 12.9,
# R570 for 12.8, R560 for 12.6; older vLLMs were cu121 and cu118): CUDA's
# minor-version compatibility would let 12.x start on R525, but kernels
# shipped as PTX then fail to JIT, after 10 GB were installed. PyTorch 2.8's CUDA 12.8+ builds dropped
# Maxwell, Pascal and Volta (sm_50-sm_70), so a V100 takes cu126; Blackwell
# (10.0, 12.0) has kernels from CUDA 12.8 on.
CUDA_BUILDS: tuple[CudaBuild, ...] = (
    CudaBuild("cu130", "13.0", 580, (7, 5), (12, 1)),
    CudaBuild("cu129", "12.9", 575, (7, 5), (12, 0)),
    CudaBuild("cu128", "12.8", 570, (7, 5), (12, 0)),
    CudaBuild("cu126", "12.6", 560, (5, 0), (9, 0)),
    CudaBuild("cu124", "12.4", 550, (5, 0), (9, 0)),
    CudaBuild("cu121", "12.1", 530, (5, 0), (9, 0)),
    CudaBuild("cu118", "11.8", 520, (3, 7), (9, 0)),
)


class NotHere(LlmgwError):
    """This node cannot run the engine at all (no GPU, too old a GPU): skipped, not failed."""


class RequirementsRefused(InstallError):
    """A requirements file names something other than a pinned, hashed PyPI package."""


@dataclass(frozen=True)
class PyEnvSource:
    """Where a Python engine version comes from: PyPI, as of its release."""

    released: datetime | date  # when the version was published on PyPI
    requirements: Mapping[str, str]  # CUDA build tag -> hashed requirements file
    python: str = "3.12"
    # The index to resolve from: PyPI, or a mirror of it that keeps PyPI's
    # upload times (PEP 700), which --exclude-newer reads.
    index_url: str = PYPI
    # The cluster's model mirrors, tried in order before index_url: their
    # package index (<mirror>/simple/) holds the recipe's wheels, each pinned by
    # its hash, so neither PyPI's upload times nor PyTorch's index are asked.
    mirror_urls: tuple[str, ...] = ()
    mirror_token: str = field(default="", repr=False)


@dataclass(frozen=True)
class RunResult:
    returncode: int
    output: str  # stdout and stderr together, the tail of it


class Runner(Protocol):
    """Runs a command to completion. The real one runs a subprocess; tests record argv."""

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> RunResult: ...


@dataclass
class SubprocessRunner:
    """The real runner: an asyncio subprocess, its output kept to the last ``keep_bytes``."""

    keep_bytes: int = 64 * 1024

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> RunResult:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                stdin=asyncio.subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
            )
        except FileNotFoundError as exc:
            raise InstallError(
                f"{Path(argv[0]).name} is not installed on this node",
                hint="install uv (https://docs.astral.sh/uv/) for the agent to build "
                "vLLM and SGLang environments",
            ) from exc
        assert proc.stdout is not None
        tail = bytearray()

        async def drain() -> None:
            while chunk := await proc.stdout.read(65536):
                tail.extend(chunk)
                del tail[: max(0, len(tail) - self.keep_bytes)]
            await proc.wait()

        try:
            await within(drain(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise InstallError(
                f"{Path(argv[0]).name} {argv[1] if len(argv) > 1 else ''} did not finish "
                f"in {timeout_s:g} s"
            ) from None
        return RunResult(proc.returncode or 0, tail.decode(errors="replace"))


def find_uv() -> str:
    """The uv beside the agent's own Python (uv is one of llmgw's dependencies), else on PATH.

    Engine packages never go into the agent's environment; uv itself does,
    so every node that has llmgw has the uv it was tested with.
    """
    beside = Path(sys.executable).parent / "uv"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv") or "uv"


def exclude_newer(released: datetime | date) -> str:
    """The ``--exclude-newer`` cut-off: a day after the release, RFC 3339 in UTC.

    A bare date is taken as midnight UTC starting that day.
    """
    if not isinstance(released, datetime):
        released = datetime(released.year, released.month, released.day, tzinfo=UTC)
    elif released.tzinfo is None:
        released = released.replace(tzinfo=UTC)
    return (released.astimezone(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def driver_branch(version: str) -> int:
    """550 for "550.54.15"; 0 when unknown."""
    head = version.strip().split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def not_here(engine: PythonEngine, inventory: Inventory) -> str:
    """Why this node can never run ``engine`` ("" when it can): skipped, not failed."""
    if not inventory.gpus:
        note = f" ({inventory.host.gpu_note})" if inventory.host.gpu_note else ""
        return f"no NVIDIA GPU on this node{note}; {engine.label} runs on GPUs only"
    ccs = [g.compute_capability_tuple for g in inventory.gpus]
    known = [c for c in ccs if c is not None]
    if known and min(known) < engine.min_cc:
        return (
            f"{engine.label} needs compute capability {_cc(engine.min_cc)} or newer; "
            f"this node has a GPU of {_cc(min(known))}"
        )
    return ""


def choose_build(
    engine: PythonEngine, offered: Iterable[str], inventory: Inventory, wanted: str = ""
) -> CudaBuild:
    """The best of the offered builds this node's driver and GPUs can run.

    NotHere when the node cannot run the engine at all; InstallError, saying
    what would fix it, when only its driver stands in the way.
    """
    if reason := not_here(engine, inventory):
        raise NotHere(reason)
    offered = set(offered)
    candidates = [b for b in CUDA_BUILDS if b.tag in offered and (not wanted or b.tag == wanted)]
    if not candidates:
        known = ", ".join(sorted(offered)) or "none"
        what = f"build {wanted}" if wanted else "CUDA build this node knows"
        raise InstallError(f"no {engine.label} {what} is offered (offered: {known})")
    branch = driver_branch(inventory.host.nvidia_driver_version)
    ccs = [c for c in (g.compute_capability_tuple for g in inventory.gpus) if c is not None]
    low, high = (min(ccs), max(ccs)) if ccs else ((0, 0), (0, 0))
    why: list[str] = []
    for build in candidates:
        if branch < build.min_driver:
            why.append(
                f"driver {branch or 'unknown'} is older than what CUDA {build.cuda} needs "
                f"({build.min_driver} or newer, for {build.tag})"
            )
        elif ccs and low < build.min_cc:
            why.append(f"{build.tag} has no kernels for compute capability {_cc(low)}")
        elif ccs and high > build.max_cc:
            why.append(f"{build.tag} has no kernels for compute capability {_cc(high)}")
        else:
            return build
    driver = inventory.host.nvidia_driver_version or "unknown"
    raise InstallError(
        f"no {engine.label} build runs on this node (driver {driver}): " + "; ".join(why),
        hint="upgrade the NVIDIA driver, or offer a build for this one",
    )


_PIN = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*(?:\[[A-Za-z0-9._,\s-]*\])?"
    r"\s*==\s*(?P<version>[A-Za-z0-9.+!_-]+)\s*(?:;.*)?"
)
_HASH = re.compile(r"--hash[=\s]sha256:[0-9a-f]{64}")


def check_requirements(text: str) -> list[tuple[str, str]]:
    """(name, version) of every requirement, or RequirementsRefused naming the line.

    Only ``name==version --hash=sha256:…`` lines are accepted: no options
    (-r, -e, --index-url, --extra-index-url, --find-links, …), no URLs, no VCS,
    no paths, nothing unpinned or unhashed.
    """
    pins: list[tuple[str, str]] = []
    for n, line in _logical_lines(text):

        def refuse(why: str, line: str = line, n: int = n) -> RequirementsRefused:
            return RequirementsRefused(
                f"line {n} of the requirements, {line!r}, {why}; the environment was not built",
                hint="a Python engine is installed from pinned, hashed PyPI packages only",
            )

        if line.startswith("-"):
            raise refuse("is an option, not a package from PyPI")
        spec, *options = re.split(r"\s+(?=--)", line)
        if "://" in spec or "@" in spec or "/" in spec or spec.startswith((".", "~", "file:")):
            raise refuse("is not a package from PyPI")
        m = _PIN.fullmatch(spec.strip())
        if m is None:
            raise refuse("does not pin one version with ==")
        for option in options:
            if not _HASH.fullmatch(option.strip()):
                raise refuse(f"has the option {option.split('=')[0]!r}; only --hash is allowed")
        if not options:
            raise refuse("has no --hash")
        pins.append((m["name"], m["version"]))
    if not pins:
        raise RequirementsRefused("the requirements name no package")
    return pins


def uv_commands(
    uv: str,
    venv: Path,
    requirements_file: Path,
    source: PyEnvSource,
    build: CudaBuild,
    pins: list[tuple[str, str]],
    index_url: str = PYPI,
    *,
    from_mirror: bool = False,
) -> list[list[str]]:
    """The two command lines that build the environment, exactly.

    ``from_mirror``: the index is a cluster mirror's, given to uv in its
    environment (UV_INDEX_URL, credentials and all: never on a command line);
    every pin's hash holds it to the recipe, and the mirror's times of adding
    are not PyPI's upload times, so there is no --exclude-newer.
    """
    make = [uv, "venv", "--no-config", "--relocatable", "--python", source.python, str(venv)]
    install = [
        uv,
        "pip",
        "install",
        "--no-config",
        "--python",
        str(venv / "bin" / "python"),
        "--require-hashes",
    ]
    if not from_mirror:
        install += ["--exclude-newer", exclude_newer(source.released), "--index-url", index_url]
    # PyTorch's own index only where a pin asks for its build ("torch==2.5.1+cu118"):
    # a pin without the local label would otherwise match PyTorch's file,
    # whose hash is not the PyPI one. A mirror holds those wheels itself.
    if not from_mirror and any(version.endswith(f"+{build.tag}") for _, version in pins):
        install += ["--extra-index-url", PYTORCH_INDEX.format(tag=build.tag)]
    install += ["-r", str(requirements_file)]
    return [make, install]


def mirror_index(mirror_url: str, token: str) -> str:
    """A mirror's package index as uv reads it, the read token as the password."""
    parts = urlsplit(mirror_url)
    auth = f"llmgw:{quote(token, safe='')}@" if token else ""
    return f"{parts.scheme}://{auth}{parts.netloc}{parts.path.rstrip('/')}/simple/"


def uv_env(engines_dir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment uv runs with: nothing of the node's pip or uv settings.

    Interpreters uv fetches live beside the engines, not in root's home, so
    the unprivileged engine user can run them; the cache too, on the same
    filesystem, so uv can hard-link from it instead of copying gigabytes.
    """
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if not k.startswith(("UV_", "PIP_"))
        and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "CONDA_PREFIX")
    }
    env["UV_CACHE_DIR"] = str(engines_dir / ".uv-cache")
    env["UV_PYTHON_INSTALL_DIR"] = str(engines_dir / PYTHONS_DIR)
    return env


async def install_python_engine(
    engine: str,
    version: str,
    variant: str,
    source: PyEnvSource,
    engines_dir: Path,
    inventory: Inventory,
    *,
    runner: Runner,
    uv: str = "uv",
    say: Say | None = None,
    min_free_bytes: int = MIN_FREE_BYTES,
    index_url: str = "",
    share_gid: int | None = None,
) -> Installation:
    """Build ``<engines_dir>/<engine>/<version>-<build>/`` with uv; ``variant`` "" picks the build.

    ``share_gid``: the engine user's group, which may read and run the
    environment and uv's interpreters under ``<engines_dir>/.python``.
    """
    if engine not in ENGINES:
        raise InstallError(f"{engine} is not a Python engine this agent installs")
    spec = ENGINES[engine]
    build = choose_build(spec, source.requirements, inventory, variant)
    text = source.requirements[build.tag]
    pins = check_requirements(text)
    if (spec.dist, version) not in {(n.lower().replace("_", "-"), v) for n, v in pins}:
        raise RequirementsRefused(
            f"the requirements for {spec.label} {version} do not pin {spec.dist}=={version}"
        )
    final = install_dir(engines_dir, engine, version, build.tag)
    engines_dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(engines_dir).free
    if free < min_free_bytes:
        raise InstallError(
            f"{spec.label} needs {size_words(min_free_bytes)} free in {engines_dir}; "
            f"{size_words(free)} are",
            hint="free some disk (old engine versions, the weights cache) and try again",
        )
    scratch = scratch_dir(final)
    try:
        venv, req = scratch / "venv", scratch / "requirements.txt"
        req.write_text(text)
        env = uv_env(engines_dir)
        label = f"{spec.label} {version} ({build.tag})"
        origins = [(m, mirror_index(m, source.mirror_token)) for m in source.mirror_urls]
        origins.append(("", index_url or source.index_url or PYPI))
        failed: list[str] = []
        for i, (mirror, index) in enumerate(origins):
            make, install = uv_commands(
                uv, venv, req, source, build, pins, index, from_mirror=bool(mirror)
            )
            run_env = {**env, "UV_INDEX_URL": index} if mirror else env
            if i == 0:
                if say:
                    say(f"making a Python {source.python} environment for {label}")
                await _run(runner, make, env, VENV_TIMEOUT_S, "uv venv")
            where = f" from the mirror {urlsplit(mirror).netloc}" if mirror else ""
            if say:
                say(f"installing {label} with uv{where}: {len(pins)} pinned packages")
            try:
                await _run(runner, install, run_env, INSTALL_TIMEOUT_S, "uv pip install")
            except InstallError as e:
                if source.mirror_token:
                    # uv masks credentials in URLs it prints; never trust that alone.
                    e.message = e.message.replace(source.mirror_token, "***")
                if i + 1 == len(origins):
                    if failed:
                        raise InstallError(
                            e.message + "; before that, " + "; ".join(failed),
                            hint="put the recipe's wheels on a mirror "
                            "(llmgw ctl mirror add DIR --wheels), or let the node reach PyPI",
                        ) from None
                    raise
                failed.append(f"the mirror {urlsplit(mirror).netloc}: {e.message}")
                log.warning("%s: %s; trying the next index", label, failed[-1])
                continue
            source_words_where = mirror
            break
        check_args = ["-c", CHECK_CODE.format(dist=spec.dist)]
        python = venv / "bin" / "python"
        out = await _run(runner, [str(python), *check_args], env, CHECK_TIMEOUT_S, "the check")
        got = (out.strip().splitlines() or [""])[-1].strip()
        if got != version:
            raise InstallError(
                f"the new environment holds {spec.dist} {got or '(none)'}, not {version}"
            )
        source_words = (
            f"the mirror {urlsplit(source_words_where).netloc}, {build.tag} (CUDA {build.cuda})"
            if source_words_where
            else f"PyPI as of {exclude_newer(source.released)}, {build.tag} (CUDA {build.cuda})"
        )
        publish(
            scratch,
            final,
            {
                "engine": engine,
                "version": version,
                "variant": build.tag,
                "binary": "venv/bin/python",
                "lib_dir": "",
                "check_args": check_args,
                "version_text": f"{spec.dist} {got}",
                "source": source_words,
                "requirements": "requirements.txt",
            },
            share_gid=share_gid,
            also=[engines_dir / PYTHONS_DIR],
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return Installation(
        engine,
        version,
        build.tag,
        final,
        final / "venv" / "bin" / "python",
        f"{spec.dist} {got}",
        source_words,
    )


async def _run(
    runner: Runner, argv: list[str], env: Mapping[str, str], timeout_s: float, what: str
) -> str:
    result = await runner.run(argv, env=env, timeout_s=timeout_s)
    if result.returncode != 0:
        raise InstallError(
            f"{what} failed (exit {result.returncode}): {_last_words(result.output)}"
        )
    return result.output


def _last_words(output: str) -> str:
    """What uv said went wrong: its error line and the causes under it, or its last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].lower().startswith(("error:", "×")):
            said = [lines[i].lstrip("× ").removeprefix("error:").strip()]
            for ln in lines[i + 1 :]:
                if ln.lower().startswith(("cause:", "caused by:", "╰─▶")):
                    said.append(ln.lstrip("╰─▶ ").split(":", 1)[-1].strip())
            return "; ".join(s for s in said if s)[:500]
    return lines[-1][:300] if lines else "no output"


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first line number, text) of each requirement: continuations joined, comments dropped."""
    buf, start = "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            yield start, " ".join(buf.split())
        buf = ""
    if buf.strip():
        yield start, " ".join(buf.split())


def _cc(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"
