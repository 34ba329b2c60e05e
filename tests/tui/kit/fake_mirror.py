"""The fake admin server answering the Mirror* RPCs too, for ctl mirror and Mirror screen tests.

Real grpclib and the real token check (tests/tui/kit/fake_admin.py); what the
cluster's mirrors hold is lists here, changed the way gatewayd's answers
would show it: an add streams MirrorProgress (queued, fetching at half,
done with the revision) and, with ``gate`` set, waits on it at half so a
test sees the progress live; a source with "pickle" fails as a pull refused
by the mirror does; one with "quota" is refused with RESOURCE_EXHAUSTED, as
gatewayd refuses an add over the quota. Removals and peers change the lists.
The same commands against a real gatewayd and mirror: the parity test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from proto.llmgw.v1 import (
    ListMirrorsReply,
    ListMirrorsRequest,
    MirrorAddRequest,
    MirrorDuReply,
    MirrorDuRequest,
    MirrorFileView,
    MirrorPeerRequest,
    MirrorPeersReply,
    MirrorPeersRequest,
    MirrorPeerView,
    MirrorProgress,
    MirrorPullView,
    MirrorRemoveReply,
    MirrorRemoveRequest,
    MirrorRepoRequest,
    MirrorRepoView,
    MirrorRevisionView,
    MirrorView,
    StatusReply,
    StatusRequest,
)
from tests.tui.kit.fake_admin import FakeAdminService

MIRROR_A = "http://127.0.0.1:7080"
MIRROR_B = "http://127.0.0.1:7081"
GEMMA = "google/gemma-3-270m-gguf"
GEMMA_COMMIT = "a" * 40
TINY = "tiny/safetensors"
TINY_COMMIT = "b" * 40
PULLED_BYTES = 253_000_000
PICKLE_ERROR = (
    "tiny/pickled holds pickle files (pytorch_model.bin), refused: mirror the safetensors"
    " files only (--include '*.safetensors'), or add --allow-pickle if it was checked"
)
QUOTA_ERROR = (
    "the add needs 9.00 GB and the quota leaves 1.20 GB: remove "
    "google/gemma-3-270m-gguf@aaaaaaaaaaaa (253 MB) first (llmgw ctl mirror rm)"
)


def revision(
    repo: str, commit: str, size: int, *, refs=("main",), added="2026-09-01T12:00:00+00:00"
) -> MirrorRevisionView:
    return MirrorRevisionView(
        kind="model",
        repo=repo,
        commit=commit,
        refs=list(refs),
        size_bytes=size,
        files=2,
        added_at=added,
        source=f"hf:{repo}@main via https://huggingface.co",
    )


class FakeMirrorService(FakeAdminService):
    def __init__(self) -> None:
        super().__init__()
        self.mirrors = [
            MirrorView(
                url=MIRROR_A,
                state="up",
                version="0.1.0",
                mirror_id="m-a",
                checked_at="2026-09-01T13:00:00+00:00",
                used_bytes=1_200_000_000,
                max_bytes=10_000_000_000,
                free_disk_bytes=40_000_000_000,
                revisions=2,
            ),
            MirrorView(
                url=MIRROR_B,
                state="down",
                reason="connection refused",
                checked_at="2026-09-01T13:00:00+00:00",
            ),
        ]
        self.revisions = [
            revision(TINY, TINY_COMMIT, 947_000_000, added="2026-09-01T12:30:00+00:00"),
            revision(GEMMA, GEMMA_COMMIT, 253_000_000),
        ]
        self.peers = [
            MirrorPeerView(
                url=MIRROR_B,
                state="behind",
                lag_s=95.0,
                behind=2,
                last_sync_at="2026-09-01T12:58:25+00:00",
            )
        ]
        self.pulls: list[MirrorPullView] = []
        # Each add as it came (what the command or the dialog sent).
        self.adds: list[MirrorAddRequest] = []
        self.removes: list[MirrorRemoveRequest] = []
        # Set: an add waits at half until it is set (the test watches it live).
        self.gate: asyncio.Event | None = None
        self.at_half = asyncio.Event()

    def _served_by(self) -> str:
        return next((m.url for m in self.mirrors if m.state == "up"), "")

    def _unavailable(self) -> None:
        if not self._served_by():
            raise GRPCError(
                Status.UNAVAILABLE,
                "no mirror is up: "
                + ", ".join(f"{m.url} ({m.reason or m.state})" for m in self.mirrors),
            )

    async def status(self, message: StatusRequest) -> StatusReply:
        return StatusReply(cluster_name="fake", mirrors=self.mirrors)

    async def list_mirrors(self, message: ListMirrorsRequest) -> ListMirrorsReply:
        return ListMirrorsReply(
            mirrors=self.mirrors,
            served_by=self._served_by(),
            revisions=self.revisions if self._served_by() else [],
            pulls=self.pulls,
        )

    def _matching(self, repo: str, rev: str) -> list[MirrorRevisionView]:
        return [
            r
            for r in self.revisions
            if r.repo == repo and (not rev or r.commit.startswith(rev) or rev in r.refs)
        ]

    async def show_mirror_repo(self, message: MirrorRepoRequest) -> MirrorRepoView:
        self._unavailable()
        found = self._matching(message.repo, message.revision)
        if not found:
            raise GRPCError(
                Status.NOT_FOUND,
                f"the mirror holds no {message.repo}"
                + (f"@{message.revision}" if message.revision else "")
                + f"; add it: llmgw ctl mirror add hf:{message.repo}",
            )
        files = [
            MirrorFileView(path="config.json", size_bytes=1_000, sha256="c" * 64),
            MirrorFileView(
                path="model.safetensors",
                size_bytes=found[0].size_bytes - 1_000,
                sha256="d" * 64,
                lfs=True,
            ),
        ]
        return MirrorRepoView(
            repo=message.repo, served_by=self._served_by(), revisions=found, files=files
        )

    async def add_to_mirror(self, message: MirrorAddRequest) -> AsyncIterator[MirrorProgress]:
        self.adds.append(message)
        self._unavailable()
        if "quota" in message.source:
            raise GRPCError(Status.RESOURCE_EXHAUSTED, QUOTA_ERROR)
        repo = message.as_repo or message.source.removeprefix("hf:").partition("@")[0]
        pull = MirrorPullView(
            pull_id=f"pull-{len(self.adds)}",
            source=message.source,
            repo=repo,
            state="queued",
            started_at="2026-09-01T13:00:00+00:00",
        )
        self.pulls.append(pull)
        yield MirrorProgress(pull=pull)
        if message.detach:
            return
        pull.commit = "e" * 40
        if "pickle" in message.source and not message.allow_pickle:
            pull.state, pull.error = "failed", PICKLE_ERROR
            yield MirrorProgress(pull=pull)
            return
        pull.state, pull.file = "fetching", "model.safetensors"
        pull.bytes_total, pull.files_total = PULLED_BYTES, 2
        pull.bytes_done, pull.files_done = PULLED_BYTES // 2, 1
        pull.rate_bytes_s, pull.eta_s = 42_000_000.0, 3.0
        yield MirrorProgress(pull=pull)
        self.at_half.set()
        if self.gate is not None:
            await self.gate.wait()
        pull.state, pull.bytes_done, pull.files_done, pull.eta_s = "done", PULLED_BYTES, 2, 0
        held = revision(repo, pull.commit, PULLED_BYTES, added="2026-09-01T13:01:00+00:00")
        held.source = message.source
        self.revisions.insert(0, held)
        self.pulls.remove(pull)
        yield MirrorProgress(pull=pull, revision=held)

    async def remove_from_mirror(self, message: MirrorRemoveRequest) -> MirrorRemoveReply:
        self.removes.append(message)
        self._unavailable()
        gone = self._matching(message.repo, message.revision)
        if not gone:
            raise GRPCError(Status.NOT_FOUND, f"the mirror holds no {message.repo}")
        self.revisions = [r for r in self.revisions if r not in gone]
        return MirrorRemoveReply(removed=gone, freed_bytes=sum(r.size_bytes for r in gone))

    async def mirror_disk_usage(self, message: MirrorDuRequest) -> MirrorDuReply:
        self._unavailable()
        a = self.mirrors[0]
        return MirrorDuReply(
            served_by=a.url,
            used_bytes=a.used_bytes,
            max_bytes=a.max_bytes,
            free_disk_bytes=a.free_disk_bytes,
            unreferenced_bytes=12_000_000,
            revisions=sorted(self.revisions, key=lambda r: -r.size_bytes),
        )

    async def list_mirror_peers(self, message: MirrorPeersRequest) -> MirrorPeersReply:
        self._unavailable()
        return MirrorPeersReply(served_by=self._served_by(), peers=self.peers)

    async def add_mirror_peer(self, message: MirrorPeerRequest) -> MirrorPeersReply:
        self.peers.append(MirrorPeerView(url=message.url, state="unknown", lag_s=-1))
        return await self.list_mirror_peers(MirrorPeersRequest())

    async def remove_mirror_peer(self, message: MirrorPeerRequest) -> MirrorPeersReply:
        if not any(p.url == message.url for p in self.peers):
            raise GRPCError(Status.NOT_FOUND, f"{message.url} is not a peer")
        self.peers = [p for p in self.peers if p.url != message.url]
        return await self.list_mirror_peers(MirrorPeersRequest())
