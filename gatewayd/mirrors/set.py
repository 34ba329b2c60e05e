"""The cluster's model mirrors as the control plane knows them: probed, ordered, called.

server.yaml ``mirror.urls`` names them in the order they are tried. Each is
asked ``GET /v1/info`` (with the read token) every ``probe_interval_s``; its
state is "unknown" until the first answer, then "up" (with what it told) or
"down" (with why, in plain words). Management calls go to the first mirror
that is up and fall through to the next one that answers; a mirror that
refuses (a quota, a name, a token) is an answer, not a reason to try another.

Agents get every mirror, the up ones first: a node may reach a mirror the
control plane cannot, so none is left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import httpx

from llmgw.errors import StoreError
from llmgw.mirror import wire
from llmgw.mirror.client import (
    TIMEOUT_S,
    MirrorClient,
    MirrorError,
    MirrorUnreachable,
    cluster_verify,
)
from llmgw.mirror.config import MirrorsConfig
from llmgw.mirror.pins import pin_wheels
from llmgw.paths import Paths

log = logging.getLogger(__name__)

UP, DOWN, UNKNOWN = "up", "down", "unknown"
# A probe is one small answer: a mirror slower than this is as good as down
# for planning, which waits on it.
PROBE_TIMEOUT_S = 5.0

T = TypeVar("T")


@dataclass
class MirrorState:
    """One configured mirror as last probed."""

    url: str
    state: str = UNKNOWN
    reason: str = ""
    info: wire.Info | None = None
    checked_at: datetime | None = None


@dataclass
class _Token:
    """A token read from a file, read again when the file changes."""

    path: Path | None
    value: str = ""
    mtime_ns: int = field(default=-1)

    def read(self) -> str:
        if self.path is None:
            return self.value
        try:
            mtime = self.path.stat().st_mtime_ns
            if mtime != self.mtime_ns:
                self.value = self.path.read_text().strip()
                self.mtime_ns = mtime
        except OSError as e:
            if self.mtime_ns != -2:
                log.warning("the mirror token %s cannot be read: %s", self.path, e.strerror or e)
            self.mtime_ns = -2
        return self.value


class MirrorSet:
    """The configured mirrors, their states, and calls that fall through to the next one."""

    def __init__(
        self,
        cfg: MirrorsConfig,
        *,
        read_token: str | Path = "",
        admin_token: str | Path = "",
        verify: ssl.SSLContext | bool = True,
        pins_file: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self._states = {u: MirrorState(u) for u in cfg.urls}
        self._read = _token(read_token)
        self._admin = _token(admin_token)
        self._verify = verify
        # Where the sha256 of each wheel this control plane uploads is pinned (node add's).
        self.pins_file = pins_file
        # Made at the first call: a control plane without mirrors never opens one.
        self._client: httpx.AsyncClient | None = None
        # Set when the list changes: the probe loop probes again without waiting its turn.
        self._changed = asyncio.Event()

    @classmethod
    def from_config(
        cls, cfg: MirrorsConfig, paths: Paths, *, admin_token: str | Path | None = None
    ) -> MirrorSet:
        """The mirrors of server.yaml, with the tokens of its files (or the machine's defaults:
        the mirrors' own admin token, never the cluster's)."""
        read_file = Path(cfg.read_token_file or paths.mirror_read_token_file)
        admin: str | Path = paths.mirror_admin_token_file if admin_token is None else admin_token
        if cfg.admin_token_file:
            admin = Path(cfg.admin_token_file)
        if cfg.enabled and not read_file.exists():
            log.warning(
                "mirror.urls is set but the mirror read token %s does not exist; "
                "agents will be refused by the mirrors (make it with: llmgw server init --mirror)",
                read_file,
            )
        return cls(
            cfg,
            read_token=read_file,
            admin_token=admin,
            verify=_verify(paths),
            pins_file=paths.mirror_pins_file,
        )

    def reconfigure(self, urls: list[str], probe_interval_s: float) -> None:
        """Use other mirrors from now on (the kept settings changed), in this order.

        A mirror named before keeps its last probe; a new one is "unknown"
        until the next probe, which ``run`` makes at once.
        """
        self.cfg = self.cfg.model_copy(
            update={"urls": list(urls), "probe_interval_s": probe_interval_s}
        )
        self._states = {u: self._states.get(u) or MirrorState(u) for u in self.cfg.urls}
        self._changed.set()

    # -- what is known ------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self.cfg.enabled

    @property
    def urls(self) -> list[str]:
        return list(self.cfg.urls)

    @property
    def read_token(self) -> str:
        """The read token, as agents present it to the mirrors."""
        return self._read.read()

    def states(self) -> list[MirrorState]:
        return [self._states[u] for u in self.cfg.urls]

    def ordered(self) -> list[str]:
        """Every mirror, the up ones first (then unknown, then down), each in config order."""
        rank = {UP: 0, UNKNOWN: 1, DOWN: 2}
        return sorted(self.cfg.urls, key=lambda u: rank[self._states[u].state])

    def first_up(self) -> str | None:
        return next((u for u in self.cfg.urls if self._states[u].state == UP), None)

    def client(self, url: str) -> MirrorClient:
        """A client of one mirror on the shared connection pool (closing it keeps the pool)."""
        return MirrorClient(
            url, read_token=self._read.read(), admin_token=self._admin.read(), client=self.http
        )

    @property
    def http(self) -> httpx.AsyncClient:
        """The shared connection pool of management calls."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(TIMEOUT_S),
                verify=self._verify,
                headers={"User-Agent": "llmgw"},
                follow_redirects=False,
            )
        return self._client

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """How an HTTPS mirror's certificate is checked (the cluster's CA too)."""
        return self._verify

    # -- probing ------------------------------------------------------------------------

    async def probe_once(self) -> None:
        """Ask every mirror at once what it holds; each answer or silence sets its state."""
        await asyncio.gather(*(self._probe(u) for u in self.cfg.urls))

    async def _probe(self, url: str) -> None:
        state = self._states[url]
        mirror = MirrorClient(
            url,
            read_token=self._read.read(),
            admin_token=self._admin.read(),
            client=self.http,
        )
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                info = await mirror.info()
        except TimeoutError:
            self._mark(state, DOWN, f"no answer within {PROBE_TIMEOUT_S:g} s")
        except MirrorError as e:
            self._mark(state, DOWN, e.message + (f" ({e.hint})" if e.hint else ""))
        else:
            state.info = info
            self._mark(state, UP, "")
        state.checked_at = datetime.now(UTC)

    def _mark(self, state: MirrorState, new: str, reason: str) -> None:
        if state.state != new:
            if new == DOWN:
                log.warning("mirror %s is down: %s", state.url, reason)
            elif new == UP:
                log.info("mirror %s is up", state.url)
        state.state, state.reason = new, reason

    async def run(self) -> None:
        """Probe every ``probe_interval_s`` (and at once when the list changes) until cancelled."""
        while True:
            self._changed.clear()
            try:
                await self.probe_once()
            except StoreError as e:
                log.warning("probing the mirrors failed; trying again: %s", e)
            except Exception:
                log.exception("probing the mirrors failed; trying again")
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can lose a cancel.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.cfg.probe_interval_s):
                    await self._changed.wait()

    # -- calls --------------------------------------------------------------------------

    async def call(self, fn: Callable[[MirrorClient], Awaitable[T]]) -> tuple[str, T]:
        """``fn`` on the first mirror that answers, up ones first: (its URL, what it gave).

        A mirror that does not answer is marked down and the next one is
        tried; a refusal is the mirror's answer and is raised as it is.
        """
        if not self.enabled:
            raise MirrorError(
                "the cluster has no mirror",
                hint="set mirror.urls in server.yaml (llmgw up --mirror runs one here)",
                code="unavailable",
            )
        tried: list[str] = []
        for url in self.ordered():
            try:
                return url, await fn(self.client(url))
            except MirrorUnreachable as e:
                self._mark(self._states[url], DOWN, e.message)
                self._states[url].checked_at = datetime.now(UTC)
                tried.append(f"{url}: {e.message}")
        raise MirrorUnreachable(
            "no mirror answered: " + "; ".join(tried),
            hint="check that they run (llmgw mirror serve) and mirror.urls in server.yaml",
        )

    async def pin_wheels(self, sha256_by_name: dict[str, str]) -> None:
        """Pin wheels this control plane read and uploaded (llmgw/mirror/pins.py)."""
        if self.pins_file is not None and sha256_by_name:
            await asyncio.to_thread(pin_wheels, self.pins_file, sha256_by_name)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _token(value: str | Path) -> _Token:
    return _Token(value) if isinstance(value, Path) else _Token(None, value)


def _verify(paths: Paths) -> ssl.SSLContext:
    """HTTPS mirrors: the system's authorities and, where it exists, the cluster's CA."""
    return cluster_verify(paths.ca_cert)
