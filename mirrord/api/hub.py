"""The Hugging Face hub API, as huggingface_hub 2.x, the hf CLI and engines built on them call it.

    GET       /api/models/{org}/{name}[/revision/{rev}]     model info: sha, siblings
    GET       /api/models/{org}/{name}/tree/{rev}[/{path}]  entries (?recursive), Link-paginated
    GET       /api/models/{org}/{name}/refs                 the refs held (branches, pull requests)
    POST      /api/models/{org}/{name}/paths-info/{rev}     entries of the paths asked
    HEAD|GET  /{org}/{name}/resolve/{rev}/{path}            the file, with Range
    GET       /api/whoami-v2                                who the token is

A revision arrives %-quoted (``refs%2Fpr%2F1``) and is a commit held here or
a ref the store points at a held commit; "main" on a repository with no such
ref names its newest revision (an upload's, a peer's). The ids are the hub's:
a small file's oid and ETag are its git blob id; an LFS file's ETag (and
X-Linked-Etag) is its sha256, which names the client's cache blob, and its
tree oid the git id of its pointer. A file held without a git id (an upload)
is served as an LFS file, so every mirror gives it the same ETag. No Xet
header is ever sent: the client then downloads over plain HTTP from us.
"""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from urllib.parse import parse_qs, quote, unquote

from llmgw.mirror.names import NameRefused, check_file_path, check_repo, check_revision
from llmgw.mirror.wire import FileEntry, Revision
from mirrord.api.context import MirrorContext
from mirrord.api.errors import hub_error, hub_refused
from mirrord.http.auth import Refused
from mirrord.http.messages import Request, Response
from mirrord.http.ranges import serve_file

# Entries per page of a tree listing (the hub's own page for a plain listing).
TREE_PAGE = 1000
# The body of paths-info: a form of paths, small.
PATHS_INFO_MAX_BYTES = 4 << 20


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix or 0, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def _lfs_pointer(f: FileEntry) -> bytes:
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{f.sha256}\nsize {f.size}\n"
    ).encode()


def is_lfs(f: FileEntry) -> bool:
    """Served as an LFS file: one, or one held without a git id."""
    return f.lfs or not f.git_oid


def etag_of(f: FileEntry) -> str:
    return f.sha256 if is_lfs(f) else f.git_oid


def file_entry(f: FileEntry, rev: Revision, expand: bool) -> dict:
    entry: dict = {"type": "file", "path": f.path, "size": f.size}
    if is_lfs(f):
        pointer = _lfs_pointer(f)
        entry["oid"] = _git_blob_oid(pointer)
        entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": len(pointer)}
    else:
        entry["oid"] = f.git_oid
    if expand:
        entry["lastCommit"] = {"id": rev.commit, "title": "", "date": _iso(rev.added_unix)}
    return entry


def dir_entry(path: str, rev: Revision) -> dict:
    oid = hashlib.sha1(f"tree {rev.commit} {path}".encode()).hexdigest()
    return {"type": "directory", "oid": oid, "size": 0, "path": path}


# -- finding what was asked ------------------------------------------------------------


