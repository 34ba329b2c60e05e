"""Where an hf: source's bytes may come from, in the order they are tried.

A shard's hf: weights come from the cluster's mirrors (StartShard's
weights.mirror_urls, those up first) with the read token they take, and reach
the hub (agent.yaml's hub_url) only when the model allows the internet: after
every mirror has failed to give a file (none holds it, or none answers).
Without mirrors the hub, or a shard's single mirror_url, is the one place.

The token goes to the mirrors only: each Origin carries its own headers, so
the hub, and any host a mirror redirects to (httpx drops Authorization on a
redirect to another origin), never see it. It is in no label, log or error.

A file cut on one mirror is resumed on the next at the byte reached
(download.py): every mirror serves an LFS file with its sha256 as the ETag,
so If-Range holds across them, and a mirror that would send something else
answers 200, which starts the file over rather than splicing two together.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote, urlsplit

import httpx

from agentd.weights.errors import DownloadFailed, MirrorsLack, WeightsError
from llmgw.hub import (
    EntryNotFound,
    HubClient,
    HubError,
    HubRefused,
    HubUnreachable,
    RepoNotFound,
    RevisionNotFound,
)

T = TypeVar("T")

# What a place that did not give a file did: the words of the error built from them.
LACKS = "lacks"  # 404: it does not hold the repository, revision or file
REFUSED = "refused"  # 401/403: the token (or its absence) was refused
DOWN = "down"  # no answer, a 5xx, a stall or a cut, after retries
OTHER = "other"  # any other answer


@dataclass(frozen=True)
class Place:
    """A server laid out like the hub: one of the cluster's mirrors, or the hub itself."""

    base_url: str
    is_mirror: bool
    token: str = field(default="", repr=False)
    # One of the cluster's mirrors (llmgw mirror serve): its ETags are the
    # files' own sha256 or git blob id, never a CDN's or Xet's hash.
    cluster: bool = False

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc or self.base_url

    @property
    def label(self) -> str:
        """The place in the node's words: "mirror 10.0.0.5:7080", "the hub huggingface.co"."""
        return f"mirror {self.host}" if self.is_mirror else f"the hub {self.host}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def file_url(self, repo: str, revision: str, path: str) -> str:
        return resolve_url(self.base_url, repo, revision, path)

    def hub(self, client: httpx.AsyncClient | None, retries: int, backoff_s: float) -> HubClient:
        return HubClient(
            self.base_url,
            token=self.token,
            client=client,
            retries=retries,
            retry_backoff_s=backoff_s,
        )


@dataclass(frozen=True)
class Origin:
    """One URL a file may be fetched from, the headers it takes, and its place's words."""

    url: str
    label: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    place: Place | None = None

    @classmethod
    def plain(cls, url: str) -> Origin:
        """A URL with nothing to add to it (an https: source, a hub without mirrors)."""
        return cls(url, urlsplit(url).netloc or url)


@dataclass(frozen=True)
class Failure:
    """Why one place did not give what was asked."""

    label: str
    kind: str  # LACKS, REFUSED, DOWN, OTHER
    reason: str


