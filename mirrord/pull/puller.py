"""Pulls: a Hugging Face repository at a pinned commit, or an engine archive by its sha256.

``hf:org/name[@rev]`` is pulled from the upstream (the internet's hub, or
another mirror: the same API). The revision is resolved to its commit once,
and everything after — the file list, every download — names that commit, so
a branch that moves during a pull cannot mix two commits' files. Every file
is checked against the digest the upstream's tree lists for it (an LFS
file's sha256, a small file's git blob id) before it is held.

Nothing fetched becomes a blob until the whole revision is in: verified files
wait in incoming/, and are moved in and the revision written in one stretch
with no await between, so a collection (gc) after some removal can never take
a blob a pull is about to name.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from llmgw.catalog.model import ModelSource, is_pickled
from llmgw.hub import HubClient, HubEntry
from llmgw.mirror.names import (
    COMMIT_RE,
    SHA256_RE,
    check_file_name,
    check_repo,
    check_revision,
)
from llmgw.mirror.wire import FileEntry, PullRequest, Revision
from mirrord.pull.download import BACKOFF_S, RETRIES, Downloader, Wanted
from mirrord.pull.errors import PullError, PullInvalid, PullRefused, UpstreamFailed
from mirrord.pull.progress import PullJob
from mirrord.pull.select import refuse_pickles, select_paths

log = logging.getLogger(__name__)

# Per connect and per read: a hub's CDN may pause this long mid-file.
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class HfSource:
    repo: str
    revision: str
    # One file named by the source (hf:org/name:file.gguf): pulled as an include.
    file: str = ""


def parse_hf_source(source: str) -> HfSource:
    """``hf:org/name[@rev][:file]``, each part checked; the revision "" is main."""
    if not source.startswith("hf:"):
        raise PullInvalid(
            f"{source!r} is not a source the mirror pulls",
            hint="give hf:org/name[@revision], or an https:// URL with --engine --sha256",
        )
    try:
        src = ModelSource.parse(source)
    except ValueError as e:
        raise PullInvalid(str(e), hint="write hf:org/name[@revision]") from e
    return HfSource(
        repo=check_repo(src.location),
        revision=check_revision(src.revision or "main"),
        file=src.file,
    )


def _shown_url(url: str) -> str:
    """A URL without its query, credentials or fragment: what is kept and logged."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def pull_key(req: PullRequest) -> str:
    """What makes two pull requests the same pull (checked, so also a validation)."""
    if req.kind == "engine":
        name, sha = _check_engine(req)
        return f"engine:{name}@{sha}"
    if req.kind == "wheel":
        raise PullRefused(
            "wheels are added by upload, not pulled",
            hint="add them from a wheelhouse: llmgw ctl mirror add DIR --wheels",
        )
    src = parse_hf_source(req.source)
    include = ",".join(sorted({*req.include, *([src.file] if src.file else [])}))
    return f"model:{src.repo}@{src.revision}[{include}]<{req.upstream}>"


def _check_engine(req: PullRequest) -> tuple[str, str]:
    parts = urlsplit(req.source)
    if parts.scheme != "https" or not parts.hostname:
        raise PullInvalid(
            f"{req.source!r}: an engine archive is pulled from an https:// URL",
            hint="give the release archive's https:// URL and its --sha256",
        )
    if not SHA256_RE.fullmatch(req.sha256 or ""):
        raise PullInvalid(
            f"{req.source}: an engine archive needs its sha256 (64 hex digits)",
            hint="copy it from the release's checksums and give --sha256",
        )
    name = check_file_name(parts.path.rstrip("/").rsplit("/", 1)[-1])
    return name, req.sha256


@dataclass(frozen=True)
class _Plan:
    """What a model pull fetches, worked out before its first byte."""

    hub: HubClient
    repo: str
    commit: str
    entries: dict[str, HubEntry]
    paths: list[str]
    wanted: list[Wanted]
    # Small files' git blob id -> sha256 of the blobs held when the pull began.
    known: dict[str, str]
    token: str


