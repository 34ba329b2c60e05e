"""Admin RPCs for the model mirror (llmgw ctl mirror …, the console's Mirror screen).

Each call goes to the first of the cluster's mirrors that answers
(gatewayd/mirrors/set.py), with the mirror's admin token. Adding a local
path is done here: gatewayd runs on the operator's machine (the admin port
is 127.0.0.1 only), reads the file or folder itself and uploads it, so
nothing but the path crosses the admin API. Each wheel's sha256, read here,
is pinned (llmgw/mirror/pins.py): node add installs a wheel from a mirror only
with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.mirrors.set import MirrorSet
from gatewayd.mirrors.views import (
    file_view,
    mirror_view,
    peer_view,
    pull_view,
    revision_view,
)
from llmgw.errors import LlmgwError
from llmgw.fsutil import sha256_file
from llmgw.mirror import wire
from llmgw.mirror.client import MirrorClient, MirrorError, MirrorUnreachable
from llmgw.mirror.names import NameRefused, check_repo
from proto.llmgw.v1 import (
    ListMirrorsReply,
    ListMirrorsRequest,
    MirrorAddRequest,
    MirrorDuReply,
    MirrorDuRequest,
    MirrorPeerRequest,
    MirrorPeersReply,
    MirrorPeersRequest,
    MirrorProgress,
    MirrorPullView,
    MirrorRemoveReply,
    MirrorRemoveRequest,
    MirrorRepoRequest,
    MirrorRepoView,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_HEX_RE = re.compile(r"[0-9a-f]+")

# An upload's progress is told at most this often (a 10 GB file is ten thousand chunks).
UPLOAD_PROGRESS_EVERY_S = 0.5

_STATUS = {
    "not_found": Status.NOT_FOUND,
    "invalid": Status.INVALID_ARGUMENT,
    "refused": Status.FAILED_PRECONDITION,
    "quota": Status.RESOURCE_EXHAUSTED,
    "conflict": Status.ALREADY_EXISTS,
    "unavailable": Status.UNAVAILABLE,
    # The mirror refused gatewayd's token: the cluster's settings, not the operator's login.
    "unauthorized": Status.FAILED_PRECONDITION,
    "forbidden": Status.FAILED_PRECONDITION,
}


def refusal(e: LlmgwError) -> GRPCError:
    """A mirror's (or a name check's) refusal as the admin API's status, hint included."""
    code = getattr(e, "code", "invalid" if isinstance(e, NameRefused) else "internal")
    text = e.message + (f" ({e.hint})" if e.hint else "")
    if code in ("unauthorized", "forbidden"):
        # The operator's login is fine: it is gatewayd's token the mirror turned down.
        text = (
            f"{getattr(e, 'url', '') or 'the mirror'} refused the control plane's token: "
            f"{e.message} (set mirror.admin_token_file and read_token_file in server.yaml "
            "to that mirror's tokens)"
        )
    return GRPCError(_STATUS.get(code, Status.INTERNAL), text)


def _kind_of_file(name: str) -> str:
    return "wheel" if name.endswith(".whl") else "engine"