def mirror_tls(ca_cert: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    """TLS for HTTPS mirrors and the hub alike: the public CAs and the cluster's, and the node's
    certificate where a mirror asks for one (its tls.client_ca reads node certificates).

    A mirror's certificate is often the cluster CA's (issued like the control
    plane's); the hub's is a public CA's. Files that are not there are left out:
    a node without its certificate yet fetches with the token alone.
    """
    ctx = httpx.create_ssl_context()  # what httpx trusts by default: the public CAs
    if Path(ca_cert).is_file():
        ctx.load_verify_locations(cafile=str(ca_cert))
    if cert is not None and key is not None and Path(cert).is_file() and Path(key).is_file():
        ctx.load_cert_chain(certfile=str(cert), keyfile=str(key))
    return ctx


def resolve_url(base_url: str, repo: str, revision: str, path: str) -> str:
    """A file's download URL on the hub or a mirror: {base}/{org}/{name}/resolve/{rev}/{path}."""
    repo_q = "/".join(quote(p, safe="") for p in repo.split("/"))
    path_q = "/".join(quote(p, safe="") for p in path.split("/"))
    return f"{base_url.rstrip('/')}/{repo_q}/resolve/{quote(revision or 'main', safe='')}/{path_q}"


class HfPlaces:
    """The places an hf: source is fetched from, in order; a place that failed goes last.

    Within one repository a mirror that went down is asked after the others
    for the files still to come, so a dead mirror costs one failure, not one
    per file.
    """

    def __init__(self, places: Sequence[Place]) -> None:
        if not places:
            raise WeightsError("no place to fetch hf: weights from")
        self.order: list[Place] = list(places)

    @classmethod
    def choose(
        cls,
        *,
        hub_url: str,
        mirror_urls: Sequence[str] = (),
        mirror_token: str = "",
        allow_internet: bool = False,
        mirror_url: str = "",
    ) -> HfPlaces:
        """The cluster's mirrors (then the hub if allowed), or the one hub-like place."""
        mirrors = list(dict.fromkeys(u.rstrip("/") for u in mirror_urls if u))
        if not mirrors:
            # No cluster mirrors: the hub, or the single mirror a shard names in its place.
            return cls([Place(mirror_url or hub_url, is_mirror=bool(mirror_url))])
        places = [Place(u, is_mirror=True, token=mirror_token, cluster=True) for u in mirrors]
        if allow_internet:
            places.append(Place(hub_url, is_mirror=False))
        return cls(places)

    @property
    def has_mirrors(self) -> bool:
        return any(p.is_mirror for p in self.order)

    def origins(self, repo: str, revision: str, path: str) -> list[Origin]:
        return [
            Origin(p.file_url(repo, revision, path), p.label, p.headers(), p) for p in self.order
        ]

    def demote(self, failed: Origin | Place) -> None:
        """A place that failed (mid-file, or did not answer) is asked last for what follows."""
        place = failed.place if isinstance(failed, Origin) else failed
        if place in self.order and len(self.order) > 1:
            self.order.remove(place)
            self.order.append(place)

    async def ask(
        self,
        what: str,
        question: Callable[[HubClient], Awaitable[T]],
        *,
        client: httpx.AsyncClient | None,
        retries: int,
        backoff_s: float,
    ) -> T:
        """The first answer to ``question`` from the places in order.

        A place that does not hold it, refuses the token or does not answer is
        passed over; with one place its own error is raised as it is.
        """
        failures: list[Failure] = []
        last: HubError | None = None
        order = list(self.order)
        for n, place in enumerate(order):
            # Retries only on the last place: with another to ask, moving on is quicker.
            tries = retries if n == len(order) - 1 else 0
            async with place.hub(client, tries, backoff_s) as hub:
                try:
                    return await question(hub)
                except (RepoNotFound, RevisionNotFound, EntryNotFound) as e:
                    failures.append(Failure(place.label, LACKS, e.message))
                    last = e
                except HubRefused as e:
                    failures.append(Failure(place.label, REFUSED, e.message))
                    last = e
                except HubUnreachable as e:
                    failures.append(Failure(place.label, DOWN, e.message))
                    last = e
                    self.demote(place)
        if len(failures) == 1 and last is not None and not self.has_mirrors:
            raise last
        raise none_gave(what, failures)


def none_gave(what: str, failures: Sequence[Failure]) -> WeightsError:
    """The error when no place gave ``what`` (an hf: source), with each place's reason."""
    said = "; ".join(f"{f.label}: {f.reason}" for f in failures)
    refused = [f for f in failures if f.kind == REFUSED and f.label.startswith("mirror ")]
    if refused:
        return DownloadFailed(
            f"{refused[0].label} refused the node's mirror token for {what} ({said})",
            hint="the control plane sends its mirror read token (mirror.read_token_file, by "
            "default <secrets>/mirror-read-token); give the mirror the same one "
            "(read_token_file in its mirror.yaml) and start the shard again",
        )
    if failures and all(f.kind == LACKS for f in failures):
        repo = what.rsplit(":", 1)[0] if what.count(":") > 1 else what
        return MirrorsLack(
            f"no mirror holds {what} ({said})",
            hint=f"add it to a mirror: llmgw ctl mirror add {repo}, or let the model reach "
            "the internet's hub (allow_internet: true)",
        )
    return DownloadFailed(
        f"{what} could not be fetched from any mirror ({said})",
        hint="check the mirrors (llmgw ctl mirror list) and the node's network to them; "
        "starting the shard again resumes where it stopped",
    )


__all__ = [
    "DOWN",
    "LACKS",
    "OTHER",
    "REFUSED",
    "Failure",
    "HfPlaces",
    "Origin",
    "Place",
    "mirror_tls",
    "none_gave",
    "resolve_url",
]
