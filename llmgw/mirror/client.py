"""A client of one mirror's management API (``/v1/…``, llmgw/mirror/wire.py), over httpx.

The control plane talks to its mirrors with it: reads (info, revisions, a
repository, state) carry the read token, everything that changes a mirror
(pulls, uploads, removals, peers, du) the admin token. Answers are parsed
into the wire models; a refusal becomes a MirrorError carrying the mirror's
own code, message and hint, and a mirror that does not answer a
MirrorUnreachable (code "unavailable").

    async with MirrorClient(url, read_token=r, admin_token=a) as mirror:
        info = await mirror.info()
        pull = await mirror.start_pull(PullRequest(source="hf:org/name@main"))
        async for p in mirror.follow(pull.pull_id): ...
        rev = await mirror.upload_dir(Path("/models/tiny"), "org/tiny")
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Self, TypeVar
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ValidationError

from llmgw.errors import ExitCode, LlmgwError
from llmgw.fsutil import sha256_file
from llmgw.mirror import wire
from llmgw.mirror.names import check_file_name, check_file_path, check_kind, check_repo

log = logging.getLogger(__name__)

# Per connect and per read: a management answer is small, and a follow sends
# a line at least every 0.5 s while a pull runs.
TIMEOUT_S = 30.0
# Uploads are read from disk and sent in pieces this big.
CHUNK_BYTES = 1 << 20
# An upload's answer comes once the mirror has checked and kept the whole file:
# minutes for a large one. Connecting and each piece sent stay bounded.
UPLOAD_TIMEOUT = httpx.Timeout(TIMEOUT_S, read=600.0)
SHA256_HEADER = "X-Llmgw-Sha256"

_M = TypeVar("_M", bound=BaseModel)
# Called with (path, bytes sent of it, bytes sent of all, bytes of all).
UploadProgress = Callable[[str, int, int, int], None]

_EXIT = {
    "not_found": ExitCode.NOT_FOUND,
    "invalid": ExitCode.USAGE,
    "unauthorized": ExitCode.UNAUTHENTICATED,
    "forbidden": ExitCode.UNAUTHENTICATED,
    "conflict": ExitCode.CONFLICT,
    "unavailable": ExitCode.UNREACHABLE,
}
_CODE_OF_STATUS = {
    400: "invalid",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "quota",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
    507: "quota",
}


class MirrorError(LlmgwError):
    """A mirror refused or could not do what was asked; ``code`` is wire.ErrorDetail's."""

    def __init__(self, message: str, *, hint: str = "", code: str = "internal", url: str = ""):
        super().__init__(message, hint=hint)
        self.code = code
        self.url = url
        self.exit_code = _EXIT.get(code, ExitCode.ERROR)


class MirrorUnreachable(MirrorError):
    """Nothing answered at the mirror's URL (or it answered something else than a mirror)."""

    def __init__(self, message: str, *, hint: str = "", url: str = ""):
        super().__init__(message, hint=hint, code="unavailable", url=url)


def cluster_verify(ca_cert: Path) -> ssl.SSLContext:
    """How a client on a cluster machine checks an HTTPS mirror: the system's authorities
    and, where this machine holds it, the cluster CA, which signs the mirrors' certificates."""
    ctx = ssl.create_default_context()
    if Path(ca_cert).is_file():
        # A broken CA file is said by the handshake it fails, naming the certificate.
        with contextlib.suppress(OSError, ssl.SSLError):
            ctx.load_verify_locations(cafile=str(ca_cert))
    return ctx


def _q(path: str) -> str:
    return "/".join(quote(p, safe="") for p in path.split("/"))


