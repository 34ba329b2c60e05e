"""Which part this control plane plays now — leader or standby — and the work each brings.

Every control plane serves the client API from the same store (keys, limits,
catalog, the replicas' addresses), so a front can send clients to any of them.
Only the leader reconciles, commands agents and holds their streams; a
standby reads the nodes and replicas the leader writes, every second, and
routes to those. When the lease moves, the new leader takes the store's state
afresh and waits for the agents, which dial it within the lease's length
while their engines keep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from llmgw.aio import within
from llmgw.errors import StoreError

log = logging.getLogger(__name__)

# A standby reads the nodes, replicas and catalog the leader writes this often.
FOLLOW_EVERY_S = 1.0
# At start, the lease's first answer is awaited this long (a lone control plane
# leads before it serves; a standby learns who leads).
FIRST_ROUND_S = 3.0


class Roles:
    """Starts and stops the leader's work as the lease comes and goes.

    ``leader_only(name, factory)`` names work that runs only while this
    control plane leads (the reconciler, the batch runner); ``follow`` is
    what a standby does every second to keep its view of the cluster.
    """

    def __init__(
        self,
        lease,
        *,
        become_leader: Callable[[], Awaitable[None]],
        become_standby: Callable[[], Awaitable[None]],
        follow: Callable[[], Awaitable[None]],
        follow_every_s: float = FOLLOW_EVERY_S,
    ):
        self.lease = lease
        self._become_leader = become_leader
        self._become_standby = become_standby
        self._follow = follow
        self._follow_every_s = follow_every_s
        self._jobs: dict[str, Callable[[], Awaitable[None]]] = {}
        self._running: dict[str, asyncio.Task] = {}
        self._changes: asyncio.Queue[bool] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._lease_task: asyncio.Task | None = None
        self.acting_as = "standby"  # what the work running now is for
        self.changed_at = time.monotonic()
        lease.on_change(self._changes.put_nowait)

    def leading(self) -> bool:
        """Whether this control plane may act as the leader at this instant."""
        return self.acting_as == "leader" and self.lease.held()

    def leader_only(self, name: str, factory: Callable[[], Awaitable[None]]) -> None:
        """Run ``factory()`` as a task while leading; cancelled when the lease is lost."""
        self._jobs[name] = factory
        if self.acting_as == "leader" and name not in self._running:
            self._running[name] = asyncio.create_task(factory(), name=name)

    async def start(self) -> None:
        self._lease_task = asyncio.create_task(self.lease.run(), name="leader-lease")
        deadline = time.monotonic() + FIRST_ROUND_S
        while time.monotonic() < deadline and not self.lease.held():
            if self.lease.leader_id or self._lease_task.done():
                break  # another leads, or the lease's loop ended (its error is below)
            await asyncio.sleep(0.02)
        if self._lease_task.done():
            self._lease_task.result()
        if self.lease.held():
            await self._lead()
        self._task = asyncio.create_task(self._run(), name="roles")

    async def _run(self) -> None:
        while True:
            if self.acting_as == "leader":
                gained = await self._changes.get()
            else:
                try:
                    gained = await within(self._changes.get(), self._follow_every_s)
                except TimeoutError:
                    try:
                        await self._follow()
                    except Exception as e:  # noqa: BLE001 - a store blip: read again next second
                        log.warning("standby: reading the cluster's state failed: %s", e)
                    continue
            # The newest word counts: several changes may have queued.
            while not self._changes.empty():
                gained = self._changes.get_nowait()
            try:
                if gained and self.lease.held() and self.acting_as != "leader":
                    await self._lead()
                elif not gained and self.acting_as == "leader":
                    await self._stand_by()
            except StoreError as e:
                log.warning("changing role failed; trying again at the next change: %s", e)
            except Exception:
                log.exception("changing role failed; trying again at the next change")

    async def _lead(self) -> None:
        log.info("this control plane leads now (lease epoch %s)", self.lease.epoch)
        await self._become_leader()
        self.acting_as, self.changed_at = "leader", time.monotonic()
        for name, factory in self._jobs.items():
            if name not in self._running:
                self._running[name] = asyncio.create_task(factory(), name=name)

    async def _stand_by(self) -> None:
        log.warning("this control plane no longer leads: standing by")
        self.acting_as, self.changed_at = "standby", time.monotonic()
        running, self._running = self._running, {}
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        await self._become_standby()

    async def stop(self) -> None:
        """Stop the leader's work, then give the lease up so a standby leads within a second."""
        for task in (self._task, *self._running.values()):
            if task is not None:
                task.cancel()
        await asyncio.gather(
            *(t for t in (self._task, *self._running.values()) if t is not None),
            return_exceptions=True,
        )
        self._running = {}
        was_leading, self.acting_as = self.acting_as == "leader", "standby"
        if self._lease_task is not None:
            self._lease_task.cancel()
            with contextlib.suppress(BaseException):
                await self._lease_task
        if was_leading:
            with contextlib.suppress(Exception):
                await within(self.lease.release(), 3)
