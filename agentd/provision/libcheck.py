"""What a binary needs from this machine's libraries, in plain words.

``ldd`` tells two kinds of trouble: a library that is not there at all
("libcudart.so.12 => not found") and one that is there but older than the
binary was built against ("version `GLIBCXX_3.4.30' not found (required by
…)"). ``parse_ldd`` turns both into problems an operator can act on —
"libstdc++.so.6 is too old (needs GLIBCXX_3.4.30)" — instead of the raw
lines. ``check_binary`` runs ldd on this machine.

ldd asks the dynamic loader to resolve the binary, so it is only run on a
binary whose archive already matched its pinned digest: the binary is run
for ``--version`` right after anyway.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from llmgw.aio import within

log = logging.getLogger(__name__)

# ldd resolves every library of a big binary in well under a second; a
# minute means something is wrong with the machine, not with the binary.
LDD_TIMEOUT_S = 60.0

_NOT_FOUND = re.compile(r"^\s*(?P<lib>\S+)\s+=>\s+not found\s*$")
_TOO_OLD = re.compile(
    r"(?P<path>[^\s:]+): version [`'‘](?P<version>[^`'’]+)[`'’] not found"
    r" \(required by (?P<by>[^)]+)\)"
)
_VERSION_PARTS = re.compile(r"^(?P<family>[A-Za-z_]+?)_?(?P<number>[0-9][0-9.]*)$")

# What to do about the libraries operators meet most often.
_HINTS = {
    "libstdc++.so.6": "this build needs a newer C++ runtime than the distribution has; "
    "take a build made for an older distribution or upgrade the OS",
    "libc.so.6": "this build needs a newer glibc than the distribution has; "
    "take a build made for an older distribution or upgrade the OS",
    "libcuda.so.1": "the NVIDIA driver is not installed (or not loaded) on this node",
    "libgomp.so.1": "install the OpenMP runtime (Debian/Ubuntu: apt-get install libgomp1)",
    "libvulkan.so.1": "install the Vulkan loader (Debian/Ubuntu: apt-get install libvulkan1)",
}


@dataclass(frozen=True)
class LibraryProblem:
    """One library a binary cannot load as it is on this machine."""

    library: str  # the file name, "libstdc++.so.6"
    missing: bool  # True: not there at all; False: there but too old
    needs: tuple[str, ...] = ()  # symbol versions it lacks, newest of each family
    required_by: tuple[str, ...] = field(default=(), compare=False)

    @property
    def words(self) -> str:
        if self.missing:
            return f"{self.library} is missing"
        return f"{self.library} is too old (needs {', '.join(self.needs)})"

    @property
    def hint(self) -> str:
        if self.library in _HINTS:
            return _HINTS[self.library]
        if self.library.startswith(("libcudart", "libcublas", "libcudnn", "libnccl")):
            return "this build needs the CUDA runtime, which this node lacks; take the cpu build"
        return ""


def parse_ldd(output: str) -> list[LibraryProblem]:
    """The problems in ldd's output (stdout and stderr together), missing ones first."""
    missing: dict[str, None] = {}
    old: dict[str, dict[str, str]] = {}  # library -> family -> newest version needed
    required: dict[str, dict[str, None]] = {}
    for line in output.splitlines():
        if m := _NOT_FOUND.match(line):
            missing[m["lib"]] = None
            continue
        for m in _TOO_OLD.finditer(line):
            lib = m["path"].rsplit("/", 1)[-1]
            family, number = _split_version(m["version"])
            wanted = old.setdefault(lib, {})
            have = wanted.get(family)
            if have is None or _number(number) > _number(_split_version(have)[1]):
                wanted[family] = m["version"]
            required.setdefault(lib, {})[m["by"].rsplit("/", 1)[-1]] = None
    problems = [LibraryProblem(lib, missing=True) for lib in missing]
    problems += [
        LibraryProblem(
            lib,
            missing=False,
            needs=tuple(versions.values()),
            required_by=tuple(required.get(lib, {})),
        )
        for lib, versions in old.items()
    ]
    return problems


def describe(problems: list[LibraryProblem]) -> str:
    """All the problems in one line: "libcudart.so.12 is missing; libstdc++.so.6 is too old (…)"."""
    return "; ".join(p.words for p in problems)


async def check_binary(binary: Path, env: Mapping[str, str] | None = None) -> list[LibraryProblem]:
    """Run ldd on ``binary`` with the environment it will run with; its problems, if any.

    A machine without ldd (not glibc) gets no problems from here: running the
    binary for ``--version`` still tells whether it loads.
    """
    try:
        proc = await asyncio.create_subprocess_exec(
            "ldd",
            str(binary),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(env) if env is not None else None,
        )
    except FileNotFoundError:
        log.info("no ldd on this machine; %s is judged by running it", binary)
        return []
    try:
        out, _ = await within(proc.communicate(), LDD_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        log.warning("ldd %s took over %.0f s; skipped", binary, LDD_TIMEOUT_S)
        return []
    # ldd exits non-zero for a static binary ("not a dynamic executable"),
    # which needs nothing: only the lines decide.
    return parse_ldd(out.decode(errors="replace"))


def _split_version(version: str) -> tuple[str, str]:
    m = _VERSION_PARTS.match(version)
    return (m["family"], m["number"]) if m else (version, "")


def _number(number: str) -> tuple[int, ...]:
    return tuple(int(p) for p in number.split(".") if p.isdigit())
