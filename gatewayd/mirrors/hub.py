"""Hub-API reads (pinning, planning) through the cluster's mirrors, first up first.

A mirror speaks the Hugging Face hub's API, so the same llmgw.hub.HubClient
reads it, with the mirror read token. With mirrors configured, an hf: model
is read only through them; the internet's hub (server.yaml hub_url) only when
the model's ``allow_internet`` lets it, and only after no mirror held it.
None holding it is refused with the command that adds it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from gatewayd.mirrors.set import MirrorSet
from llmgw.hub import (
    EntryNotFound,
    HubClient,
    HubError,
    HubRefused,
    HubUnreachable,
    RepoNotFound,
    RevisionNotFound,
)
from llmgw.hub.client import TIMEOUT_S

log = logging.getLogger(__name__)

T = TypeVar("T")

_MISSING = (RepoNotFound, RevisionNotFound, EntryNotFound)


class NotOnMirror(HubError):
    """No mirror of the cluster holds what a model names, and it may not reach the hub."""


def add_command(repo: str, revision: str = "", file: str = "") -> str:
    """The command that has the mirrors pull it (one file of a repository: with --include)."""
    include = f" --include {file}" if file else ""
    return f"llmgw ctl mirror add hf:{repo}@{revision or 'main'}{include}"


async def read_through(
    mirrors: MirrorSet | None,
    hub_url: str,
    repo: str,
    revision: str,
    fn: Callable[[HubClient], Awaitable[T]],
    *,
    allow_internet: bool = False,
    file: str = "",
    **client: Any,
) -> T:
    """``fn`` on the first mirror holding ``repo`` (or, as allowed, on the hub): what it gave.

    Mirrors that do not answer or do not hold it are passed over; a mirror's
    other errors (a file that is not what it says) are the answer. ``client``
    is handed to HubClient (retries, timeout_s); ``file``, the one file a
    model names, goes into the command that adds it.
    """
    if mirrors is None or not mirrors.enabled:
        async with HubClient(hub_url, **client) as hub:
            return await fn(hub)
    missing: list[str] = []
    silent: list[str] = []
    timeout_s = client.pop("timeout_s", TIMEOUT_S)
    headers = {"User-Agent": "llmgw"}
    if token := mirrors.read_token:
        headers["Authorization"] = f"Bearer {token}"
    for url in mirrors.ordered():
        # A pool of its own per mirror: the mirror's certificate is checked against the
        # cluster's CA, and the read token goes to that mirror only.
        async with (
            httpx.AsyncClient(
                follow_redirects=True,
                timeout=httpx.Timeout(timeout_s),
                verify=mirrors.verify,
                headers=headers,
            ) as http,
            HubClient(url, client=http, **client) as hub,
        ):
            try:
                return await fn(hub)
            except _MISSING as e:
                missing.append(e.message)
            except (HubUnreachable, HubRefused) as e:
                # A mirror down, or refusing the read token: another may serve.
                silent.append(f"{url}: {e.message}")
    if allow_internet:
        log.info("no mirror holds %s@%s; the model may use the hub at %s", repo, revision, hub_url)
        async with HubClient(hub_url, timeout_s=timeout_s, **client) as hub:
            return await fn(hub)
    if not missing:
        raise HubUnreachable(
            "no mirror of the cluster answered: " + "; ".join(silent),
            hint="check that they run (llmgw ctl mirror list); "
            "or set allow_internet: true on the model to use the hub",
        )
    shown = revision[:12] if len(revision) == 40 else revision or "main"
    what = f"{file} of {repo}@{shown}" if file else f"{repo}@{shown}"
    # The command is in the message itself: every caller shows the message.
    raise NotOnMirror(
        f"none of the cluster's mirrors holds {what}; add it: {add_command(repo, revision, file)}",
        hint=f"{missing[0]}; or set allow_internet: true on the model to let it use the hub",
    )