class MirrorAdmin:
    """Mixed into AdminService."""

    _mirrors: MirrorSet | None

    def _set(self) -> MirrorSet:
        mirrors = self._mirrors
        if mirrors is None or not mirrors.enabled:
            raise GRPCError(
                Status.FAILED_PRECONDITION,
                "the cluster has no mirror (set mirror.urls in server.yaml; "
                "llmgw up --mirror runs one on this machine)",
            )
        return mirrors

    async def _on_mirror(self, fn: Callable[[MirrorClient], Awaitable[T]]) -> tuple[str, T]:
        try:
            return await self._set().call(fn)
        except (MirrorError, NameRefused) as e:
            raise refusal(e) from None

    # -- what the mirrors hold ----------------------------------------------------------

    async def list_mirrors(self, message: ListMirrorsRequest) -> ListMirrorsReply:
        if self._mirrors is None or not self._mirrors.enabled:
            # A cluster without a mirror is a fact to list, not a failure.
            return ListMirrorsReply()
        mirrors = self._set()
        # Asked now: an operator listing mirrors wants their state, not the last probe's.
        await mirrors.probe_once()
        reply = ListMirrorsReply(mirrors=[mirror_view(s) for s in mirrors.states()])

        async def held(m: MirrorClient) -> tuple[list[wire.Revision], list[wire.Pull]]:
            revisions = await m.revisions()
            try:
                pulls = await m.pulls()
            except MirrorUnreachable:
                raise
            except MirrorError as e:
                # Pulls need the admin token; what is held needs only the read one.
                log.warning("mirror %s would not list its pulls: %s", m.url, e.message)
                pulls = []
            return revisions, pulls

        try:
            served_by, (revisions, pulls) = await mirrors.call(held)
        except MirrorError as e:
            # The states say why; the list stays useful with every mirror down.
            log.info("no mirror listed what it holds: %s", e.message)
            return reply
        reply.served_by = served_by
        reply.revisions = [revision_view(r) for r in revisions]
        reply.pulls = [pull_view(p) for p in pulls]
        return reply

    async def show_mirror_repo(self, message: MirrorRepoRequest) -> MirrorRepoView:
        name, revision = message.repo, message.revision
        if "/" in name:
            try:
                check_repo(name)
            except NameRefused as e:
                raise refusal(e) from None
            served_by, revisions = await self._on_mirror(lambda m: m.repo(name))
        else:
            served_by, one = await self._on_mirror(lambda m: m.file(_kind_of_file(name), name))
            revisions = [one]
        if revision:
            revisions = [r for r in revisions if _names(r, revision)]
            if not revisions:
                raise GRPCError(
                    Status.NOT_FOUND,
                    f"{served_by} holds no revision {revision!r} of {name} "
                    f"(see: llmgw ctl mirror show {name})",
                )
        revisions.sort(key=lambda r: r.added_unix, reverse=True)
        files = (revisions[0].files or []) if revisions else []
        return MirrorRepoView(
            repo=name,
            served_by=served_by,
            revisions=[revision_view(r) for r in revisions],
            files=[file_view(f) for f in files],
        )

    async def mirror_disk_usage(self, message: MirrorDuRequest) -> MirrorDuReply:
        served_by, du = await self._on_mirror(lambda m: m.du())
        return MirrorDuReply(
            served_by=served_by,
            used_bytes=du.used_bytes,
            max_bytes=du.max_bytes,
            free_disk_bytes=du.free_disk_bytes,
            unreferenced_bytes=du.unreferenced_bytes,
            revisions=[revision_view(r) for r in du.revisions],
        )

    # -- changes ------------------------------------------------------------------------

    async def remove_from_mirror(self, message: MirrorRemoveRequest) -> MirrorRemoveReply:
        name, revision = message.repo, message.revision
        if "/" in name:
            _, removed = await self._on_mirror(lambda m: m.remove_repo(name, revision))
        else:
            _, removed = await self._on_mirror(lambda m: m.remove_file(_kind_of_file(name), name))
        return MirrorRemoveReply(
            removed=[revision_view(r) for r in removed.removed], freed_bytes=removed.freed_bytes
        )

    async def add_to_mirror(self, message: MirrorAddRequest) -> AsyncIterator[MirrorProgress]:
        source = message.source.strip()
        if source.startswith(("hf:", "https://")):
            async for progress in self._pull(message, source):
                yield progress
            return
        if source.startswith("http://"):
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"{source}: plain http is refused; give an https:// URL and its --sha256",
            )
        path = Path(source.removeprefix("file://"))
        if not path.is_absolute():
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"{source!r} is not an absolute path (gatewayd reads it on its own machine)",
            )
        if not path.exists():
            raise GRPCError(
                Status.NOT_FOUND, f"{path} does not exist on the control plane's machine"
            )
        async for progress in self._upload(message, path):
            yield progress

    async def _pull(self, message: MirrorAddRequest, source: str) -> AsyncIterator[MirrorProgress]:
        kind = message.kind or ("engine" if source.startswith("https://") else "model")
        if kind == "engine" and not message.sha256:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                "an engine archive is kept by its pinned sha256: give --sha256",
            )
        if kind == "wheel":
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                "wheels are added from a file or a folder of them on this machine",
            )
        req = wire.PullRequest(
            source=source,
            include=list(message.include),
            allow_pickle=message.allow_pickle,
            kind=kind,
            sha256=message.sha256,
        )
        served_by, pull = await self._on_mirror(lambda m: m.start_pull(req))
        log.info("mirror %s pulls %s (%s)", served_by, source, pull.pull_id)
        yield MirrorProgress(pull=pull_view(pull))
        if message.detach:
            return
        # Followed on the mirror that took it: another one knows nothing of this pull.
        # A failed pull ends the stream with its last view, the mirror's error in it.
        mirror = self._set().client(served_by)
        try:
            async for p in mirror.follow(pull.pull_id):
                yield MirrorProgress(
                    pull=pull_view(p), revision=revision_view(p.revision) if p.revision else None
                )
        except MirrorError as e:
            raise refusal(e) from None

    async def _upload(self, message: MirrorAddRequest, path: Path) -> AsyncIterator[MirrorProgress]:
        kind = message.kind or "model"
        if kind == "model" and not message.as_repo:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"say which repository {path.name} is kept under: --as org/name",
            )
        view = MirrorPullView(
            pull_id=f"upload-{int(time.time())}",
            source=str(path),
            repo=message.as_repo or path.name,
            state="fetching",
            started_at=_now_iso(),
        )
        changed = asyncio.Event()
        began = time.monotonic()

        def on_file(rel: str, done_all: int, total: int, files_done: int, files_total: int):
            view.file, view.bytes_done, view.bytes_total = rel, done_all, total
            view.files_done, view.files_total = files_done, files_total
            elapsed = time.monotonic() - began
            view.rate_bytes_s = done_all / elapsed if elapsed > 0 else 0.0
            left = total - done_all
            view.eta_s = left / view.rate_bytes_s if view.rate_bytes_s > 0 else 0.0
            changed.set()

        async def send(m: MirrorClient) -> list[wire.Revision]:
            return await _send_local(m, self._set(), message, path, kind, on_file)

        task = asyncio.create_task(self._on_mirror(send))
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=UPLOAD_PROGRESS_EVERY_S)
                if done:
                    break
                if changed.is_set():
                    changed.clear()
                    yield MirrorProgress(pull=copy.copy(view))
            _, revisions = task.result()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        view.state = "done"
        view.bytes_done = view.bytes_total
        view.files_done = view.files_total
        view.eta_s = 0.0
        for i, rev in enumerate(revisions):
            view.repo, view.commit = rev.repo, rev.commit
            last = i == len(revisions) - 1
            yield MirrorProgress(
                pull=copy.copy(view) if last else None,
                revision=revision_view(rev),
            )

    # -- peers --------------------------------------------------------------------------

    async def list_mirror_peers(self, message: MirrorPeersRequest) -> MirrorPeersReply:
        served_by, peers = await self._on_mirror(lambda m: m.peers())
        return MirrorPeersReply(served_by=served_by, peers=[peer_view(p) for p in peers])

    async def add_mirror_peer(self, message: MirrorPeerRequest) -> MirrorPeersReply:
        served_by, peers = await self._on_mirror(lambda m: m.add_peer(message.url))
        return MirrorPeersReply(served_by=served_by, peers=[peer_view(p) for p in peers])

    async def remove_mirror_peer(self, message: MirrorPeerRequest) -> MirrorPeersReply:
        served_by, peers = await self._on_mirror(lambda m: m.remove_peer(message.url))
        return MirrorPeersReply(served_by=served_by, peers=[peer_view(p) for p in peers])


