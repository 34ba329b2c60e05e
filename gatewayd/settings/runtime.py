"""The kept settings on one control plane: the version in force, followed from the store.

At start the newest version is read (a cluster's first start writes version 1
from server.yaml's values, so an existing install keeps what it had) and
applied; from then on the store is asked every ``poll_s`` for its newest
version number — one ``max(version)`` — and a newer version is read, loaded
and applied. A version this control plane cannot load (written by a newer
llmgw, say) is reported and skipped; the one in force stays. A write made
here (``ctl config set`` on this control plane) is applied before its reply,
so the operator's next call already sees it in force here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import ValidationError

from gatewayd.settings.agents import AgentSettingsPush
from gatewayd.store import Store
from gatewayd.store.settings_records import SettingsConflict, SettingsVersion
from llmgw.errors import StoreError
from llmgw.settings import ClusterSettings

log = logging.getLogger(__name__)

# 1 s: a change made on one control plane is in force on the others within
# about a second, for one small query a second each.
POLL_S = 1.0
SEED_AUTHOR = "server.yaml"
SEED_COMMENT = "from server.yaml"

# (the version now in force, the one before it) -> what could not be applied, in words.
Apply = Callable[[ClusterSettings, ClusterSettings], list[str]]


class SettingsRuntime:
    """The settings version in force on this control plane, and the way to write a new one."""

    def __init__(
        self,
        store: Store,
        running: ClusterSettings,
        apply: Apply,
        *,
        control_plane: str,
        poll_s: float = POLL_S,
        agents: AgentSettingsPush | None = None,
    ) -> None:
        self._store = store
        # Sends each connected agent its part of every version (None: no agents here).
        self.agents = agents
        self._apply = apply
        self.control_plane = control_plane
        self.poll_s = poll_s
        # What the running parts were built from until a version is applied: server.yaml's.
        self.in_force = running
        self.version = 0
        self.since: datetime | None = None
        self.problems: list[str] = []
        # The newest version looked at (applied, or skipped as unloadable).
        self._seen = 0
        self._lock = asyncio.Lock()
        self._store_down = False
        # Called with (settings, version) after each version is applied (agents are told).
        self.listeners: list[Callable[[ClusterSettings, int], None]] = []

    async def start(self, seed: ClusterSettings) -> None:
        """Apply the newest version; on a cluster's first start, write ``seed`` as version 1."""
        newest = await self._store.get_settings()
        if newest is None:
            try:
                newest = await self._store.put_settings(
                    seed.as_dict(),
                    parent_version=0,
                    author=SEED_AUTHOR,
                    comment=SEED_COMMENT,
                    at=datetime.now(UTC),
                )
                log.info("settings: version 1 written from server.yaml")
            except SettingsConflict as e:
                newest = e.latest  # another control plane seeded it a moment before
        if newest is not None:
            await self.take(newest)

    async def take(self, version: SettingsVersion) -> bool:
        """Load and apply ``version`` if it is newer than the one in force; whether it was."""
        async with self._lock:
            if version.version <= self._seen:
                return False
            self._seen = version.version
            try:
                settings = ClusterSettings.model_validate(version.document)
            except ValidationError as e:
                problem = (
                    f"version {version.version} cannot be loaded here ({e.error_count()} "
                    f"problems, first: {e.errors()[0]['msg']}); version {self.version} stays"
                )
                log.error("settings: %s", problem)
                self.problems = [problem]
                return False
            previous = self.in_force
            problems = self._apply(settings, previous)
            self.in_force, self.version = settings, version.version
            self.since = datetime.now(UTC)
            self.problems = problems
        for problem in problems:
            log.warning("settings version %d: %s", version.version, problem)
        log.info("settings: version %d in force (by %s)", version.version, version.author or "?")
        for listener in self.listeners:
            listener(settings, version.version)
        return True

    async def poll_once(self) -> bool:
        """Take the store's newest version if there is a newer one; whether one was taken."""
        newest = await self._store.latest_settings_version()
        if newest <= self._seen:
            return False
        version = await self._store.get_settings(newest)
        return version is not None and await self.take(version)

    async def run(self) -> None:
        """Follow the store until cancelled; a store that does not answer leaves what is in force."""
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await self.poll_once()
            except StoreError as e:
                if not self._store_down:
                    log.warning("settings: the store does not answer; version %d stays: %s",
                                self.version, e)  # fmt: skip
                self._store_down = True
                continue
            except Exception:
                log.exception("settings: following the store failed; trying again")
                continue
            if self._store_down:
                log.info("settings: the store answers again")
                self._store_down = False

    async def write(
        self, document: ClusterSettings, *, parent_version: int, author: str, comment: str
    ) -> SettingsVersion:
        """Keep ``document`` as the version after ``parent_version`` and apply it here.

        SettingsConflict when a newer version was written meanwhile (the change
        is to be made again on it).
        """
        written = await self._store.put_settings(
            document.as_dict(),
            parent_version=parent_version,
            author=author,
            comment=comment,
            at=datetime.now(UTC),
        )
        await self.take(written)
        return written