class _HubMiss(Exception):
    def __init__(self, error_code: str, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


def _revision(ctx: MirrorContext, repo: str, revision: str) -> Revision:
    try:
        check_repo(repo)
    except NameRefused as e:
        raise _HubMiss("RepoNotFound", f"Repository {repo} not found: {e.message}") from e
    if not ctx.store.has_repo(repo):
        raise _HubMiss(
            "RepoNotFound",
            f"Repository {repo} not found on this mirror "
            f"(add it with: llmgw ctl mirror add hf:{repo})",
        )
    try:
        check_revision(revision)
    except NameRefused as e:
        raise _HubMiss("RevisionNotFound", f"Invalid rev id: {revision}") from e
    rev = ctx.store.find(repo, "" if revision == "main" else revision)
    if rev is None:
        raise _HubMiss(
            "RevisionNotFound",
            f"Invalid rev id: {revision} (this mirror holds no such revision of {repo}; "
            f"add it with: llmgw ctl mirror add hf:{repo}@{revision})",
        )
    return rev


def _miss(e: _HubMiss) -> Response:
    return hub_error(404, e.error_code, e.message)


# -- routes ------------------------------------------------------------------------------


async def api(ctx: MirrorContext, req: Request, parts: list[str]) -> Response:
    """``/api/...``: ``parts`` are the %-encoded path elements after "api"."""
    try:
        ctx.auth.check(req, "read")
    except Refused as e:
        return hub_refused(e)
    if parts == ["whoami-v2"]:
        return _whoami()
    if len(parts) >= 3 and parts[0] in ("datasets", "spaces"):
        kind = parts[0][:-1]
        return hub_error(
            404, "RepoNotFound", f"this mirror holds models only, not the {kind} asked for"
        )
    if len(parts) < 3 or parts[0] != "models":
        return hub_error(404, "", f"no such hub route: {req.path}")
    repo = f"{unquote(parts[1])}/{unquote(parts[2])}"
    rest = parts[3:]
    try:
        if not rest:
            return _model_info(ctx, req, repo, "main")
        if rest[0] == "revision" and len(rest) >= 2:
            return _model_info(ctx, req, repo, unquote("/".join(rest[1:])))
        if rest[0] == "tree" and len(rest) >= 2:
            sub = unquote("/".join(rest[2:])).strip("/")
            return _tree(ctx, req, repo, unquote(rest[1]), sub)
        if rest == ["refs"]:
            return _refs(ctx, repo)
        if rest[0] == "paths-info" and len(rest) >= 2 and req.method == "POST":
            return await _paths_info(ctx, req, repo, unquote("/".join(rest[1:])))
    except _HubMiss as e:
        return _miss(e)
    return hub_error(404, "", f"no such hub route: {req.path}")


def _whoami() -> Response:
    # Only a reader gets here: the admin token reads nothing (mirrord/http/auth.py).
    return Response.json(
        {
            "type": "user",
            "id": "llmgw-mirror",
            "name": "llmgw-mirror",
            "fullname": "llmgw mirror reader",
            "isPro": False,
            "orgs": [],
            "auth": {
                "type": "access_token",
                "accessToken": {"displayName": "mirror read token", "role": "read"},
            },
        }
    )


def _model_info(ctx: MirrorContext, req: Request, repo: str, revision: str) -> Response:
    rev = _revision(ctx, repo, revision)
    files = rev.files or []
    siblings = []
    for f in files:
        s: dict = {"rfilename": f.path, "size": f.size}
        e = file_entry(f, rev, False)
        s["blobId"] = e["oid"]
        if "lfs" in e:
            s["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": e["lfs"]["pointerSize"]}
        siblings.append(s)
    when = _iso(rev.added_unix)
    body = {
        "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
        "id": repo,
        "modelId": repo,
        "author": repo.split("/")[0],
        "sha": rev.commit,
        "lastModified": when,
        "createdAt": when,
        "private": False,
        "disabled": False,
        "gated": False,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "siblings": siblings,
        "usedStorage": rev.size_bytes,
    }
    return Response.json(body, headers=[("X-Repo-Commit", rev.commit)])


def _refs(ctx: MirrorContext, repo: str) -> Response:
    _revision(ctx, repo, "main")  # RepoNotFound when none is held
    branches, prs = [], []
    for rev in ctx.store.repo_revisions(repo):
        for ref in rev.refs:
            if ref.startswith("refs/pr/"):
                prs.append({"name": ref, "ref": ref, "targetCommit": rev.commit})
            else:
                item = {"name": ref, "ref": f"refs/heads/{ref}", "targetCommit": rev.commit}
                branches.append(item)
    # Tags and branches are one kind of ref here: the store keeps names, not git's kinds.
    body = {"branches": branches, "tags": [], "converts": [], "pullRequests": prs}
    return Response.json(body)


def _entries(rev: Revision, sub: str, recursive: bool, expand: bool) -> list[dict] | None:
    """The tree under ``sub`` ("" the root), directories before files at each level; None: none."""
    prefix = f"{sub}/" if sub else ""
    dirs: dict[str, dict] = {}
    files: list[dict] = []
    for f in sorted(rev.files or [], key=lambda f: f.path):
        if not f.path.startswith(prefix):
            continue
        rel = f.path[len(prefix) :].split("/")
        for depth in range(1, len(rel)):
            if depth > 1 and not recursive:
                break
            d = prefix + "/".join(rel[:depth])
            dirs.setdefault(d, dir_entry(d, rev))
        if len(rel) == 1 or recursive:
            files.append(file_entry(f, rev, expand))
    if not dirs and not files:
        return None
    return [*dirs.values(), *files]


def _tree(ctx: MirrorContext, req: Request, repo: str, revision: str, sub: str) -> Response:
    rev = _revision(ctx, repo, revision)
    recursive = req.arg("recursive").lower() in ("true", "1")
    expand = req.arg("expand").lower() in ("true", "1")
    entries = _entries(rev, sub, recursive, expand)
    if entries is None:
        if not sub:
            return Response.json([], headers=[("X-Repo-Commit", rev.commit)])
        raise _HubMiss("EntryNotFound", f"{sub} does not exist on {revision}")
    start = _cursor_offset(req.arg("cursor"))
    try:
        limit = max(1, min(int(req.arg("limit") or TREE_PAGE), TREE_PAGE))
    except ValueError:
        limit = TREE_PAGE
    page = entries[start : start + limit]
    headers = [("X-Repo-Commit", rev.commit)]
    if start + limit < len(entries):
        query = [("cursor", _cursor(start + limit))]
        for name in ("recursive", "expand", "limit"):
            if req.arg(name):
                query.append((name, req.arg(name)))
        path = req.path
        q = "&".join(f"{k}={quote(v, safe='')}" for k, v in query)
        headers.append(("Link", f'<{req.base_url()}{path}?{q}>; rel="next"'))
    return Response.json(page, headers=headers)


def _cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(str(offset).encode()).decode().rstrip("=")


def _cursor_offset(cursor: str) -> int:
    if not cursor:
        return 0
    try:
        return max(0, int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))))
    except ValueError:
        return 0


