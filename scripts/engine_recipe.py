"""Write the built-in recipe of a vLLM or SGLang release from PyPI, with the real uv.

    .venv/bin/python scripts/engine_recipe.py vllm 0.33.0 [--build cu130]

What it does, so a later release (or an operator's mirror) gets the same:

1. reads the release's files from the index's JSON pages (PEP 691/700): the
   engine's own Linux x86_64 wheel for Python 3.12 gives ``released`` (its
   upload time) and the platform (``manylinux_2_28``) to resolve for;
2. has uv resolve it from that index alone, as it stood a day after the
   release (``uv pip compile --generate-hashes --exclude-newer``, the same
   cut-off a node installs with);
3. keeps, of each package's hashes, those of the files a Linux x86_64
   CPython 3.12 node can install (uv lists every platform's wheel), and the
   sdist only where no such wheel exists;
4. names the CUDA build from the torch it resolved (nvidia-*-cu13: cu130),
   refusing a ``--build`` that does not match it;
5. checks the file as a node would (agentd/provision/pyenv.check_requirements),
   writes ``llmgw/engines/builtin_recipes/<engine>-<version>-<build>.txt`` and its entry in
   ``llmgw/engines/builtin_recipes/index.yaml``.

It needs the network (PyPI); nothing else in the project does.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import yaml
from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentd.provision.pyenv import PYPI, check_requirements, exclude_newer

RECIPES = ROOT / "llmgw" / "engines" / "builtin_recipes"
ENGINES = ("vllm", "sglang")
# A manylinux wheel up to this glibc is something some node can install;
# which one a node takes is for its own uv to pick from the hashes kept.
GLIBC_MINORS = range(5, 60)
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"


def index_page(index_url: str, name: str) -> dict:
    """A project's page of the simple index, in its JSON form (file names, hashes, upload times)."""
    url = f"{index_url.rstrip('/')}/{canonicalize_name(name)}/"
    req = urllib.request.Request(url, headers={"Accept": JSON_ACCEPT})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)


def supported_tags(python: str, glibc_minor: int = GLIBC_MINORS[-1]) -> set[Tag]:
    """The wheel tags a Linux x86_64 CPython ``python`` node with glibc 2.``glibc_minor`` installs."""
    version = tuple(int(p) for p in python.split("."))
    platforms = [f"manylinux_2_{m}_x86_64" for m in reversed(GLIBC_MINORS) if m <= glibc_minor]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    platforms += ["linux_x86_64"]
    tags = set(cpython_tags(version, platforms=platforms))
    tags |= set(compatible_tags(version, platforms=platforms))
    return tags


def engine_wheel(page: dict, version: str, tags: set[Tag]) -> tuple[str, str]:
    """(upload time, manylinux platform) of the engine's own wheel a 3.12 x86_64 node takes."""
    for f in page["files"]:
        name = f["filename"]
        if not name.endswith(".whl") or f.get("yanked"):
            continue
        _, ver, _, wheel_tags = parse_wheel_filename(name)
        if str(ver) != version or not wheel_tags & tags:
            continue
        platform = next(t.platform for t in wheel_tags if t.platform != "any")
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", platform)
        if m is None:
            raise SystemExit(f"{name}: {platform} is not a manylinux x86_64 wheel")
        return f["upload-time"], f"x86_64-manylinux_{m[1]}_{m[2]}"
    raise SystemExit(f"no Linux x86_64 wheel of {page['name']} {version} for this Python")


def compile_requirements(
    uv: str, engine: str, version: str, cutoff: str, python: str, platform: str, index_url: str
) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        wanted = Path(tmp) / "engine.in"
        wanted.write_text(f"{engine}=={version}\n")
        argv = [
            uv, "pip", "compile", "--no-config", "--quiet",
            "--index-url", index_url,
            "--generate-hashes",
            "--exclude-newer", cutoff,
            "--python-version", python,
            "--python-platform", platform,
            "--no-header", "--annotation-style", "line",
            str(wanted),
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"uv could not resolve {engine} {version}:\n{done.stderr.strip()}")
    return done.stdout


_ENTRY = re.compile(r"^(?P<pin>\S+==\S+)(?P<rest>.*?)(?=^\S|\Z)", re.MULTILINE | re.DOTALL)


