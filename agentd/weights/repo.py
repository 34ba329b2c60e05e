"""A whole Hugging Face repository at one commit, fetched file by file into a shared cache.

    <cache>/hf/<org>/<repo>/<commit>/<files…>             what an engine loads (its model path)
    <cache>/hf/<org>/<repo>/<commit>/.llmgw-files.json    the files checked so far: size, sha256/git id
    <cache>/hf/<org>/<repo>/<commit>/.llmgw-complete.json every file there and checked

Every replica of every model naming that repository at that commit shares the
directory. The commit is listed by the first place (sources.py: a mirror of
the cluster, or the hub) that holds it, and each file fetched from the places
in order: one cut on a mirror is finished from the next at the byte reached. Each file is checked against what the hub's tree lists for the
commit: an LFS file's sha256 (``lfs.oid``, the resolve's X-Linked-Etag), a
small file's git blob id and size. A file that fails its check is fetched once
more from its first byte, then refused. A commit is immutable, so once a
directory is complete, a replica starts from it without asking the hub.

Pickle files (.bin, .pt, ...) are skipped unless the model allows them, and so
are other frameworks' weights (ONNX, TensorFlow, Flax, GGUF): the engines that
load a repository read its safetensors.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from agentd.weights.download import Downloader, Expect, ProgressCallback, read_json
from agentd.weights.errors import PickleRefused, WeightsError, check_name, check_rel_path
from agentd.weights.sources import HfPlaces
from llmgw.catalog.model import PICKLE_HINT, ModelSource, is_pickled
from llmgw.fsutil import write_atomic
from llmgw.hub import COMMIT_RE, HubEntry

log = logging.getLogger(__name__)

CHECKED_FILE = ".llmgw-files.json"
COMPLETE_FILE = ".llmgw-complete.json"

# Weights for other frameworks than the engines that load a repository here.
OTHER_FORMATS = (
    ".gguf",
    ".onnx",
    ".onnx_data",
    ".msgpack",
    ".h5",
    ".tflite",
    ".ot",
    ".mlmodel",
    ".npz",
)


@dataclass(frozen=True)
class RepoPlan:
    """The files of a commit a node fetches, and those it leaves."""

    fetch: list[HubEntry]
    skipped: list[str]

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.fetch)


def choose_files(repo: str, files: list[HubEntry], allow_pickle: bool) -> RepoPlan:
    """What of a repository's files to fetch; refused where it holds no weights to serve."""
    fetch, skipped = [], []
    for f in files:
        name = f.path.lower()
        if (is_pickled(name) and not allow_pickle) or name.endswith(OTHER_FORMATS):
            skipped.append(f.path)
        else:
            fetch.append(f)
    names = [f.path for f in fetch]
    if not any(n.endswith(".safetensors") for n in names):
        pickles = [f.path for f in files if is_pickled(f.path)]
        if pickles and not allow_pickle:
            raise PickleRefused(
                f"{repo} holds its weights only in a pickle format ({pickles[0]}, …), "
                "which runs code when an engine loads it; it is refused",
                hint=f"use a safetensors repository of the model, or {PICKLE_HINT}",
            )
        if not pickles:
            raise WeightsError(
                f"{repo} holds no safetensors weights",
                hint="name one GGUF file of it (hf:org/repo:file.gguf), or another repository",
            )
    if "config.json" not in names:
        raise WeightsError(
            f"{repo} has no config.json: it is not a model an engine can load whole",
            hint="name one GGUF file of it (hf:org/repo:file.gguf), or another repository",
        )
    return RepoPlan(fetch=fetch, skipped=skipped)


