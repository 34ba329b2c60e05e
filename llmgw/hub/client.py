"""A small client of the Hugging Face hub's API, for the control plane and the agent alike.

What llmgw asks of a hub (huggingface.co, or a mirror laid out like it):

- which commit a revision names now (``/api/models/{repo}/revision/{rev}``,
  its ``sha``): a model is pinned to it when it is added;
- the files of a commit with their sizes, git blob ids and, for LFS files,
  sha256 (``/api/models/{repo}/tree/{commit}?recursive=true``): what a node
  fetches and checks each file against;
- a few bytes of a file (``/{repo}/resolve/{rev}/{file}`` with Range):
  config.json and the first 8+N bytes of each safetensors shard, which is
  all planning reads; never the weights.

Answers are mapped to llmgw/hub/errors.py from the hub's own X-Error-Code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import struct
from dataclasses import dataclass
from typing import Any, Self
from urllib.parse import quote, urlsplit

import httpx

from llmgw.hub.errors import (
    EntryNotFound,
    HubAnswerInvalid,
    HubError,
    HubRefused,
    HubUnreachable,
    RepoNotFound,
    RevisionNotFound,
)

log = logging.getLogger(__name__)

HF_BASE_URL = "https://huggingface.co"

# The safetensors format caps its header at 100 MB; a longer length is not safetensors.
MAX_SAFETENSORS_HEADER_BYTES = 100_000_000
# One Range read holds the length and the header of most shards (a 70B
# model's are ~30 KB); a longer header takes a second read of exactly the rest.
FIRST_READ_BYTES = 64 << 10
# config.json, the index, tokenizer files: read whole only up to this size.
MAX_SMALL_FILE_BYTES = 64 << 20
# Per connect and per read.
TIMEOUT_S = 30.0
# A hub's 5xx or a dropped connection is tried again this many times.
RETRIES = 2
RETRY_BACKOFF_S = 0.5

COMMIT_RE = re.compile(r"[0-9a-f]{40}")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class HubEntry:
    """A file of a commit as the tree lists it."""

    path: str
    size: int
    # The git blob id (of the LFS pointer, for an LFS file).
    blob_id: str
    # An LFS file's sha256 ("" for a small file kept in git).
    sha256: str = ""

    @property
    def is_lfs(self) -> bool:
        return bool(self.sha256)


@dataclass(frozen=True)
class HubFileInfo:
    """What a HEAD of a file tells: the commit, the ETag and the size."""

    commit: str
    etag: str
    size: int
    # The sha256 an LFS file's X-Linked-Etag carries ("" for a small file).
    sha256: str = ""


def check_repo(repo: str) -> str:
    """``repo`` if it is org/name, each one path element not starting with a dot."""
    parts = (repo or "").split("/")
    if len(parts) != 2 or not all(_plain(p) for p in parts):
        raise HubError(
            f"{repo!r} is not a repository name: expected org/name, "
            "each one path element not starting with a dot"
        )
    return repo


def check_path(path: str) -> str:
    """A file path within a repository: plain elements, none empty or dotted."""
    if not path or not all(_plain(p) for p in path.split("/")):
        raise HubError(
            f"{path!r} is refused as a file of a repository: no element may be empty "
            "or start with a dot"
        )
    return path


def _plain(part: str) -> bool:
    return bool(part) and not part.startswith(".") and "\\" not in part and "\x00" not in part


def _quote_path(path: str) -> str:
    return "/".join(quote(p, safe="") for p in path.split("/"))


def _unquote_etag(value: str) -> str:
    value = value.strip()
    value = value.removeprefix("W/")
    return value.strip('"')


class HubClient:
    """The hub at ``base_url``; ``async with HubClient(url) as hub`` or ``aclose()``."""

    def __init__(
        self,
        base_url: str = HF_BASE_URL,
        *,
        token: str = "",
        client: httpx.AsyncClient | None = None,
        retries: int = RETRIES,
        retry_backoff_s: float = RETRY_BACKOFF_S,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.base_url = (base_url or HF_BASE_URL).rstrip("/")
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        headers = {"User-Agent": "llmgw"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._own_client = client is None
        # A shared client (a mirror's, with its TLS settings) carries no token of
        # ours: each request sends it.
        self._token_headers = (
            {"Authorization": f"Bearer {token}"} if token and client is not None else {}
        )
        self._client = client or httpx.AsyncClient(
            follow_redirects=True, timeout=httpx.Timeout(timeout_s), headers=headers
        )

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    @property
    def host(self) -> str:
        """The hub's host:port, for messages."""
        return urlsplit(self.base_url).netloc or self.base_url

    # -- URLs ---------------------------------------------------------------------

    def file_url(self, repo: str, revision: str, path: str) -> str:
        check_repo(repo)
        check_path(path)
        rev = quote(revision or "main", safe="")
        return f"{self.base_url}/{repo}/resolve/{rev}/{_quote_path(path)}"

    def _api(self, repo: str, *rest: str) -> str:
        check_repo(repo)
        return "/".join([f"{self.base_url}/api/models/{repo}", *rest])

    # -- questions ------------------------------------------------------------------

    async def resolve(self, repo: str, revision: str = "") -> str:
        """The commit ``revision`` (a branch, tag or commit; "" is main) names now."""
        revision = revision or "main"
        url = self._api(repo, "revision", quote(revision, safe=""))
        data = await self._get_json(url, repo=repo, revision=revision)
        sha = data.get("sha") if isinstance(data, dict) else None
        if not isinstance(sha, str) or not COMMIT_RE.fullmatch(sha):
            raise HubAnswerInvalid(
                f"{self.host} answered for {repo}@{revision} without a commit id",
                hint="check that hub_url points at a Hugging Face hub or a mirror of one",
            )
        return sha

    async def list_files(self, repo: str, revision: str) -> list[HubEntry]:
        """Every file of the commit (recursively), with sizes, blob ids and LFS sha256."""
        url: str | None = self._api(repo, "tree", quote(revision or "main", safe=""))
        params: dict | None = {"recursive": "true"}
        entries: list[HubEntry] = []
        while url:
            resp = await self._request("GET", url, params=params, repo=repo, revision=revision)
            params = None  # the next page's link carries its own query
            try:
                page = resp.json()
            except ValueError as e:
                raise self._invalid(url, "not JSON") from e
            if not isinstance(page, list):
                raise self._invalid(url, "not a list of files")
            for item in page:
                if isinstance(item, dict) and item.get("type") == "file":
                    entries.append(self._entry(url, item))
            url = resp.links.get("next", {}).get("url")
        return entries

    async def head(self, repo: str, revision: str, path: str) -> HubFileInfo:
        """A file's commit, ETag and size, as the resolve URL's HEAD gives them."""
        url = self.file_url(repo, revision, path)
        resp = await self._request(
            "HEAD", url, repo=repo, revision=revision, path=path, headers=_identity()
        )
        linked = _unquote_etag(resp.headers.get("x-linked-etag", ""))
        etag = linked or _unquote_etag(resp.headers.get("etag", ""))
        size = resp.headers.get("x-linked-size") or resp.headers.get("content-length") or "0"
        return HubFileInfo(
            commit=resp.headers.get("x-repo-commit", ""),
            etag=etag,
            size=int(size) if size.isdigit() else 0,
            sha256=linked if _SHA256_RE.fullmatch(linked) else "",
        )

    async def read_range(
        self, repo: str, revision: str, path: str, start: int, length: int
    ) -> bytes:
        """``length`` bytes of a file from ``start`` (fewer where the file ends)."""
        url = self.file_url(repo, revision, path)
        headers = {**_identity(), "Range": f"bytes={start}-{start + length - 1}"}
        resp = await self._request(
            "GET", url, repo=repo, revision=revision, path=path, headers=headers
        )
        if resp.status_code == 200:  # a server that ignores Range sends it all
            return resp.content[start : start + length]
        return resp.content[:length]

    async def read_file(self, repo: str, revision: str, path: str) -> bytes:
        """A small file whole (config.json, an index, a tokenizer file)."""
        url = self.file_url(repo, revision, path)
        resp = await self._request(
            "GET", url, repo=repo, revision=revision, path=path, headers=_identity()
        )
        if len(resp.content) > MAX_SMALL_FILE_BYTES:
            raise HubAnswerInvalid(f"{repo}/{path} is larger than a metadata file should be")
        return resp.content

    async def read_json(self, repo: str, revision: str, path: str) -> Any:
        raw = await self.read_file(repo, revision, path)
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, ValueError) as e:
            raise HubAnswerInvalid(f"{repo}/{path} at {revision[:12]} is not JSON") from e

    async def safetensors_header(self, repo: str, revision: str, path: str) -> dict[str, Any]:
        """A safetensors file's JSON header, read with one or two Range requests."""
        first = await self.read_range(repo, revision, path, 0, FIRST_READ_BYTES)
        where = f"{repo}/{path}"
        if len(first) < 8:
            raise HubAnswerInvalid(f"{where} is not a safetensors file (shorter than 8 bytes)")
        (length,) = struct.unpack("<Q", first[:8])
        if length > MAX_SAFETENSORS_HEADER_BYTES:
            raise HubAnswerInvalid(
                f"{where} is not a safetensors file (its header would be {length} bytes)"
            )
        raw = first[8 : 8 + length]
        if len(raw) < length:
            raw += await self.read_range(repo, revision, path, 8 + len(raw), length - len(raw))
        try:
            header = json.loads(raw)
        except (UnicodeDecodeError, ValueError) as e:
            raise HubAnswerInvalid(
                f"{where} is not a safetensors file (its header is not JSON)"
            ) from e
        if not isinstance(header, dict):
            raise HubAnswerInvalid(
                f"{where} is not a safetensors file (its header is not an object)"
            )
        return header

    # -- HTTP -------------------------------------------------------------------------

    async def _get_json(self, url: str, **where) -> Any:
        resp = await self._request("GET", url, **where)
        try:
            return resp.json()
        except ValueError as e:
            raise self._invalid(url, "not JSON") from e

    async def _request(
        self,
        method: str,
        url: str,
        *,
        repo: str,
        revision: str = "",
        path: str = "",
        params: dict | None = None,
        headers: dict | None = None,
    ) -> httpx.Response:
        if self._token_headers:
            headers = {**self._token_headers, **(headers or {})}
        for attempt in range(self.retries + 1):
            try:
                resp = await self._client.request(method, url, params=params, headers=headers)
            except httpx.TransportError as e:
                if attempt < self.retries:
                    await asyncio.sleep(self.retry_backoff_s * (attempt + 1))
                    continue
                raise HubUnreachable(
                    f"the hub at {self.host} did not answer: {str(e) or type(e).__name__}",
                    hint="check hub_url in server.yaml / agent.yaml (or the model's mirror) "
                    "and the network to it",
                ) from e
            if resp.status_code >= 500 and attempt < self.retries:
                await asyncio.sleep(self.retry_backoff_s * (attempt + 1))
                continue
            if resp.status_code < 400:
                return resp
            raise self._error(resp, repo, revision, path)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _error(self, resp: httpx.Response, repo: str, revision: str, path: str) -> HubError:
        code = resp.headers.get("x-error-code", "")
        rev = revision or "main"
        shown_rev = rev[:12] if COMMIT_RE.fullmatch(rev) else rev
        if code == "RevisionNotFound":
            return RevisionNotFound(
                f"{repo} has no revision {shown_rev!r} on {self.host}",
                hint="name a branch, tag or commit that exists (main when none is given)",
            )
        if code == "EntryNotFound" or (path and resp.status_code == 404 and not code):
            return EntryNotFound(
                f"{repo} has no file {path or '?'} at {shown_rev} on {self.host}",
                hint="check the file's name in the repository's file list",
            )
        if code == "RepoNotFound" or resp.status_code == 404:
            return RepoNotFound(
                f"{repo} is not a repository on {self.host}",
                hint="check the org/name; a private or gated repository needs a token or a mirror",
            )
        if code == "GatedRepo" or resp.status_code in (401, 403):
            return HubRefused(
                f"{self.host} refused {repo} ({resp.status_code}): it is gated or private",
                hint="accept its terms and give a token, or serve it from a mirror",
            )
        if resp.status_code >= 500:
            return HubUnreachable(
                f"the hub at {self.host} answered {resp.status_code} for {repo}",
                hint="try again later, or use a mirror",
            )
        return HubError(f"the hub at {self.host} answered {resp.status_code} for {repo}")

    def _invalid(self, url: str, what: str) -> HubAnswerInvalid:
        return HubAnswerInvalid(
            f"{self.host} answered {urlsplit(url).path} with {what}",
            hint="check that hub_url points at a Hugging Face hub or a mirror of one",
        )

    def _entry(self, url: str, item: dict) -> HubEntry:
        path, size, oid = item.get("path"), item.get("size"), item.get("oid", "")
        if not isinstance(path, str) or not isinstance(size, int):
            raise self._invalid(url, "a file without a path or a size")
        lfs = item.get("lfs")
        sha = ""
        if isinstance(lfs, dict):
            sha = str(lfs.get("oid", "")).removeprefix("sha256:")
            size = int(lfs.get("size", size))
        return HubEntry(path=path, size=size, blob_id=str(oid), sha256=sha)


def _identity() -> dict[str, str]:
    # Sizes and byte ranges are of the file itself, never of a compressed answer.
    return {"Accept-Encoding": "identity"}
