"""llama.cpp's server from the xllamacpp wheel, as a ``llama-server`` program in the engines dir.

The program is a shell script that runs ``agentd.engines.xllama_server`` with
a Python. When engines run as the agent itself, that is the agent's own
Python, from its venv. When they run as another user (``llmgw-engine``, the
agent being root), the venv may lie where that user cannot go: a clone under
/root (0700) was the case (``llmgw-engine cannot reach …/llama-server``).
Then the xllamacpp package and the one module that drives it are copied
beside the script, shared with the engine user's group like every other
install, and run by the Python the venv was made from
(``sys._base_executable``), which must itself be within the user's reach:

    <engines>/llama.cpp/xllamacpp-<ver>-cpu/bin/llama-server
    <engines>/llama.cpp/xllamacpp-<ver>-cpu/python/xllamacpp/…           the package
    <engines>/llama.cpp/xllamacpp-<ver>-cpu/python/xllamacpp-<ver>.dist-info/
    <engines>/llama.cpp/xllamacpp-<ver>-cpu/python/xllama_server.py      the driver
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from grp import getgrgid
from importlib.metadata import distribution
from pathlib import Path

from agentd.provision.llamacpp import InstallError
from agentd.supervisor.access import R, X, blocked
from llmgw.fsutil import share_with_group, write_atomic

PACKAGE = "xllamacpp"
VARIANT = "cpu"
DRIVER = "agentd.engines.xllama_server"
# The driver's name in the copied tree: a module of its own, as it imports
# nothing of the agent (only the standard library and xllamacpp).
DRIVER_COPY = "xllama_server"
# Owner rights never count: the engine user owns nothing of the agent's Python.
NOBODY_UID = -1


def program_path(engines_dir: Path, version: str) -> Path:
    return engines_dir / "llama.cpp" / f"{PACKAGE}-{version}-{VARIANT}" / "bin" / "llama-server"


def venv_script() -> str:
    """The program for engines run as the agent: its own Python and packages."""
    return (
        "#!/bin/sh\n"
        "# llama.cpp's server from the xllamacpp wheel, with llama-server's flags.\n"
        f'exec {shlex.quote(sys.executable)} -m {DRIVER} "$@"\n'
    )


def copied_script(python: str, tree: Path) -> str:
    """The program for engines run as another user: the base Python and the copied tree."""
    return (
        "#!/bin/sh\n"
        "# llama.cpp's server from the xllamacpp wheel, with llama-server's flags: the\n"
        "# package and its driver copied here, where the engine user may read them.\n"
        f"PYTHONPATH={shlex.quote(str(tree))}\n"
        "export PYTHONPATH\n"
        f'exec {shlex.quote(python)} -s -m {DRIVER_COPY} "$@"\n'
    )


@dataclass(frozen=True)
class Interpreter:
    """A Python to run the copied tree with: its program and its standard library."""

    executable: str
    stdlib: str

    @classmethod
    def base(cls) -> Interpreter:
        """The Python this agent's venv was made from (itself when not in a venv)."""
        # A venv's sysconfig names the base's standard library already.
        executable = getattr(sys, "_base_executable", "") or sys.executable
        return cls(executable, sysconfig.get_paths()["stdlib"])


def _check_python(python: Interpreter, gid: int) -> None:
    """Refuse a Python (or its standard library) the engine group cannot reach."""
    for path, want in ((python.executable, R | X), (python.stdlib, R | X)):
        why = blocked(path, want, NOBODY_UID, {gid})
        if why is not None:
            try:
                group = getgrgid(gid).gr_name
            except KeyError:
                group = str(gid)
            raise InstallError(
                f"the engine user (group {group}) cannot reach {path}, of the Python that"
                f" would run xllamacpp's server: {why}",
                hint="install llmgw with a Python outside closed directories (python3 -m venv"
                " with the system's /usr/bin/python3), or run the agent as the user it is",
            )


def _copy_package(tree: Path) -> None:
    """The xllamacpp distribution's files (its RECORD) copied into ``tree``, whole or not at all."""
    dist = distribution(PACKAGE)
    partial = tree.with_name(f".{tree.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        for rel in dist.files or ():
            parts = Path(rel).parts
            # Scripts installed outside site-packages, and byte code made here.
            if ".." in parts or "__pycache__" in parts:
                continue
            dest = partial / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(dist.locate_file(rel), dest)
        os.replace(partial, tree)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def provide(
    engines_dir: Path, gid: int | None, python: Interpreter | None = None
) -> tuple[Path, bool]:
    """The ``llama-server`` program, written where missing or changed; whether it was.

    ``gid`` None: engines run as the agent itself, with its venv. Otherwise
    the package is copied for them, shared with ``gid``, and run by
    ``python`` (the venv's base; blocking: a copy of ~100 MB the first
    time, so call it through a thread).
    """
    version = distribution(PACKAGE).version
    program = program_path(engines_dir, version)
    if gid is None:
        script = venv_script()
    else:
        python = python or Interpreter.base()
        _check_python(python, gid)
        tree = program.parent.parent / "python"
        if not (tree / PACKAGE).is_dir():
            tree.parent.mkdir(parents=True, exist_ok=True)
            _copy_package(tree)
        spec = importlib.util.find_spec(DRIVER)
        if spec is None or spec.origin is None:
            raise InstallError(f"{DRIVER} is missing from this agent's install")
        driver = Path(spec.origin).read_text()
        copy = tree / f"{DRIVER_COPY}.py"
        if not copy.exists() or copy.read_text() != driver:
            write_atomic(copy, driver)
        script = copied_script(python.executable, tree)
    changed = not program.exists() or program.read_text() != script
    if changed:
        write_atomic(program, script, mode=0o755)
    if gid is not None:
        share_with_group(program.parent.parent, gid, top=engines_dir, tree=True)
    return program, changed