class RepoFetcher:
    """Fetches whole repositories into ``<cache>/hf/``."""

    def __init__(self, cache_dir: Path, downloader: Downloader) -> None:
        self.root = Path(cache_dir) / "hf"
        self._downloader = downloader
        self._locks: dict[Path, asyncio.Lock] = {}

    def commit_dir(self, repo: str, commit: str) -> Path:
        org, name = repo.split("/")
        return (
            self.root
            / check_name(org, "the organisation")
            / check_name(name, "the repository")
            / commit
        )

    async def ensure(
        self,
        source: ModelSource,
        places: HfPlaces,
        *,
        allow_pickle: bool,
        on_progress: ProgressCallback | None = None,
        on_origin: Callable[[str], None] | None = None,
        client: httpx.AsyncClient | None = None,
        retries: int = 2,
        retry_backoff_s: float = 0.5,
    ) -> tuple[Path, int, bool]:
        """(the commit's directory, its bytes, whether anything was downloaded).

        The commit is listed by the first place that holds it; each file then
        comes from the places in order, resumed on the next where one fails.
        """
        repo = source.location
        for part in repo.split("/"):
            check_name(part, "the Hugging Face name part")
        revision = source.revision or "main"
        commit = revision if COMMIT_RE.fullmatch(revision) else ""

        async def ask(what: str, question):
            return await places.ask(
                what, question, client=client, retries=retries, backoff_s=retry_backoff_s
            )

        if commit:
            done = self._complete(self.commit_dir(repo, commit), allow_pickle)
            if done is not None:
                return done
        else:
            # A source that was never pinned (added before pinning, or by hand).
            commit = await ask(f"hf:{repo}@{revision}", lambda hub: hub.resolve(repo, revision))
        dest = self.commit_dir(repo, commit)
        lock = self._locks.setdefault(dest, asyncio.Lock())
        async with lock:
            done = self._complete(dest, allow_pickle)
            if done is not None:
                return done
            files = await ask(f"hf:{repo}@{commit}", lambda hub: hub.list_files(repo, commit))
            return await self._fetch(
                repo, commit, dest, files, places, allow_pickle, on_progress, on_origin
            )

    def _complete(self, dest: Path, allow_pickle: bool) -> tuple[Path, int, bool] | None:
        """The directory if it was completed and its files are still all there."""
        rec = read_json(dest / COMPLETE_FILE)
        if not rec or (rec.get("allow_pickle") and not allow_pickle):
            return None
        files = rec.get("files", {})
        for path, size in files.items():
            p = dest / path
            if not p.is_file() or p.stat().st_size != size:
                return None
        return dest, sum(files.values()), False

    async def _fetch(
        self,
        repo: str,
        commit: str,
        dest: Path,
        files: list[HubEntry],
        places: HfPlaces,
        allow_pickle: bool,
        on_progress: ProgressCallback | None,
        on_origin: Callable[[str], None] | None,
    ) -> tuple[Path, int, bool]:
        plan = choose_files(repo, files, allow_pickle)
        for f in plan.fetch:
            check_rel_path(f.path, "the file name")
        if plan.skipped:
            log.info("%s@%s: leaving %s", repo, commit[:12], ", ".join(plan.skipped))
        checked_path = dest / CHECKED_FILE
        dest.mkdir(parents=True, exist_ok=True)
        checked: dict = read_json(checked_path) or {}
        total = plan.total_bytes
        done_before = 0
        downloaded = False
        if on_progress:
            on_progress(0, total)
        for f in plan.fetch:
            target = dest / f.path
            want = {"size": f.size, "sha256": f.sha256, "git_oid": "" if f.sha256 else f.blob_id}
            if checked.get(f.path) == want and target.is_file() and target.stat().st_size == f.size:
                done_before += f.size
                continue
            base = done_before

            def progress(done: int, _total: int, base: int = base) -> None:
                if on_progress:
                    on_progress(base + done, total)

            await self._downloader.fetch(
                places.origins(repo, commit, f.path),
                target,
                source=f"hf:{repo}@{commit}:{f.path}",
                expect=Expect(
                    sha256=f.sha256, git_oid=want["git_oid"], size=f.size, who="the hub lists"
                ),
                on_progress=progress,
                fetch_again_on_mismatch=True,
                on_origin=(lambda o: on_origin(o.label)) if on_origin else None,
                on_failed=places.demote,
            )
            downloaded = True
            checked[f.path] = want
            write_atomic(checked_path, json.dumps(checked, sort_keys=True))
            done_before += f.size
        write_atomic(
            dest / COMPLETE_FILE,
            json.dumps(
                {
                    "repo": repo,
                    "commit": commit,
                    "files": {f.path: f.size for f in plan.fetch},
                    "skipped": plan.skipped,
                    "allow_pickle": allow_pickle,
                    "fetched_unix": int(time.time()),
                },
                sort_keys=True,
            ),
        )
        if on_progress:
            on_progress(total, total)
        return dest, total, downloaded
