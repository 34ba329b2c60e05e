"""A Hugging Face hub on 127.0.0.1, speaking the hub's API as huggingface_hub 2.x calls it.

The internet's hub cannot be reached from tests, so this is the one fake: a
real HTTP/1.1 server (one request per connection) that answers

    GET  /api/models/{org}/{repo}[/revision/{rev}]       the model's info; "sha" is the commit
    GET  /api/models/{org}/{repo}/tree/{rev}[/{path}]    the files (?recursive=true: all of them)
    HEAD /{org}/{repo}/resolve/{rev}/{file}              X-Repo-Commit, ETag, X-Linked-Etag, size
    GET  /{org}/{repo}/resolve/{rev}/{file}              the bytes; Range: bytes=N- answers 206

with the hub's own conventions: a tree entry's ``oid`` is the git blob id and
an LFS file's ``lfs.oid`` its sha256; a resolve's ETag is the git blob id of a
small file and the sha256 of an LFS file (also in X-Linked-Etag); errors carry
``X-Error-Code`` (RepoNotFound, RevisionNotFound, EntryNotFound). No Xet header
is ever sent, so clients download over plain HTTP.

Repositories have commits and branches that tests move:

    async with FakeHub() as hub:
        first = hub.add_repo("org/tiny", make_tiny_repo().files)   # a commit on main
        second = hub.commit("org/tiny", {"README.md": b"new"})      # main moves
        hub.cut("org/tiny", "model-00001-of-00002.safetensors", after_bytes=1000)
        hub.corrupt("org/tiny", "model-00002-of-00002.safetensors", offset=5000)
        hub.stall("org/tiny", "model.safetensors", after_bytes=1000)  # sends nothing more
        hub.fail("org/tiny", "model.safetensors", status=503)         # a server error
        hub.require_token("s3cret")   # like a mirror: 401 without "Authorization: Bearer s3cret"
        hub.url  # "http://127.0.0.1:PORT": HF_ENDPOINT, hub_url or mirror_url

For code that is not async (the CLI, huggingface_hub in a thread), ``with
FakeHub.in_thread() as hub:`` runs the same server on a loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

# The hub's default .gitattributes stores these in LFS; anything past 10 MB too.
LFS_EXTS = (
    ".safetensors",
    ".bin",
    ".gguf",
    ".pt",
    ".pth",
    ".ckpt",
    ".h5",
    ".msgpack",
    ".onnx",
    ".model",
    ".pkl",
    ".npz",
    ".zip",
)
LFS_MIN_BYTES = 10 << 20

_REASONS = {
    200: "OK",
    206: "Partial Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    416: "Range",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def git_blob_oid(data: bytes) -> str:
    """The git object id of a blob: what the hub calls a small file's oid and ETag."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The pointer file git stores in place of an LFS file."""
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    )


@dataclass(frozen=True)
class HubFile:
    """One file of a commit, with the ids the hub gives it."""

    path: str
    data: bytes
    lfs: bool

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def oid(self) -> str:
        """The git blob id: of the file, or of its LFS pointer."""
        if self.lfs:
            return git_blob_oid(lfs_pointer(self.sha256, len(self.data)))
        return git_blob_oid(self.data)

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.oid