async def _paths_info(ctx: MirrorContext, req: Request, repo: str, revision: str) -> Response:
    rev = _revision(ctx, repo, revision)
    raw = await req.body.read(PATHS_INFO_MAX_BYTES)
    if "json" in req.header("content-type"):
        try:
            obj = json.loads(raw or b"{}")
        except ValueError:
            return hub_error(400, "", "the body is not JSON")
        paths = obj.get("paths") or []
        paths = [paths] if isinstance(paths, str) else list(paths)
        expand = bool(obj.get("expand"))
    else:
        form = parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True)
        paths = form.get("paths", [])
        expand = (form.get("expand") or ["false"])[0].lower() in ("true", "1")
    by_path = {f.path: f for f in rev.files or []}
    out = []
    for p in paths:
        p = str(p).strip("/")
        if p in by_path:
            out.append(file_entry(by_path[p], rev, expand))
        elif p and any(path.startswith(p + "/") for path in by_path):
            out.append(dir_entry(p, rev))
    return Response.json(out, headers=[("X-Repo-Commit", rev.commit)])


async def resolve(ctx: MirrorContext, req: Request, parts: list[str]) -> Response:
    """``/{org}/{name}/resolve/{rev}/{path…}`` (``parts`` %-encoded, "resolve" third)."""
    try:
        ctx.auth.check(req, "read")
    except Refused as e:
        return hub_refused(e)
    if req.method not in ("GET", "HEAD"):
        return hub_error(405, "", "files are read with GET or HEAD")
    repo = f"{unquote(parts[0])}/{unquote(parts[1])}"
    revision = unquote(parts[3])
    path = unquote("/".join(parts[4:]))
    try:
        rev = _revision(ctx, repo, revision)
    except _HubMiss as e:
        return _miss(e)
    try:
        check_file_path(path)
        held = ctx.store.file(repo, rev.commit, path)
    except NameRefused:
        held = None
    if held is None:
        return hub_error(
            404,
            "EntryNotFound",
            f"{path} does not exist on {revision} of {repo}",
            [("X-Repo-Commit", rev.commit)],
        )
    f, blob = held
    name = path.rsplit("/", 1)[-1]
    headers = [
        ("X-Repo-Commit", rev.commit),
        ("Content-Disposition", f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\""),
    ]
    if revision == rev.commit:
        # A commit's files never change; a ref's may move to another commit.
        headers.append(("Cache-Control", "public, max-age=31536000, immutable"))
    if is_lfs(f):
        headers += [("X-Linked-Etag", f'"{f.sha256}"'), ("X-Linked-Size", str(f.size))]
    return serve_file(req, blob, f.size, etag_of(f), headers)