def _names(r: wire.Revision, revision: str) -> bool:
    """Whether ``revision`` (a commit, its first digits, or a ref) names ``r``."""
    if revision in r.refs or revision == r.commit:
        return True
    # A commit's first digits, as listings show them (12).
    return (
        len(revision) >= 7
        and _HEX_RE.fullmatch(revision) is not None
        and r.commit.startswith(revision)
    )


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def _send_local(
    m: MirrorClient,
    mirrors: MirrorSet,
    message: MirrorAddRequest,
    path: Path,
    kind: str,
    on_file: Callable[[str, int, int, int, int], None],
) -> list[wire.Revision]:
    """A local file or folder uploaded to mirror ``m``: what it holds now."""
    if kind == "model":

        def progress(rel: str, _done: int, done_all: int, total: int) -> None:
            on_file(rel, done_all, total, 0, 0)

        rev = await m.upload_dir(
            path, message.as_repo, allow_pickle=message.allow_pickle, on_progress=progress
        )
        return [rev]
    if kind == "wheel":
        wheels = [path] if path.is_file() else sorted(path.glob("*.whl"))
        if not wheels or wheels[0].suffix != ".whl":
            raise MirrorError(
                f"{path} is not a wheel or a folder of wheels (*.whl)",
                hint="build them with: pip wheel --wheel-dir DIR PACKAGE",
                code="invalid",
            )
        total = sum(w.stat().st_size for w in wheels)
        out, base = [], 0
        pinned: dict[str, str] = {}
        try:
            for i, wheel in enumerate(wheels):

                def progress(done: int, _size: int, wheel=wheel, base=base, i=i) -> None:
                    on_file(wheel.name, base + done, total, i, len(wheels))

                # Hashed here, on the control plane: the mirror takes the bytes only if
                # they are these, and node add installs the wheel only with this sha256.
                digest = await asyncio.to_thread(sha256_file, wheel)
                out.append(
                    await m.put_artifact("wheel", wheel, sha256=digest, on_progress=progress)
                )
                pinned[wheel.name] = digest
                base += wheel.stat().st_size
        finally:
            # What went up is pinned even when a later wheel fails.
            await mirrors.pin_wheels(pinned)
        return out
    if kind == "engine":
        if not path.is_file():
            raise MirrorError(f"{path} is not an archive file", code="invalid")
        if not message.sha256:
            raise MirrorError(
                "an engine archive is kept by its pinned sha256: give --sha256", code="invalid"
            )

        def progress(done: int, size: int) -> None:
            on_file(path.name, done, size, 0, 1)

        return [await m.put_artifact("engine", path, sha256=message.sha256, on_progress=progress)]
    raise MirrorError(
        f"{kind!r} is not a kind the mirror holds (model, wheel or engine)", code="invalid"
    )