@dataclass
class HubRepo:
    """A repository: commits by id, branches (and tags) naming them."""

    name: str
    commits: dict[str, dict[str, HubFile]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    def resolve(self, revision: str) -> str | None:
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.commits else None


@dataclass(frozen=True)
class HubRequest:
    """One request the hub answered: for tests that assert what was asked."""

    method: str
    path: str
    headers: dict[str, str]


@dataclass
class _Hook:
    repo: str
    path: str
    times: int
    after_bytes: int = -1
    offset: int = -1
    # "cut" (drop the connection after after_bytes), "stall" (send nothing
    # more after after_bytes, keeping the connection), "fail" (answer status),
    # "corrupt" (flip the byte at offset).
    kind: str = ""
    status: int = 0


class FakeHub:
    """The fake hub. ``await start()`` / ``close()``, or ``async with``."""

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        # With ``tls`` (a server context) it answers HTTPS, as a mirror with tls: does.
        self.tls = tls
        self.repos: dict[str, HubRepo] = {}
        self.requests: list[HubRequest] = []
        self.url = ""
        self._server: asyncio.Server | None = None
        self._hooks: list[_Hook] = []
        self._counter = 0
        self._lock = threading.Lock()
        # "" : open to all; else every request needs "Authorization: Bearer <token>".
        self.token = ""
        # Set at close: stalled answers end then.
        self._closing: asyncio.Event | None = None

    # -- the server ------------------------------------------------------------

    async def start(self) -> FakeHub:
        self._closing = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"
        return self

    async def close(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls) -> Iterator[FakeHub]:
        """The hub on an event loop of its own thread, for callers that are not async."""
        hub = cls()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fake-hub", daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(hub.start(), loop).result(10)
        try:
            yield hub
        finally:
            asyncio.run_coroutine_threadsafe(hub.close(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()

    # -- what tests set up -----------------------------------------------------

    def add_repo(
        self,
        repo: str,
        files: dict[str, bytes],
        *,
        branch: str = "main",
        lfs: set[str] | None = None,
    ) -> str:
        """A new repository with one commit of ``files`` on ``branch``; the commit's id."""
        if repo.count("/") != 1:
            raise ValueError(f"{repo!r}: a repository is org/name")
        self.repos[repo] = HubRepo(repo)
        return self._commit(repo, {}, files, branch, lfs)

    def commit(
        self,
        repo: str,
        files: dict[str, bytes] | None = None,
        *,
        delete: tuple[str, ...] = (),
        branch: str = "main",
        lfs: set[str] | None = None,
    ) -> str:
        """A new commit on ``branch`` (which moves): its parent's files, changed; its id."""
        r = self.repos[repo]
        parent = dict(r.commits[r.refs[branch]]) if branch in r.refs else {}
        for path in delete:
            parent.pop(path, None)
        return self._commit(repo, parent, files or {}, branch, lfs)

    def set_ref(self, repo: str, ref: str, commit: str) -> None:
        """Point a branch or tag at a commit."""
        self.repos[repo].refs[ref] = commit

    def cut(self, repo: str, path: str, *, after_bytes: int, times: int = 1) -> None:
        """The next ``times`` downloads of the file stop after ``after_bytes`` bytes of body."""
        self._hooks.append(_Hook(repo, path, times, after_bytes=after_bytes, kind="cut"))

    def stall(self, repo: str, path: str, *, after_bytes: int, times: int = 1) -> None:
        """The next ``times`` downloads send ``after_bytes`` bytes, then nothing (until close)."""
        self._hooks.append(_Hook(repo, path, times, after_bytes=after_bytes, kind="stall"))

    def fail(self, repo: str, path: str, *, status: int = 503, times: int = 1) -> None:
        """The next ``times`` downloads of the file are answered ``status`` and no bytes."""
        self._hooks.append(_Hook(repo, path, times, kind="fail", status=status))

    def require_token(self, token: str) -> None:
        """Every request needs ``Authorization: Bearer <token>`` (401 without, 403 wrong)."""
        self.token = token

    def corrupt(self, repo: str, path: str, *, offset: int, times: int = 1) -> None:
        """The next ``times`` downloads of the file carry the byte at ``offset`` flipped."""
        self._hooks.append(_Hook(repo, path, times, offset=offset, kind="corrupt"))

    def downloads(self, repo: str, path: str) -> list[HubRequest]:
        """The GETs of a file's bytes, any revision."""
        marker = f"/{repo}/resolve/"
        return [
            r
            for r in self.requests
            if r.method == "GET"
            and r.path.startswith(marker)
            and unquote(r.path.split("?", 1)[0]).endswith("/" + path)
        ]

    def _commit(self, repo, parent, files, branch, lfs) -> str:
        r = self.repos[repo]
        tree = dict(parent)
        for path, data in files.items():
            is_lfs = path in lfs if lfs is not None else _is_lfs(path, data)
            tree[path] = HubFile(path, bytes(data), is_lfs)
        self._counter += 1
        seed = json.dumps([repo, self._counter, sorted((p, f.oid) for p, f in tree.items())])
        commit = hashlib.sha1(seed.encode()).hexdigest()
        r.commits[commit] = tree
        r.refs[branch] = commit
        return commit

    def _take_hook(self, repo: str, path: str, kind: str) -> _Hook | None:
        with self._lock:
            for hook in self._hooks:
                wanted = hook.kind == kind
                if hook.repo == repo and hook.path == path and hook.times > 0 and wanted:
                    hook.times -= 1
                    return hook
        return None

    # -- HTTP ------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = (await reader.readline()).decode("latin-1").strip()
            if not line:
                return
            method, target, _ = line.split(" ", 2)
            headers: dict[str, str] = {}
            while h := (await reader.readline()).decode("latin-1").strip():
                name, _, value = h.partition(":")
                headers[name.strip().lower()] = value.strip()
            self.requests.append(HubRequest(method, target, headers))
            if self.token and not self._authorized(_Reply(writer, method), headers):
                return
            await self._route(_Reply(writer, method), method, target, headers)
        except (ConnectionError, asyncio.IncompleteReadError, ValueError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(ConnectionError):
                writer.close()

    def _authorized(self, reply: _Reply, headers: dict[str, str]) -> bool:
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given:
            self._error(reply, 401, "", "a token is needed: Authorization: Bearer <token>")
            return False
        if given.strip() != self.token:
            self._error(reply, 403, "", "the token is not this server's")
            return False
        return True

    async def _route(
        self, reply: _Reply, method: str, target: str, headers: dict[str, str]
    ) -> None:
        split = urlsplit(target)
        query = parse_qs(split.query)
        parts = split.path.strip("/").split("/")  # still %-encoded: a revision may hold "/"
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            repo = f"{unquote(parts[2])}/{unquote(parts[3])}"
            rest = parts[4:]
            if not rest:
                return self._model_info(reply, repo, "main")
            if rest[0] == "revision" and len(rest) == 2:
                return self._model_info(reply, repo, unquote(rest[1]))
            if rest[0] == "tree" and len(rest) >= 2:
                recursive = query.get("recursive", ["false"])[0].lower() in ("true", "1")
                sub = unquote("/".join(rest[2:]))
                return self._tree(reply, repo, unquote(rest[1]), sub, recursive)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = f"{unquote(parts[0])}/{unquote(parts[1])}"
            path = unquote("/".join(parts[4:]))
            return await self._resolve(reply, method, repo, unquote(parts[3]), path, headers)
        self._error(reply, 404, "", f"no route for {split.path}")

    def _found(self, reply: _Reply, repo: str, revision: str) -> tuple[HubRepo, str] | None:
        r = self.repos.get(repo)
        if r is None:
            self._error(reply, 404, "RepoNotFound", f"Repository {repo} not found")
            return None
        commit = r.resolve(revision)
        if commit is None:
            self._error(reply, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return r, commit

    def _model_info(self, reply: _Reply, repo: str, revision: str) -> None:
        found = self._found(reply, repo, revision)
        if found is None:
            return
        r, commit = found
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        body = {
            "_id": hashlib.sha1(repo.encode()).hexdigest()[:24],
            "id": repo,
            "modelId": repo,
            "author": repo.split("/")[0],
            "sha": commit,
            "lastModified": now,
            "createdAt": now,
            "private": False,
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "library_name": "transformers",
            "siblings": [{"rfilename": p} for p in sorted(r.commits[commit])],
        }
        self._json(reply, body, {"X-Repo-Commit": commit})

    def _tree(self, reply: _Reply, repo: str, revision: str, sub: str, recursive: bool) -> None:
        found = self._found(reply, repo, revision)
        if found is None:
            return
        r, commit = found
        files = r.commits[commit]
        prefix = sub.strip("/") + "/" if sub.strip("/") else ""
        if prefix and not any(p.startswith(prefix) for p in files):
            return self._error(reply, 404, "EntryNotFound", f"{sub} does not exist on {revision}")
        entries: dict[str, dict] = {}
        for path in sorted(files):
            if not path.startswith(prefix):
                continue
            rel = path[len(prefix) :]
            dirs = rel.split("/")[:-1]
            for i in range(len(dirs)):
                d = prefix + "/".join(dirs[: i + 1])
                if (i == 0 or recursive) and d not in entries:
                    entries[d] = {
                        "type": "directory",
                        "oid": hashlib.sha1(d.encode()).hexdigest(),
                        "size": 0,
                        "path": d,
                    }
            if dirs and not recursive:
                continue
            f = files[path]
            entry = {"type": "file", "oid": f.oid, "size": len(f.data), "path": path}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": len(f.data), "pointerSize": 134}
            entries[path] = entry
        self._json(reply, list(entries.values()), {})

    async def _resolve(self, reply: _Reply, method, repo, revision, path, headers) -> None:
        found = self._found(reply, repo, revision)
        if found is None:
            return
        r, commit = found
        f = r.commits[commit].get(path)
        if f is None:
            return self._error(reply, 404, "EntryNotFound", f"{path} does not exist on {revision}")
        data = f.data
        etag = f'"{f.etag}"'
        head = {
            "X-Repo-Commit": commit,
            "ETag": etag,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'inline; filename="{path.rsplit("/", 1)[-1]}"',
        }
        if f.lfs:
            head["X-Linked-Etag"] = etag
            head["X-Linked-Size"] = str(len(data))
        start, end, status = 0, len(data) - 1, 200
        rng = headers.get("range", "")
        if_range = headers.get("if-range", "")
        if rng.startswith("bytes=") and (not if_range or if_range == etag):
            first, _, last = rng[6:].partition("-")
            start = int(first or 0)
            end = min(int(last), len(data) - 1) if last else len(data) - 1
            if start >= len(data):
                head["Content-Range"] = f"bytes */{len(data)}"
                return self._send(reply, 416, head, b"")
            status = 206
            head["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        body = data[start : end + 1]
        if method == "GET" and (fail := self._take_hook(repo, path, "fail")) is not None:
            return self._error(reply, fail.status, "", f"{path}: a server error, as asked")
        if method == "GET":
            flip = self._take_hook(repo, path, "corrupt")
            if flip is not None and start <= flip.offset <= end:
                i = flip.offset - start
                body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1 :]
            cut = self._take_hook(repo, path, "cut")
            if cut is not None:
                head["Content-Length"] = str(len(body))
                self._send_head(reply, status, head)
                reply.writer.write(body[: cut.after_bytes])
                await reply.writer.drain()
                # The connection drops mid-body, as a network cut does.
                reply.writer.transport.abort()
                return
            stall = self._take_hook(repo, path, "stall")
            if stall is not None:
                head["Content-Length"] = str(len(body))
                self._send_head(reply, status, head)
                reply.writer.write(body[: stall.after_bytes])
                await reply.writer.drain()
                # Nothing more is sent, and the connection stays open: a
                # server that hangs, which only the client's read timeout ends.
                if self._closing is not None:
                    await self._closing.wait()
                reply.writer.transport.abort()
                return
        head["Content-Length"] = str(len(body))
        self._send_head(reply, status, head)
        if method == "GET":
            reply.writer.write(body)
            await reply.writer.drain()

    # -- answers -----------------------------------------------------------------

    def _send_head(self, reply: _Reply, status: int, head: dict[str, str]) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
        lines += [f"{k}: {v}" for k, v in head.items()]
        lines += [f"Date: {formatdate(usegmt=True)}", "Connection: close", "", ""]
        reply.writer.write("\r\n".join(lines).encode("latin-1"))

    def _send(self, reply: _Reply, status: int, head: dict[str, str], body: bytes) -> None:
        head = {**head, "Content-Length": str(len(body))}
        self._send_head(reply, status, head)
        if reply.method != "HEAD":
            reply.writer.write(body)

    def _json(self, reply: _Reply, obj, head: dict[str, str]) -> None:
        body = json.dumps(obj).encode()
        self._send(reply, 200, {**head, "Content-Type": "application/json"}, body)

    def _error(self, reply: _Reply, status: int, code: str, message: str) -> None:
        head = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            head["X-Error-Code"] = code
        self._send(reply, status, head, json.dumps({"error": message}).encode())


@dataclass
class _Reply:
    """The connection an answer goes to, and the method it answers (HEAD: no body)."""

    writer: asyncio.StreamWriter
    method: str


def _is_lfs(path: str, data: bytes) -> bool:
    return path.lower().endswith(LFS_EXTS) or len(data) >= LFS_MIN_BYTES