def keep_installable(
    text: str, index_url: str, tags: set[Tag], floor: set[Tag]
) -> tuple[str, list[str]]:
    """The requirements with only the hashes of files a node can install; and sdist-only names.

    ``floor`` is what the oldest node the engine's wheel runs on installs:
    where none of a package's wheels is for it, such a node builds the sdist,
    so its hash stays too.
    """
    entries = [(m["pin"], m["rest"]) for m in _ENTRY.finditer(text)]
    names = [pin.split("==")[0] for pin, _ in entries]
    with ThreadPoolExecutor(8) as pool:
        pages = dict(zip(names, pool.map(lambda n: index_page(index_url, n), names), strict=True))
    out, sdist_only = [], []
    for pin, rest in entries:
        name, version = pin.split("==")
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", rest)
        via = " ".join(re.findall(r"#\s*(via .*)", rest))
        files = {f["hashes"].get("sha256"): f["filename"] for f in pages[name]["files"]}
        wheels, sdists, oldest_ok = [], [], False
        for h in hashes:
            filename = files.get(h, "")
            if filename.endswith(".whl"):
                wheel_tags = parse_wheel_filename(filename)[3]
                if wheel_tags & tags:
                    wheels.append(h)
                    oldest_ok = oldest_ok or bool(wheel_tags & floor)
            elif filename:
                sdists.append(h)
        keep = wheels + ([] if oldest_ok else sdists)
        if not keep:
            raise SystemExit(f"{name} {version}: no file a Linux x86_64 node can install")
        if not wheels:
            sdist_only.append(name)
        lines = [f"{name}=={version}"] + [f"--hash=sha256:{h}" for h in sorted(keep)]
        out.append(" \\\n    ".join(lines) + (f"\n    # {via}" if via else ""))
    return "\n".join(out) + "\n", sdist_only


def cuda_build(pins: list[tuple[str, str]]) -> str:
    """The CUDA build of the torch resolved: its CUDA libraries' names say it."""
    names = {canonicalize_name(n) for n, _ in pins}
    if "nvidia-nccl-cu13" in names or "nvidia-cudnn-cu13" in names:
        return "cu130"
    if "nvidia-nccl-cu12" in names or "nvidia-cudnn-cu12" in names:
        return "cu12"  # which 12.x PyPI's torch is built for: say it with --build
    return ""


def write_index(engine: str, entry: dict) -> Path:
    path = RECIPES / "index.yaml"
    text = path.read_text() if path.exists() else ""
    head = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    data = yaml.safe_load(text) or {}
    old = data.get(engine) or {}
    if old.get("version") == entry["version"]:
        entry["requirements"] = {**old.get("requirements", {}), **entry["requirements"]}
    data[engine] = entry
    body = yaml.safe_dump(data, sort_keys=True, default_flow_style=False)
    path.write_text((head or "# Written by scripts/engine_recipe.py.\n") + body)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", choices=ENGINES)
    ap.add_argument("version")
    ap.add_argument("--build", default="", help="the CUDA build tag (default: torch's own)")
    ap.add_argument("--python", default="3.12")
    ap.add_argument("--index-url", default=PYPI)
    ap.add_argument("--uv", default=str(Path(sys.executable).parent / "uv"))
    args = ap.parse_args()

    tags = supported_tags(args.python)
    released, platform = engine_wheel(index_page(args.index_url, args.engine), args.version, tags)
    released = datetime.fromisoformat(released).strftime("%Y-%m-%dT%H:%M:%SZ")
    cutoff = exclude_newer(datetime.fromisoformat(released))
    print(f"{args.engine} {args.version}: released {released}, resolving as of {cutoff}")
    text = compile_requirements(
        args.uv, args.engine, args.version, cutoff, args.python, platform, args.index_url
    )
    floor = supported_tags(args.python, int(platform.rsplit("_", 1)[-1]))
    text, sdist_only = keep_installable(text, args.index_url, tags, floor)
    pins = check_requirements(text)
    if (args.engine, args.version) not in {(canonicalize_name(n), v) for n, v in pins}:
        raise SystemExit(f"the resolution does not pin {args.engine}=={args.version}")
    found = cuda_build(pins)
    build = args.build or found
    if not re.fullmatch(r"cu\d{3}", build) or (found and not build.startswith(found[:4])):
        raise SystemExit(
            f"torch resolved is a {found or 'CPU-only'} build; give --build for it (cu129, …)"
        )
    name = f"{args.engine}-{args.version}-{build}.txt"
    header = (
        f"# {args.engine} {args.version} ({build}) for CPython {args.python} on {platform}:\n"
        f"# resolved by uv from {args.index_url} as it stood at {cutoff}.\n"
        f"# Written by scripts/engine_recipe.py; regenerate rather than edit.\n"
    )
    (RECIPES / name).write_text(header + text)
    index = write_index(
        args.engine,
        {
            "version": args.version,
            "released": released,
            "python": args.python,
            "platform": platform,
            "requirements": {build: name},
        },
    )
    print(f"wrote {RECIPES / name} ({len(pins)} packages) and {index}")
    if sdist_only:
        print("built from source on a node (no wheel for it): " + ", ".join(sdist_only))


if __name__ == "__main__":
    main()