class Puller:
    """Pulls into ``store`` from ``upstream`` (or the one a request names)."""

    def __init__(
        self,
        store,
        *,
        upstream: str = "",
        upstream_token: str = "",
        client: httpx.AsyncClient | None = None,
        retries: int = RETRIES,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self.store = store
        self.upstream = upstream.rstrip("/")
        self.upstream_token = upstream_token
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(
            follow_redirects=True, timeout=httpx.Timeout(TIMEOUT_S)
        )
        self.downloader = Downloader(
            self.client, store.incoming_dir, retries=retries, backoff_s=backoff_s
        )
        # Bytes the running pulls were let fetch and have not put yet: the quota
        # counts them, or two adds that each fit would together pass it.
        self._reserved_bytes = 0

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.aclose()

    async def pull(
        self,
        req: PullRequest,
        job: PullJob,
        *,
        refs: list[str] | None = None,
        added_unix: float | None = None,
    ) -> Revision:
        """Pull what ``req`` names; the held revision. ``refs``/``added_unix``: a peer's."""
        if req.kind == "engine":
            return await self._pull_engine(req, job)
        pull_key(req)
        return await self._pull_model(req, job, refs, added_unix)

    # -- a Hugging Face repository ---------------------------------------------------

    def _upstream_for(self, req: PullRequest) -> tuple[str, str]:
        if req.upstream:
            return req.upstream.rstrip("/"), req.upstream_token
        if not self.upstream:
            raise UpstreamFailed(
                "this mirror has no upstream to pull from",
                hint="set upstream in mirror.yaml, or upload the files: "
                "llmgw ctl mirror add DIR --as org/name",
            )
        return self.upstream, self.upstream_token

    async def _pull_model(self, req, job: PullJob, refs, added_unix) -> Revision:
        src = parse_hf_source(req.source)
        include = [*([src.file] if src.file else []), *req.include]
        base, token = self._upstream_for(req)
        job.update(state="resolving", repo=src.repo)
        hub = HubClient(base, token=token, client=self.client)
        commit = await hub.resolve(src.repo, src.revision)
        if refs is None:
            refs = [] if COMMIT_RE.fullmatch(src.revision) else [src.revision]
        job.update(commit=commit)
        where = f"{src.repo}@{commit[:12]}"
        entries = {e.path: e for e in await hub.list_files(src.repo, commit)}
        paths = select_paths(sorted(entries), include)
        if not paths:
            raise PullInvalid(
                f"{where} has no file the add keeps"
                + (f" (include {', '.join(include)})" if include else ""),
                hint="list its files on the hub and give --include globs that match some",
            )
        refuse_pickles(paths, allow_pickle=req.allow_pickle, where=where)

        held = self.store.get("model", src.repo, commit)
        if held is not None:
            return self._held_again(held, paths, refs, job, where)

        known = self._known_small()
        wanted = [self._wanted(hub, src.repo, commit, entries[p], where) for p in paths]
        # The quota is asked before the first byte: a refused add costs the upstream nothing.
        unheld = {w.key: w.size or 0 for w in wanted if not self._held_sha(w, known)}
        plan = _Plan(hub, src.repo, commit, entries, paths, wanted, known, token)
        with self._room(sum(unheld.values())):
            stored = await self._fetch_model(plan, req, job, refs, added_unix)
        log.info("pulled %s (%d files) from %s", where, len(paths), hub.host)
        return stored

    async def _fetch_model(self, plan: _Plan, req, job: PullJob, refs, added_unix) -> Revision:
        entries, paths, wanted, known = plan.entries, plan.paths, plan.wanted, plan.known
        token = plan.token
        job.update(
            state="fetching",
            files_total=len(wanted),
            bytes_total=sum(entries[p].size for p in paths),
        )
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        files: dict[str, FileEntry] = {}
        for w, path in zip(wanted, paths, strict=True):
            entry = entries[path]
            job.update(file=path)
            sha = self._held_sha(w, known)
            if sha:
                job.add_bytes(entry.size)
            else:
                _, sha = await self.downloader.fetch(
                    w,
                    headers=headers,
                    on_bytes=job.add_bytes,
                    held=lambda w=w: self._held_sha(w, self._known_small()),
                )
            files[path] = FileEntry(
                path=path,
                size=entry.size,
                sha256=sha,
                git_oid="" if entry.is_lfs else entry.blob_id,
                lfs=entry.is_lfs,
                pickle=is_pickled(path),
            )
            job.file_done()
        rev = Revision(
            kind="model",
            repo=plan.repo,
            commit=plan.commit,
            files=list(files.values()),
            source=f"hf:{plan.repo}@{plan.commit}",
            allow_pickle=req.allow_pickle,
        )
        keys = {path: w.key for w, path in zip(wanted, paths, strict=True)}
        stored = await self._hold(rev, keys, wanted, headers, refs, added_unix)
        job.update(file="", revision=stored.model_copy(update={"files": None}))
        return stored

    @contextlib.contextmanager
    def _room(self, new_bytes: int) -> Iterator[None]:
        """Refuse an add that does not fit beside the running ones; hold its room while it runs."""
        if new_bytes > 0:
            self.store.check_room(new_bytes + self._reserved_bytes)
        self._reserved_bytes += new_bytes
        try:
            yield
        finally:
            self._reserved_bytes -= new_bytes

    def _held_again(self, held: Revision, paths, refs, job: PullJob, where: str) -> Revision:
        have = {f.path for f in held.files or []}
        missing = [p for p in paths if p not in have]
        if missing:
            raise PullError(
                f"{where} is held already without {', '.join(missing[:3])}"
                + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
                + ": a held revision never changes",
                hint=f"remove it (llmgw ctl mirror rm {held.repo}@{held.commit}) and add it "
                "again with every --include it needs",
                code="conflict",
            )
        stored = self.store.put(held, refs=refs)
        total = sum(f.size for f in held.files or [] if f.path in set(paths))
        job.update(files_total=len(paths), files_done=len(paths), bytes_total=total)
        job.add_bytes(total)
        job.update(revision=stored.model_copy(update={"files": None}))
        return stored

    def _wanted(self, hub: HubClient, repo: str, commit: str, e: HubEntry, where) -> Wanted:
        url = hub.file_url(repo, commit, e.path)
        name = f"{repo}/{e.path}"
        if e.is_lfs:
            return Wanted(url, key=e.sha256, size=e.size, sha256=e.sha256, name=name)
        if COMMIT_RE.fullmatch(e.blob_id):
            return Wanted(url, key=e.blob_id, size=e.size, git_oid=e.blob_id, name=name)
        raise PullInvalid(
            f"{where}: the upstream lists {e.path} with no digest to check it against",
            hint="pull from a hub or mirror that lists each file's sha256 or git blob id",
        )

    def _known_small(self) -> dict[str, str]:
        """Small files' git blob id -> sha256, of every revision held: dedup before fetching."""
        return {
            f.git_oid: f.sha256
            for r in self.store.revisions("model")
            for f in r.files or []
            if f.git_oid
        }

    def _held_sha(self, w: Wanted, known: dict[str, str]) -> str:
        """The sha256 of the blob ``w`` is, if the store holds it already; else ""."""
        sha = w.sha256 or known.get(w.git_oid, "")
        return sha if sha and self.store.has_blob(sha) else ""

    async def _hold(self, rev: Revision, keys, wanted, headers, refs, added_unix) -> Revision:
        """Move the verified files in and write the revision, with no await in between."""
        by_key = {w.key: w for w in wanted}
        files = rev.files or []
        for _ in range(3):
            lost = [
                f
                for f in files
                if not self.store.has_blob(f.sha256)
                and not self.downloader.partial_path(keys[f.path]).exists()
            ]
            if not lost:
                for f in files:
                    if not self.store.has_blob(f.sha256):
                        self.store.adopt_blob(self.downloader.partial_path(keys[f.path]), f.sha256)
                return self.store.put(rev, refs=refs, added_unix=added_unix)
            # A blob held when the pull began was collected since (a removal): fetch it.
            for f in lost:
                await self.downloader.fetch(by_key[keys[f.path]], headers=headers)
        raise PullError(
            f"{rev.repo}@{rev.commit[:12]}: files kept being removed while it was pulled",
            hint="add it again once the removals are over",
        )

    # -- an engine archive ---------------------------------------------------------------

    async def _pull_engine(self, req: PullRequest, job: PullJob) -> Revision:
        name, sha = _check_engine(req)
        job.update(state="resolving", repo=name, commit=sha)
        held = self.store.get("engine", name, sha)
        if held is not None:
            job.update(revision=held.model_copy(update={"files": None}))
            return held
        shown = _shown_url(req.source)
        size = 0 if self.store.has_blob(sha) else await self._head_size(req.source)
        rev = Revision(
            kind="engine",
            repo=name,
            commit=sha,
            files=[FileEntry(path=name, size=size, sha256=sha)],
            source=shown,
        )
        job.update(state="fetching", file=name, files_total=1, bytes_total=size)
        stored = await self.pull_artifact(rev, req.source, on_bytes=job.add_bytes)
        job.file_done()
        job.update(file="", revision=stored.model_copy(update={"files": None}))
        log.info("pulled the engine archive %s from %s", name, shown)
        return stored

    async def pull_artifact(
        self,
        rev: Revision,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        added_unix: float | None = None,
        on_bytes=lambda n: None,
    ) -> Revision:
        """A wheel or engine archive (``rev``, one file) fetched from ``url``, checked, held.

        Peers call it with a peer's ``/blobs/sha256/{sha}`` and its revision as
        it is there (its ``added_unix`` kept). The size in ``rev`` (0: unknown)
        is asked of the quota before any byte; the real one after the last.
        """
        entry = (rev.files or [None])[0]
        if entry is None or not SHA256_RE.fullmatch(entry.sha256):
            raise PullInvalid(f"{rev.repo}: a wheel or engine archive is held by its sha256")
        sha = entry.sha256
        held = self.store.get(rev.kind, rev.repo, sha)
        if held is not None:
            return held
        with self._room(0 if self.store.has_blob(sha) else entry.size):
            want = Wanted(url, key=sha, sha256=sha, name=rev.repo)
            path, _ = await self.downloader.fetch(
                want,
                headers=headers,
                on_bytes=on_bytes,
                held=lambda: sha if self.store.has_blob(sha) else "",
            )
            if path is not None and not self.store.has_blob(sha):
                size = path.stat().st_size
                if not entry.size:  # unknown until now: asked once the bytes are in
                    self.store.check_room(size + self._reserved_bytes)
                self.store.adopt_blob(path, sha)
            size = self.store.blob_path(sha).stat().st_size
            files = [entry.model_copy(update={"size": size, "path": entry.path or rev.repo})]
            stored = self.store.put(rev.model_copy(update={"files": files}), added_unix=added_unix)
        log.info("holding the %s %s from %s", rev.kind, rev.repo, _shown_url(url))
        return stored

    async def _head_size(self, url: str) -> int:
        """The archive's size as a HEAD gives it (0 unknown): for the quota, before any byte."""
        try:
            resp = await self.client.head(url, headers={"Accept-Encoding": "identity"})
        except httpx.TransportError:
            return 0
        n = resp.headers.get("content-length", "")
        return int(n) if resp.status_code == 200 and n.isdigit() else 0
