"""The management API (``/v1/…``): every endpoint llmgw.mirror.wire's docstring lists.

Bodies and answers are exactly the wire models; what went wrong is a
wire.ErrorBody with the status of its code (errors.STATUS_OF_CODE). Reads of
what is held take the read token (peers and the control plane's probe use it);
everything that changes the mirror, and pulls and peers, takes the admin token.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from urllib.parse import unquote

from pydantic import BaseModel, ValidationError

from llmgw.errors import LlmgwError
from llmgw.mirror.names import SHA256_RE, check_file_name, check_kind, check_repo
from llmgw.mirror.wire import (
    CommitRequest,
    Health,
    Info,
    PeerList,
    PeerRequest,
    PullList,
    PullRequest,
    RevisionList,
)
from mirrord.api.context import MirrorContext
from mirrord.api.errors import ApiError, wire_error_of
from mirrord.http.auth import Need, Refused
from mirrord.http.messages import BodyTooLarge, Request, Response, StreamResponse

log = logging.getLogger(__name__)

# A JSON request body (a pull, a commit, a peer) is small.
JSON_MAX_BYTES = 1 << 20


def _ok(model: BaseModel | dict, status: int = 200) -> Response:
    obj = model.model_dump(mode="json") if isinstance(model, BaseModel) else model
    return Response.json(obj, status)


async def _body(req: Request, model: type[BaseModel]):
    try:
        data = await req.body.read(JSON_MAX_BYTES)
        return model.model_validate_json(data or b"{}")
    except BodyTooLarge as e:
        raise ApiError("too_large", f"the request body is over {e.limit_bytes} bytes") from e
    except ValidationError as e:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())) or "the body"
        raise ApiError(
            "invalid",
            f"{where}: {first.get('msg', 'not what this endpoint takes')}",
            hint=f"send a JSON {model.__name__} (see llmgw.mirror.wire)",
        ) from e


def health(ctx: MirrorContext) -> Response:
    return _ok(Health(mirror_id=ctx.store.mirror_id, version=ctx.version))


async def handle(ctx: MirrorContext, req: Request, parts: list[str]) -> Response:
    """``/v1/...`` (``parts`` %-encoded, after "v1")."""
    try:
        return await _route(ctx, req, [unquote(p) for p in parts])
    except (LlmgwError, Refused) as e:
        # Refused (a missing or wrong token) is no LlmgwError: answered 401/403, not 500.
        return wire_error_of(e)
    except Exception as e:
        log.exception("mirror: %s %s failed", req.method, req.path)
        return wire_error_of(ApiError("internal", f"the mirror failed: {e}"))


def _need(ctx: MirrorContext, req: Request, need: Need) -> None:
    ctx.auth.check(req, need)


def _part(ctx: MirrorContext, name: str, what: str):
    part = getattr(ctx, name)
    if part is None:
        raise ApiError("unavailable", f"this mirror runs without {what}", status=503)
    return part


async def _route(ctx: MirrorContext, req: Request, p: list[str]) -> Response:
    m = req.method
    store = ctx.store
    head = p[0] if p else ""
    if p == ["info"] and m == "GET":
        _need(ctx, req, "read")
        return _ok(_info(ctx))
    if p == ["revisions"] and m == "GET":
        _need(ctx, req, "read")
        kind = req.arg("kind") or None
        if kind:
            check_kind(kind)
        revs = [r.model_copy(update={"files": None}) for r in store.revisions(kind)]
        return _ok(RevisionList(revisions=revs))
    if head == "repos" and len(p) == 3:
        repo = check_repo(f"{p[1]}/{p[2]}")
        if m == "GET":
            _need(ctx, req, "read")
            revs = store.repo_revisions(repo)
            if not revs:
                raise ApiError(
                    "not_found",
                    f"the mirror holds no {repo}",
                    hint=f"add it with: llmgw ctl mirror add hf:{repo}",
                )
            return _ok(RevisionList(revisions=revs))
        if m == "DELETE":
            _need(ctx, req, "admin")
            removed = store.remove("model", repo, req.arg("revision"))
            ctx.changed()
            return _ok(removed)
    if head == "files" and len(p) == 3:
        kind = check_kind(p[1])
        name = check_file_name(p[2])
        if kind == "model":
            raise ApiError("invalid", "a model is under /v1/repos/{org}/{name}, not /v1/files")
        if m == "GET":
            _need(ctx, req, "read")
            rev = store.find(name, "", kind)
            if rev is None:
                raise ApiError("not_found", f"the mirror holds no {kind} named {name}")
            return _ok(rev)
        if m == "DELETE":
            _need(ctx, req, "admin")
            removed = store.remove(kind, name)
            ctx.changed()
            return _ok(removed)
        if m == "PUT":
            _need(ctx, req, "admin")
            uploads = _part(ctx, "uploads", "uploads")
            sha = _sha_header(req)
            rev = await uploads.put_artifact(kind, name, _stream(req), sha)
            ctx.changed()
            return _ok(rev, 201)
    if head == "pulls":
        _need(ctx, req, "admin")
        jobs = _part(ctx, "jobs", "pulls")
        if len(p) == 1 and m == "POST":
            pull_req = await _body(req, PullRequest)
            return _ok(jobs.start(pull_req), 202)
        if len(p) == 1 and m == "GET":
            return _ok(PullList(pulls=jobs.list()))
        if len(p) == 2 and m == "GET":
            pull = jobs.get(p[1])
            if pull is None:
                raise ApiError("not_found", f"no pull {p[1]!r} on this mirror")
            return _ok(pull)
        if len(p) == 3 and p[2] == "follow" and m == "GET":
            if jobs.get(p[1]) is None:
                raise ApiError("not_found", f"no pull {p[1]!r} on this mirror")
            return StreamResponse(
                200, [("Content-Type", "application/x-ndjson")], _follow(jobs, p[1])
            )
    if head == "uploads" and len(p) >= 3:
        _need(ctx, req, "admin")
        uploads = _part(ctx, "uploads", "uploads")
        upload_id = check_file_name(p[1])
        if len(p) == 3 and p[2] == "commit" and m == "POST":
            commit_req = await _body(req, CommitRequest)
            rev = await uploads.commit(upload_id, commit_req)
            ctx.changed()
            return _ok(rev, 201)
        if m == "PUT":
            entry = await uploads.put_file(
                upload_id, "/".join(p[2:]), _stream(req), _sha_header(req)
            )
            return _ok(entry, 201)
    if p == ["du"] and m == "GET":
        _need(ctx, req, "admin")
        return _ok(store.du())
    if p == ["peers"]:
        _need(ctx, req, "admin")
        peers = _part(ctx, "peers", "peers")
        if m == "GET":
            return _ok(PeerList(peers=peers.peers()))
        if m == "POST":
            peer_req = await _body(req, PeerRequest)
            return _ok(PeerList(peers=peers.add(peer_req.url)))
        if m == "DELETE":
            url = req.arg("url")
            if not url:
                raise ApiError("invalid", "say which peer: DELETE /v1/peers?url=<peer URL>")
            return _ok(PeerList(peers=peers.remove(url)))
    if p == ["state"] and m == "GET":
        _need(ctx, req, "read")
        return _ok(store.state())
    if p == ["notify"] and m == "POST":
        _need(ctx, req, "read")
        await req.body.read(JSON_MAX_BYTES)
        if ctx.peers is not None:
            ctx.peers.sync_now()
        return _ok({})
    raise ApiError(
        "not_found",
        f"no management endpoint {m} {req.path}",
        hint="the endpoints are listed in llmgw.mirror.wire",
    )


def _sha_header(req: Request) -> str:
    sha = req.header("x-llmgw-sha256").strip().lower()
    if sha and not SHA256_RE.fullmatch(sha):
        raise ApiError("invalid", f"X-Llmgw-Sha256 {sha!r} is not a sha256 (64 hex digits)")
    return sha


def _stream(req: Request) -> AsyncIterator[bytes]:
    return aiter(req.body)


def _info(ctx: MirrorContext) -> Info:
    store = ctx.store
    return Info(
        mirror_id=store.mirror_id,
        version=ctx.version,
        used_bytes=store.used_bytes(),
        max_bytes=store.max_bytes,
        free_disk_bytes=store.free_disk_bytes(),
        revisions=len(store.revisions()),
        peers=len(ctx.peers.peers()) if ctx.peers is not None else 0,
        upstream=ctx.upstream,
    )


async def _follow(jobs, pull_id: str) -> AsyncIterator[bytes]:
    async for pull in jobs.follow(pull_id):
        yield json.dumps(pull.model_dump(mode="json"), separators=(",", ":")).encode() + b"\n"
