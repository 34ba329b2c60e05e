"""Model weights on a node: fetched once into the cache, checked, and found again.

    <cache>/<model>/<file>                 one file (https:, hf:org/repo:file), complete
    <cache>/<model>/.<file>.json           what was fetched: source, size, sha256
    <cache>/<model>/.<file>.partial        a download in progress (resumed with Range)
    <cache>/hf/<org>/<repo>/<commit>/…     a whole repository (hf:org/repo), shared (repo.py)

``file`` sources are used where they are, never copied, once their format is
checked (a GGUF file, a safetensors file, or a model directory). ``https`` and
``hf`` sources are streamed to a partial file, hashed on the way, and renamed
into place only when whole and, where the model pins one, matching its sha256.

Weights in a Python pickle format (.bin, .pt, .pth, .ckpt, ...) run whatever
code they hold when an engine loads them: a poisoned upload on a model hub is
a program run on the node. They are refused before a byte is fetched unless
the model says ``allow_pickle: true``, on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from agentd.weights.download import (
    CONNECT_READ_TIMEOUT_S,
    PROGRESS_EVERY_S,
    RETRIES,
    RETRY_BACKOFF_S,
    Downloader,
    Expect,
    ProgressCallback,
    read_json,
)
from agentd.weights.errors import (
    ChecksumMismatch,
    PickleRefused,
    WeightsError,
    WeightsMissing,
    check_name,
    redact,
)
from agentd.weights.repo import RepoFetcher
from agentd.weights.sources import HfPlaces, Origin, resolve_url
from llmgw.catalog.model import PICKLE_HINT, Model, ModelSource, is_pickled
from llmgw.fsutil import sha256_file, share_with_group, write_atomic
from llmgw.hub import HF_BASE_URL
from llmgw.modelplan.formats import NotWeights, check_local_weights

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Weights:
    """Weights ready for an engine."""

    path: Path
    size_bytes: int
    # "" for a directory, and for a local file with no pinned sha256.
    sha256: str
    # True when this call downloaded bytes; False for a cache hit or a local source.
    downloaded: bool


def hf_url(source: ModelSource, base_url: str = HF_BASE_URL) -> str:
    """The download URL of an hf: file source, on huggingface.co or a mirror laid out like it."""
    for part in [*source.location.split("/"), *source.file.split("/")]:
        check_name(part, "the Hugging Face name part")
    return resolve_url(base_url, source.location, source.revision, source.file)


def refuse_pickles(source: ModelSource, allow_pickle: bool) -> None:
    """Raise PickleRefused for a pickle source, unless the model allows it."""
    name = source.file if source.kind == "hf" else source.location
    if allow_pickle or not is_pickled(name):
        return
    shown = redact(name) if source.kind == "https" else name
    raise PickleRefused(
        f"{shown} is in a pickle format, which runs code when an engine loads it; it is refused",
        hint=f"use the model's safetensors or GGUF, or {PICKLE_HINT}",
    )


class WeightsFetcher:
    """Fetches and finds model weights in one node's cache directory.

    ``hf_base_url`` is the hub (agent.yaml's hub_url); a StartShard's
    mirror_urls come first for its shard, and the hub then only where the
    model allows the internet (sources.py).
    """

    def __init__(
        self,
        cache_dir: Path,
        *,
        hf_base_url: str = HF_BASE_URL,
        client: httpx.AsyncClient | None = None,
        retries: int = RETRIES,
        retry_backoff_s: float = RETRY_BACKOFF_S,
        progress_every_s: float = PROGRESS_EVERY_S,
        share_gid: Callable[[], int | None] | None = None,
        timeout_s: float = CONNECT_READ_TIMEOUT_S,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.cache_dir = Path(cache_dir)
        # The engine user's group, asked at each fetch (the user may be made
        # after the agent starts); None: engines run as the agent itself and
        # the files stay as they are made.
        self.share_gid: Callable[[], int | None] = share_gid or (lambda: None)
        self.hf_base_url = hf_base_url or HF_BASE_URL
        self._client = client
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.progress_every_s = progress_every_s
        self._downloader = Downloader(
            client,
            retries=retries,
            retry_backoff_s=retry_backoff_s,
            progress_every_s=progress_every_s,
            timeout_s=timeout_s,
            verify=verify,
        )
        self.verify = verify
        self.timeout_s = timeout_s
        self.repos = RepoFetcher(self.cache_dir, self._downloader)
        # Two shards of one model on a node share one download.
        self._locks: dict[Path, asyncio.Lock] = {}

    async def ensure_model(
        self, model: Model, on_progress: ProgressCallback | None = None
    ) -> Weights:
        """The weights of a catalog model (at its pinned commit), fetched if not here yet."""
        return await self.ensure(
            model.name,
            model.fetch_source,
            sha256=model.sha256,
            allow_pickle=model.allow_pickle,
            on_progress=on_progress,
        )

    async def ensure(
        self,
        model: str,
        source: ModelSource | str,
        *,
        sha256: str = "",
        allow_pickle: bool = False,
        mirror_url: str = "",
        mirror_urls: Sequence[str] = (),
        mirror_token: str = "",
        allow_internet: bool = False,
        on_progress: ProgressCallback | None = None,
        on_origin: Callable[[str], None] | None = None,
    ) -> Weights:
        """The weights of ``model`` from ``source``, ready on this node.

        hf: sources come from ``mirror_urls`` in order (with ``mirror_token``
        as their Bearer token), a file cut on one resumed on the next, and
        from the hub only with ``allow_internet``; without mirrors from the
        hub, or the one ``mirror_url`` in its place. ``on_origin`` hears where
        the bytes come from, in words ("mirror 10.0.0.5:7080"). Raises a
        WeightsError subclass (or a HubError) in plain words.
        """
        if isinstance(source, str):
            try:
                source = ModelSource.parse(source)
            except ValueError as e:
                raise WeightsError(f"the weights source is not usable: {e}") from e
        check_name(model, "the model name")
        sha256 = sha256.lower()
        # Before anything touches the network or the disk.
        refuse_pickles(source, allow_pickle)
        if source.kind == "file":
            local = await self._local(model, Path(source.location), sha256, allow_pickle)
            if self.cache_dir.is_dir():
                # Engines are told the cache as their download dir, so it is
                # to be reachable even when this model's weights lie elsewhere.
                await asyncio.to_thread(self._share, self.cache_dir, False)
            return local
        places = HfPlaces.choose(
            hub_url=self.hf_base_url,
            mirror_urls=mirror_urls,
            mirror_token=mirror_token,
            allow_internet=allow_internet,
            mirror_url=mirror_url,
        )
        if source.is_repo:
            return await self._repo(source, sha256, allow_pickle, places, on_progress, on_origin)
        file = check_name(source.file_name, "the file name")
        if source.kind == "hf":
            for part in [*source.location.split("/"), *source.file.split("/")]:
                check_name(part, "the Hugging Face name part")
            origins: list[Origin] = places.origins(source.location, source.revision, source.file)
        else:
            origins = [Origin.plain(source.location)]
        dest = self.cache_dir / model / file
        lock = self._locks.setdefault(dest, asyncio.Lock())
        # Recorded on disk beside the file: a URL's query (tokens live there) is left out.
        key = redact(source.location) if source.kind == "https" else str(source)
        async with lock:
            got = self._cached(dest, key, sha256)
            if got is None:
                got = await self._download(
                    origins, dest, key, sha256, on_progress, on_origin, source.kind == "hf"
                )
            await asyncio.to_thread(self._share, dest, False)
            return got

    def _share(self, path: Path, tree: bool) -> None:
        """Let the engine user read fetched weights (and nobody else): 0640/0750, its group.

        Done at every use, not only after a download: a cache filled before
        the engine user existed, or for another one, is put right.
        """
        gid = self.share_gid()
        if gid is not None:
            share_with_group(path, gid, top=self.cache_dir, tree=tree)

    # --- whole repositories ----------------------------------------------------

    async def _repo(
        self,
        source: ModelSource,
        sha256: str,
        allow_pickle: bool,
        places: HfPlaces,
        on_progress: ProgressCallback | None,
        on_origin: Callable[[str], None] | None,
    ) -> Weights:
        if sha256:
            raise WeightsError(
                f"{source} is a whole repository; a sha256 pins one file",
                hint="remove sha256 from the model: each file is checked against the hub's own",
            )
        async with contextlib.AsyncExitStack() as stack:
            client = self._client
            if client is None and self.verify is not True:
                # The listing goes over the same TLS as the files (an HTTPS mirror).
                client = await stack.enter_async_context(
                    httpx.AsyncClient(
                        follow_redirects=True,
                        timeout=httpx.Timeout(self.timeout_s),
                        verify=self.verify,
                    )
                )
            path, size, downloaded = await self.repos.ensure(
                source,
                places,
                allow_pickle=allow_pickle,
                on_progress=on_progress,
                on_origin=on_origin,
                client=client,
                retries=self.retries,
                retry_backoff_s=self.retry_backoff_s,
            )
        await asyncio.to_thread(self._share, path, True)
        return Weights(path, size, "", downloaded=downloaded)

    # --- local sources --------------------------------------------------------

    async def _local(self, model: str, path: Path, sha256: str, allow_pickle: bool) -> Weights:
        if not path.exists():
            raise WeightsMissing(
                f"{path} does not exist on this node",
                hint="copy the weights there, or give an https: or hf: source",
            )
        if path.is_dir():
            if sha256:
                raise WeightsError(
                    f"{path} is a directory; a sha256 pins one file",
                    hint="remove sha256 from the model, or point it at the file",
                )
            if not allow_pickle:
                found = next((p for p in sorted(path.rglob("*")) if is_pickled(p.name)), None)
                if found is not None:
                    raise PickleRefused(
                        f"{path} holds {found.relative_to(path)}, in a pickle format, which runs "
                        "code when an engine loads it; the directory is refused",
                        hint=f"remove the pickle files, or {PICKLE_HINT}",
                    )
            self._check_format(path)
            return Weights(path, 0, "", downloaded=False)
        if not (allow_pickle and is_pickled(path.name)):
            self._check_format(path)
        size = path.stat().st_size
        if sha256:
            got = await self._local_sha(model, path)
            if got != sha256:
                raise ChecksumMismatch(
                    f"{path} has sha256 {got}, not the {sha256} the model pins",
                    hint="check the file, or correct the model's sha256",
                )
        return Weights(path, size, sha256, downloaded=False)

    @staticmethod
    def _check_format(path: Path) -> None:
        try:
            check_local_weights(path)
        except NotWeights as e:
            raise WeightsError(e.message, hint=e.hint) from e

    async def _local_sha(self, model: str, path: Path) -> str:
        """The sha256 of a local file, remembered while its size and mtime stay the same.

        Hashing 100 GB takes minutes; a restart should not pay that again.
        """
        st = path.stat()
        memo = self.cache_dir / model / ".local.json"
        key = {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        seen = read_json(memo)
        if seen and all(seen.get(k) == v for k, v in key.items()) and seen.get("sha256"):
            return seen["sha256"]
        digest = await asyncio.to_thread(sha256_file, path)
        write_atomic(memo, json.dumps({**key, "sha256": digest}))
        return digest

    # --- the cache of single files ---------------------------------------------

    @staticmethod
    def _record(dest: Path) -> Path:
        return dest.with_name(f".{dest.name}.json")

    def _cached(self, dest: Path, source: str, sha256: str) -> Weights | None:
        """The cached file if it is whole and what the model asks for, else None."""
        rec = read_json(self._record(dest))
        if not rec or rec.get("source") != source or not dest.is_file():
            return None
        if dest.stat().st_size != rec.get("size") or (sha256 and rec.get("sha256") != sha256):
            return None
        return Weights(dest, rec["size"], rec.get("sha256", ""), downloaded=False)

    async def _download(
        self,
        origins: list[Origin],
        dest: Path,
        source: str,
        sha256: str,
        on_progress: ProgressCallback | None,
        on_origin: Callable[[str], None] | None,
        hf: bool,
    ) -> Weights:
        total, digest = await self._downloader.fetch(
            origins,
            dest,
            source=source,
            # An hf: file the model pins no sha256 for is checked against its ETag
            # (its sha256 on the hub and every mirror): bytes joined across mirrors included.
            expect=Expect(sha256=sha256, etag_names_bytes=hf),
            on_progress=on_progress,
            on_origin=(lambda o: on_origin(o.label)) if on_origin else None,
        )
        write_atomic(
            self._record(dest),
            json.dumps(
                {
                    "source": source,
                    "size": total,
                    "sha256": digest,
                    "fetched_unix": int(time.time()),
                }
            ),
        )
        return Weights(dest, total, digest, downloaded=True)


__all__ = ["CONNECT_READ_TIMEOUT_S", "Weights", "WeightsFetcher", "hf_url", "refuse_pickles"]