class MirrorClient:
    """The mirror at ``url``; ``async with MirrorClient(url, …) as m`` or ``aclose()``."""

    def __init__(
        self,
        url: str,
        *,
        read_token: str = "",
        admin_token: str = "",
        client: httpx.AsyncClient | None = None,
        verify: ssl.SSLContext | bool = True,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.url = url.rstrip("/")
        # Each token goes where it is needed only: reads carry the read token (none
        # without it, and the mirror says 401), writes the mirror's admin token.
        self._read_token = read_token
        self._admin_token = admin_token
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            verify=verify,
            headers={"User-Agent": "llmgw"},
            # Management answers are never redirected; a redirect is not a mirror.
            follow_redirects=False,
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
        return urlsplit(self.url).netloc or self.url

    # -- reads ------------------------------------------------------------------------

    async def health(self) -> wire.Health:
        return await self._call("GET", "/health", wire.Health, auth="")

    async def info(self) -> wire.Info:
        return await self._call("GET", "/v1/info", wire.Info)

    async def revisions(self) -> list[wire.Revision]:
        """What the mirror holds, newest first, without the files."""
        return (await self._call("GET", "/v1/revisions", wire.RevisionList)).revisions

    async def repo(self, repo: str) -> list[wire.Revision]:
        """Every revision held of a model repository, with their files."""
        check_repo(repo)
        return (await self._call("GET", f"/v1/repos/{_q(repo)}", wire.RevisionList)).revisions

    async def file(self, kind: str, name: str) -> wire.Revision:
        """A wheel or an engine archive held by the mirror."""
        check_kind(kind)
        check_file_name(name)
        return await self._call("GET", f"/v1/files/{kind}/{_q(name)}", wire.Revision)

    async def state(self) -> wire.State:
        return await self._call("GET", "/v1/state", wire.State)

    async def notify(self) -> None:
        await self._send("POST", "/v1/notify", auth="read", json={})

    # -- management (the admin token) -------------------------------------------------

    async def remove_repo(self, repo: str, revision: str = "") -> wire.Removed:
        check_repo(repo)
        params = {"revision": revision} if revision else None
        return await self._call(
            "DELETE", f"/v1/repos/{_q(repo)}", wire.Removed, auth="admin", params=params
        )

    async def remove_file(self, kind: str, name: str) -> wire.Removed:
        check_kind(kind)
        check_file_name(name)
        return await self._call(
            "DELETE", f"/v1/files/{kind}/{_q(name)}", wire.Removed, auth="admin"
        )

    async def start_pull(self, req: wire.PullRequest) -> wire.Pull:
        return await self._call(
            "POST", "/v1/pulls", wire.Pull, auth="admin", json=req.model_dump(mode="json")
        )

    async def pulls(self) -> list[wire.Pull]:
        return (await self._call("GET", "/v1/pulls", wire.PullList, auth="admin")).pulls

    async def pull(self, pull_id: str) -> wire.Pull:
        return await self._call("GET", f"/v1/pulls/{_q(pull_id)}", wire.Pull, auth="admin")

    async def follow(self, pull_id: str) -> AsyncIterator[wire.Pull]:
        """Each change of a pull as the mirror sends it, until it is done or failed."""
        url = f"{self.url}/v1/pulls/{_q(pull_id)}/follow"
        try:
            async with self._client.stream("GET", url, headers=self._auth("admin")) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise self._refusal(resp)
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    pull = self._parse(wire.Pull, line, url)
                    yield pull
                    if pull.state in ("done", "failed"):
                        return
        except httpx.TransportError as e:
            raise self._unreachable(e) from e
        # The stream ended before the pull did: the mirror went away (or restarted).
        raise MirrorUnreachable(
            f"the mirror at {self.host} stopped telling how pull {pull_id} goes",
            hint="the pull may still run there; look again with: llmgw ctl mirror list",
            url=self.url,
        )

    async def du(self) -> wire.Du:
        return await self._call("GET", "/v1/du", wire.Du, auth="admin")

    async def peers(self) -> list[wire.Peer]:
        return (await self._call("GET", "/v1/peers", wire.PeerList, auth="admin")).peers

    async def add_peer(self, url: str) -> list[wire.Peer]:
        body = wire.PeerRequest(url=url).model_dump(mode="json")
        return (await self._call("POST", "/v1/peers", wire.PeerList, auth="admin", json=body)).peers

    async def remove_peer(self, url: str) -> list[wire.Peer]:
        reply = await self._call(
            "DELETE", "/v1/peers", wire.PeerList, auth="admin", params={"url": url}
        )
        return reply.peers

    # -- uploads -----------------------------------------------------------------------

    async def put_upload_file(
        self,
        upload_id: str,
        path: str,
        body: bytes | AsyncIterator[bytes],
        *,
        sha256: str = "",
        size: int | None = None,
    ) -> wire.FileEntry:
        """One file of an upload, checked by the mirror against ``sha256`` when given."""
        check_file_path(path)
        headers = self._auth("admin")
        if sha256:
            headers[SHA256_HEADER] = sha256
        if size is not None:
            headers["Content-Length"] = str(size)
        return await self._call(
            "PUT",
            f"/v1/uploads/{_q(upload_id)}/{_q(path)}",
            wire.FileEntry,
            auth="admin",
            content=body,
            headers=headers,
            timeout=UPLOAD_TIMEOUT,
        )

    async def commit_upload(self, upload_id: str, req: wire.CommitRequest) -> wire.Revision:
        return await self._call(
            "POST",
            f"/v1/uploads/{_q(upload_id)}/commit",
            wire.Revision,
            auth="admin",
            json=req.model_dump(mode="json"),
        )

    async def upload_dir(
        self,
        local: Path,
        repo: str,
        *,
        allow_pickle: bool = False,
        ref: str = "main",
        on_progress: UploadProgress | None = None,
    ) -> wire.Revision:
        """A local file or folder sent as one new revision of ``repo``.

        Files and folders starting with a dot are left out (git's and
        huggingface_hub's own bookkeeping, never a model's).
        """
        check_repo(repo)
        files = local_files(local)
        if not files:
            raise MirrorError(
                f"{local} holds no file to send",
                hint="name a model file or a folder of one",
                code="invalid",
            )
        total = sum(f.stat().st_size for _, f in files)
        upload_id = secrets.token_hex(8)
        sent_all = 0
        for rel, path in files:
            digest = await asyncio.to_thread(sha256_file, path)
            size = path.stat().st_size
            base = sent_all

            def progress(done: int, rel: str = rel, base: int = base) -> None:
                if on_progress is not None:
                    on_progress(rel, done, base + done, total)

            await self.put_upload_file(
                upload_id, rel, read_chunks(path, progress), sha256=digest, size=size
            )
            sent_all += size
        return await self.commit_upload(
            upload_id, wire.CommitRequest(repo=repo, allow_pickle=allow_pickle, ref=ref)
        )

    async def put_artifact(
        self,
        kind: str,
        path: Path,
        *,
        name: str = "",
        sha256: str = "",
        on_progress: Callable[[int, int], None] | None = None,
    ) -> wire.Revision:
        """A wheel or an engine archive sent as it is (an engine's pinned sha256 checked)."""
        check_kind(kind)
        name = check_file_name(name or path.name)
        size = path.stat().st_size
        digest = sha256 or await asyncio.to_thread(sha256_file, path)
        headers = {**self._auth("admin"), SHA256_HEADER: digest, "Content-Length": str(size)}

        def progress(done: int) -> None:
            if on_progress is not None:
                on_progress(done, size)

        return await self._call(
            "PUT",
            f"/v1/files/{kind}/{_q(name)}",
            wire.Revision,
            auth="admin",
            content=read_chunks(path, progress),
            headers=headers,
            timeout=UPLOAD_TIMEOUT,
        )

    # -- HTTP ------------------------------------------------------------------------

    def _auth(self, auth: str) -> dict[str, str]:
        # Guards: the admin token stood in for a missing read token, so it went on every read.
        token = self._admin_token if auth == "admin" else self._read_token
        return {"Authorization": f"Bearer {token}"} if auth and token else {}

    async def _send(
        self,
        method: str,
        path: str,
        *,
        auth: str = "read",
        headers: dict[str, str] | None = None,
        timeout: Any = httpx.USE_CLIENT_DEFAULT,
        **kw: Any,
    ) -> httpx.Response:
        url = f"{self.url}{path}"
        try:
            resp = await self._client.request(
                method, url, headers=headers or self._auth(auth), timeout=timeout, **kw
            )
        except httpx.TransportError as e:
            raise self._unreachable(e) from e
        if resp.status_code >= 400:
            raise self._refusal(resp)
        return resp

    async def _call(self, method: str, path: str, model: type[_M], **kw: Any) -> _M:
        resp = await self._send(method, path, **kw)
        return self._parse(model, resp.content, str(resp.url))

    def _parse(self, model: type[_M], raw: bytes | str, url: str) -> _M:
        try:
            return model.model_validate_json(raw)
        except ValidationError as e:
            raise MirrorUnreachable(
                f"{self.host} answered {urlsplit(url).path} with something else than a mirror's "
                f"{model.__name__}",
                hint="check that mirror.urls names llmgw mirrors (llmgw mirror serve), "
                "and that they run this version",
                url=self.url,
            ) from e

    def _unreachable(self, e: httpx.TransportError) -> MirrorUnreachable:
        return MirrorUnreachable(
            f"the mirror at {self.host} did not answer: {str(e) or type(e).__name__}",
            hint="check that it runs (llmgw mirror serve) and mirror.urls in server.yaml",
            url=self.url,
        )

    def _refusal(self, resp: httpx.Response) -> MirrorError:
        code = _CODE_OF_STATUS.get(resp.status_code, "internal")
        message, hint = "", ""
        try:
            detail = wire.ErrorBody.model_validate_json(resp.content).error
            code, message, hint = detail.code or code, detail.message, detail.hint
        except (ValidationError, ValueError):
            # Not a mirror's error body: a proxy, a hub, or something else on that port.
            text = _plain_text(resp)
            message = f"{self.host} answered {resp.status_code}" + (f": {text}" if text else "")
            hint = "check that mirror.urls names llmgw mirrors (llmgw mirror serve)"
        if code == "unauthorized" and not hint:
            hint = "the mirror takes the cluster's mirror read token (<secrets>/mirror-read-token)"
        elif code == "forbidden" and not hint:
            hint = (
                "changes to a mirror need its admin token (<secrets>/mirror-admin-token, "
                "admin_token_file in mirror.yaml)"
            )
        return MirrorError(message, hint=hint, code=code, url=self.url)


def _plain_text(resp: httpx.Response) -> str:
    try:
        data = json.loads(resp.content)
    except ValueError:
        return resp.text.strip()[:200]
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        return data["error"]
    return ""


def local_files(local: Path) -> list[tuple[str, Path]]:
    """The files of a local path as (path within the repository, file), sorted; dotted ones left out."""
    local = Path(local)
    if local.is_file():
        return [(local.name, local)]
    if not local.is_dir():
        raise MirrorError(
            f"{local} is not a file or a folder the control plane can read",
            hint="give a path on the control plane's machine",
            code="invalid",
        )
    out: list[tuple[str, Path]] = []
    for root, dirs, names in os.walk(local):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = Path(root) / name
            if path.is_file():
                out.append((path.relative_to(local).as_posix(), path))
    return sorted(out)


async def read_chunks(path: Path, on_sent: Callable[[int], None] | None = None):
    """The bytes of a file, a chunk at a time (read off the loop), counting what was handed on."""
    done = 0
    with path.open("rb") as f:
        while True:
            chunk = await asyncio.to_thread(f.read, CHUNK_BYTES)
            if not chunk:
                return
            done += len(chunk)
            if on_sent is not None:
                on_sent(done)
            yield chunk
