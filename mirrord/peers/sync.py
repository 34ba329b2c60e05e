"""PeerSync: this mirror kept in step with its peers, removals included; neither leads.

Every ``interval_s``, at once when a peer says it changed (POST /v1/notify:
``sync_now()``) and when a peer is added, each peer's ``GET /v1/state`` is
read and compared with this mirror's (plan.py): its newer tombstones are
applied, its live revisions not held here (and not removed here later) are
copied at their exact commit with their added time and refs (copy.py), its
refs followed where they name a newer revision. Peers are read side by side,
so one that is down or slow does not hold up the others; copies go one at a
time (the disk is shared, and two peers offering the same revision fetch it
once). After a change here the peers are told (``notify()``, best effort).

Peers read each other with the peer token (the cluster's read token unless
``peer_token_file`` says otherwise) as a Bearer token; an https peer's
certificate is checked against the cluster CA (mirror.yaml's tls.client_ca,
tls.py), unless the daemon gives an ``httpx.AsyncClient`` of its own (``client``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

import httpx
from pydantic import ValidationError

from llmgw.errors import LlmgwError
from llmgw.mirror.config import MirrorTls
from llmgw.mirror.wire import Peer, State
from mirrord.peers.copy import CopyRefused, PeerCopier
from mirrord.peers.plan import Copy, Key, key_of, plan_sync
from mirrord.peers.state import PeerBook
from mirrord.peers.tls import peer_client
from mirrord.store import MirrorStore

log = logging.getLogger(__name__)

# A peer's state is small (metadata only): one that takes longer is treated as down.
STATE_TIMEOUT_S = 15.0
# Per read while copying a file: a peer that stops sending for this long has gone.
COPY_READ_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 5.0
# A copy refused for its bytes (not the peer's digest) is tried again after this long,
# or when this mirror restarts: a spoilt 1 GB file is not fetched every interval.
REFUSED_RETRY_S = 3600.0


class PeerDown(LlmgwError):
    code = "unavailable"


class PeerSync:
    """Reads each peer's state and takes what it has that this mirror has not."""

    def __init__(
        self,
        store: MirrorStore,
        jobs: object | None = None,
        *,
        peers: list[str],
        token: str,
        interval_s: float = 30.0,
        data_dir: Path | None = None,
        client: httpx.AsyncClient | None = None,
        tls: MirrorTls | None = None,
    ) -> None:
        # ``jobs`` (PullJobs) is not used: a copy from a peer keeps the peer's added
        # time and refs and checks each file against the sha256 of the peer's
        # State, which a pull from a hub would set anew or not know.
        del jobs
        self.store = store
        self.token = token
        self.interval_s = interval_s
        self.book = PeerBook(peers, data_dir if data_dir is not None else store.data_dir)
        self._own_client = client is None
        self.client = client or peer_client(
            tls, httpx.Timeout(COPY_READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        )
        self.copier = PeerCopier(store, self.client)
        self._wake = asyncio.Event()
        self._pass_lock = asyncio.Lock()
        self._copy_lock = asyncio.Lock()
        self._notices: set[asyncio.Task[None]] = set()
        # (peer, revision) -> (monotonic time to try again, why it was refused).
        self._refused: dict[tuple[str, Key], tuple[float, str]] = {}
        # Passes finished so far, for whoever waits on the next one (wait_passes).
        self.passes = 0
        self._passed = asyncio.Condition()

    # -- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Sync every ``interval_s`` and whenever woken, until cancelled."""
        while True:
            self._wake.clear()
            try:
                await self.sync_once()
            except Exception:
                # A bug in one pass must not end the mirror's replication for good.
                log.exception(
                    "a sync with the peers failed; trying again in %.0f s", self.interval_s
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval_s):
                    await self._wake.wait()

    def sync_now(self) -> None:
        """Wake the loop: a peer told this mirror it changed."""
        self._wake.set()

    async def sync_once(self) -> None:
        """One pass over every peer, side by side; returns when all are done."""
        async with self._pass_lock:
            await asyncio.gather(*(self._sync_one(url) for url in self.book.urls()))
        async with self._passed:
            self.passes += 1
            self._passed.notify_all()

    async def wait_passes(self, count: int) -> None:
        """Return once ``count`` passes have finished since this mirror started."""
        async with self._passed:
            await self._passed.wait_for(lambda: self.passes >= count)

    # -- peers ---------------------------------------------------------------------

    def peers(self) -> list[Peer]:
        return self.book.wire()

    def add(self, url: str) -> list[Peer]:
        self.book.add(url)
        self.sync_now()
        return self.peers()

    def remove(self, url: str) -> list[Peer]:
        self.book.remove(url)
        return self.peers()

    # -- one peer ------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def _read_state(self, url: str) -> State:
        try:
            resp = await self.client.get(
                f"{url}/v1/state", headers=self._headers(), timeout=STATE_TIMEOUT_S
            )
        except httpx.HTTPError as e:
            raise PeerDown(f"cannot be reached: {e or type(e).__name__}") from e
        if resp.status_code in (401, 403):
            raise PeerDown(
                f"refused this mirror's token (HTTP {resp.status_code}): give both mirrors "
                "the same read token, or set peer_token_file to one it takes"
            )
        if resp.status_code != 200:
            raise PeerDown(f"answered HTTP {resp.status_code} for its state")
        try:
            return State.model_validate_json(resp.content)
        except ValidationError as e:
            raise PeerDown(f"its state is not a mirror's: {e.errors()[0]['msg']}") from e

    async def _sync_one(self, url: str) -> None:
        try:
            await self._sync_peer(url)
        except Exception as e:
            # One peer's surprise must not end the pass of the others.
            log.exception("syncing with peer %s failed", url)
            rec = self.book.get(url)
            if rec is not None:
                rec.read(max(rec.behind, 1), time.time(), f"the sync failed: {e}")

    async def _sync_peer(self, url: str) -> None:
        rec = self.book.get(url)
        if rec is None:  # removed while the pass began
            return
        read_unix = time.time()
        try:
            peer = await self._read_state(url)
        except PeerDown as e:
            if rec.state != "down":
                log.warning("peer %s is down: %s", url, e)
            rec.down(str(e), read_unix)
            return
        if peer.mirror_id == self.store.mirror_id:
            rec.down("that URL is this mirror itself: remove it from the peers", read_unix)
            return
        generation = self.store.generation
        reason = self._take_removals_and_refs(url, peer)
        plan = plan_sync(self.store.state(), peer)
        if plan.copies:
            rec.state, rec.behind = "syncing", plan.behind
            for c in plan.copies:
                failed = await self._copy(url, peer, c)
                reason = reason or failed
        after = plan_sync(self.store.state(), peer)
        rec.read(after.behind, read_unix, reason if after.behind else "")
        if self.store.generation != generation:
            self.notify(but=url)

    def _take_removals_and_refs(self, url: str, peer: State) -> str:
        plan = plan_sync(self.store.state(), peer)
        reason = ""
        for r in plan.removals:
            try:
                self.store.apply_removal(r)
            except LlmgwError as e:
                reason = reason or f"its removal of {r.repo}@{r.commit[:12]} was refused: {e}"
        for m in plan.ref_moves:
            try:
                self.store.put(m.revision, refs=m.refs)
            except LlmgwError as e:
                reason = reason or f"moving {m.revision.repo} {m.refs} failed: {e}"
        if reason:
            log.warning("peer %s: %s", url, reason)
        return reason

    async def _copy(self, url: str, peer: State, c: Copy) -> str:
        """Copy one revision; "" when done or no longer wanted, else why not."""
        rev = c.revision
        async with self._copy_lock:
            # Another peer may have given it, or a removal come, while waiting.
            still = plan_sync(self.store.state(), peer.model_copy(update={"revisions": [rev]}))
            if not still.copies:
                return ""
            refused = self._refused.get((url, key_of(rev)))
            if refused and time.monotonic() < refused[0]:
                return refused[1]
            try:
                await self.copier.copy(url, self.token, still.copies[0])
            except CopyRefused as e:
                # Its bytes will not change by themselves: not fetched again each interval.
                reason = f"{rev.repo}@{rev.commit[:12]}: {e}"
                self._refused[(url, key_of(rev))] = (time.monotonic() + REFUSED_RETRY_S, reason)
                log.warning("copying %s@%s from %s: %s", rev.repo, rev.commit[:12], url, e)
                return reason
            except (LlmgwError, OSError) as e:
                # OSError: this mirror's disk (full, read-only); the next sync tries again.
                log.warning("copying %s@%s from %s: %s", rev.repo, rev.commit[:12], url, e)
                return f"{rev.repo}@{rev.commit[:12]}: {e}"
        log.info("copied %s %s@%s from peer %s", rev.kind, rev.repo, rev.commit[:12], url)
        return ""

    # -- telling peers -------------------------------------------------------------

    def notify(self, *, but: str = "") -> None:
        """Tell every peer (but ``but``) that this mirror changed; best effort, at once."""
        for url in self.book.urls():
            if url != but:
                task = asyncio.get_running_loop().create_task(self._notify(url))
                self._notices.add(task)
                task.add_done_callback(self._notices.discard)

    async def _notify(self, url: str) -> None:
        try:
            await self.client.post(
                f"{url}/v1/notify", headers=self._headers(), json={}, timeout=STATE_TIMEOUT_S
            )
        except httpx.HTTPError as e:
            # The peer reads this mirror at its own interval anyway.
            log.debug("peer %s was not told of a change: %s", url, e)

    async def aclose(self) -> None:
        for task in list(self._notices):
            task.cancel()
        await asyncio.gather(*self._notices, return_exceptions=True)
        if self._own_client:
            await self.client.aclose()
