"""A mirror's management API (llmgw/mirror/wire.py) on 127.0.0.1, held in memory.

For the control plane's side only, where a test is about what gatewayd asks
and does with the answers (the tokens it sends, which mirror it asks, how it
follows a pull). The real daemon's own behaviour is tested in tests/mirrord/.
A pull of ``hf:org/name[@rev]`` is held at once (queued, fetching, done),
or, with ``gate`` set, waits at half until the test sets it; a source with
"missing" fails as an upstream without the repository does.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass, field
from typing import Self

from aiohttp import web

from llmgw.mirror import wire

READ, ADMIN = "read-token", "admin-token"


@dataclass
class Seen:
    method: str
    path: str
    authorization: str
    headers: dict[str, str] = field(default_factory=dict)


class WireFake:
    def __init__(self, *, read_token: str = READ, admin_token: str = ADMIN) -> None:
        self.read_token, self.admin_token = read_token, admin_token
        self.mirror_id = "fake-" + hashlib.sha1(str(id(self)).encode()).hexdigest()[:8]
        self.revisions: list[wire.Revision] = []
        self.pulls: dict[str, wire.Pull] = {}
        self.uploads: dict[str, dict[str, wire.FileEntry]] = {}
        self.bodies: dict[str, bytes] = {}
        self.peers: list[wire.Peer] = []
        self.seen: list[Seen] = []
        self.gate: asyncio.Event | None = None
        self._logs: dict[str, list[wire.Pull]] = {}
        self._events: dict[str, asyncio.Event] = {}
        self.at_half = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> Self:
        app = web.Application(middlewares=[self._record])
        r = app.router
        r.add_get("/health", self._health)
        r.add_get("/v1/info", self._info)
        r.add_get("/v1/revisions", self._list)
        r.add_get("/v1/repos/{org}/{name}", self._repo)
        r.add_delete("/v1/repos/{org}/{name}", self._rm_repo)
        r.add_get("/v1/files/{kind}/{name}", self._file)
        r.add_put("/v1/files/{kind}/{name}", self._put_file)
        r.add_delete("/v1/files/{kind}/{name}", self._rm_file)
        r.add_post("/v1/pulls", self._start_pull)
        r.add_get("/v1/pulls", self._pulls)
        r.add_get("/v1/pulls/{id}", self._pull)
        r.add_get("/v1/pulls/{id}/follow", self._follow)
        r.add_post("/v1/uploads/{id}/commit", self._commit)
        r.add_put("/v1/uploads/{id}/{path:.+}", self._upload)
        r.add_get("/v1/du", self._du)
        r.add_get("/v1/peers", self._peers)
        r.add_post("/v1/peers", self._add_peer)
        r.add_delete("/v1/peers", self._rm_peer)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc) -> None:
        if self.gate is not None:
            self.gate.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def hold(self, repo: str, commit: str, files: dict[str, bytes], refs=("main",)) -> None:
        entries = [
            wire.FileEntry(path=p, size=len(b), sha256=hashlib.sha256(b).hexdigest(), lfs=True)
            for p, b in sorted(files.items())
        ]
        self.revisions.insert(
            0,
            wire.Revision(
                repo=repo,
                commit=commit,
                refs=list(refs),
                size_bytes=sum(e.size for e in entries),
                file_count=len(entries),
                files=entries,
                added_unix=time.time(),
                source=f"hf:{repo}",
            ),
        )

    # -- plumbing -----------------------------------------------------------------------

    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.seen.append(
            Seen(
                request.method,
                request.path,
                request.headers.get("Authorization", ""),
                dict(request.headers),
            )
        )
        return await handler(request)

    @staticmethod
    def _error(status: int, code: str, message: str, hint: str = "") -> web.Response:
        body = wire.ErrorBody(error=wire.ErrorDetail(code=code, message=message, hint=hint))
        return web.json_response(body.model_dump(mode="json"), status=status)

    def _refused(self, request: web.Request, need: str) -> web.Response | None:
        got = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if not got:
            return self._error(401, "unauthorized", "a token is needed")
        allowed = {self.admin_token} if need == "admin" else {self.admin_token, self.read_token}
        if got not in allowed:
            return self._error(403, "forbidden", f"the token is not this mirror's {need} token")
        return None

    @staticmethod
    def _json(model, status: int = 200) -> web.Response:
        return web.json_response(model.model_dump(mode="json"), status=status)

    def _listed(self) -> list[wire.Revision]:
        return [r.model_copy(update={"files": None}) for r in self.revisions]

    # -- reads --------------------------------------------------------------------------

    async def _health(self, request):
        return self._json(wire.Health(mirror_id=self.mirror_id, version="test"))

    async def _info(self, request):
        if refused := self._refused(request, "read"):
            return refused
        used = sum(r.size_bytes for r in self.revisions)
        return self._json(
            wire.Info(
                mirror_id=self.mirror_id,
                version="test",
                used_bytes=used,
                max_bytes=10 << 30,
                free_disk_bytes=100 << 30,
                revisions=len(self.revisions),
                peers=len(self.peers),
            )
        )

    async def _list(self, request):
        if refused := self._refused(request, "read"):
            return refused
        return self._json(wire.RevisionList(revisions=self._listed()))

    async def _repo(self, request):
        if refused := self._refused(request, "read"):
            return refused
        repo = f"{request.match_info['org']}/{request.match_info['name']}"
        found = [r for r in self.revisions if r.repo == repo and r.kind == "model"]
        if not found:
            return self._error(404, "not_found", f"this mirror holds no {repo}")
        return self._json(wire.RevisionList(revisions=found))

    async def _file(self, request):
        if refused := self._refused(request, "read"):
            return refused
        kind, name = request.match_info["kind"], request.match_info["name"]
        for r in self.revisions:
            if r.kind == kind and r.repo == name:
                return self._json(r)
        return self._error(404, "not_found", f"this mirror holds no {kind} {name}")

    # -- changes ------------------------------------------------------------------------

    def _remove(self, keep) -> web.Response:
        gone = [r for r in self.revisions if not keep(r)]
        self.revisions = [r for r in self.revisions if keep(r)]
        if not gone:
            return self._error(404, "not_found", "nothing of that is held")
        freed = sum(r.size_bytes for r in gone)
        return self._json(wire.Removed(removed=gone, freed_bytes=freed))

    async def _rm_repo(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        repo = f"{request.match_info['org']}/{request.match_info['name']}"
        rev = request.query.get("revision", "")
        return self._remove(
            lambda r: not (r.repo == repo and (not rev or rev == r.commit or rev in r.refs))
        )

    async def _rm_file(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        kind, name = request.match_info["kind"], request.match_info["name"]
        return self._remove(lambda r: not (r.kind == kind and r.repo == name))

    async def _put_file(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        kind, name = request.match_info["kind"], request.match_info["name"]
        body = await request.read()
        sha = hashlib.sha256(body).hexdigest()
        if request.headers.get("X-Llmgw-Sha256", sha) != sha:
            return self._error(400, "invalid", f"{name} is not the file its sha256 names")
        self.bodies[f"{kind}/{name}"] = body
        rev = wire.Revision(
            kind=kind,
            repo=name,
            commit=sha,
            size_bytes=len(body),
            file_count=1,
            files=[wire.FileEntry(path=name, size=len(body), sha256=sha)],
            added_unix=time.time(),
            source="upload",
        )
        self.revisions.insert(0, rev)
        return self._json(rev)

    async def _upload(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        upload, path = request.match_info["id"], request.match_info["path"]
        body = await request.read()
        sha = hashlib.sha256(body).hexdigest()
        if request.headers.get("X-Llmgw-Sha256", sha) != sha:
            return self._error(400, "invalid", f"{path} is not the file its sha256 names")
        entry = wire.FileEntry(path=path, size=len(body), sha256=sha)
        self.uploads.setdefault(upload, {})[path] = entry
        self.bodies[f"{upload}/{path}"] = body
        return self._json(entry)

    async def _commit(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        req = wire.CommitRequest.model_validate(await request.json())
        files = sorted(
            self.uploads.pop(request.match_info["id"], {}).values(), key=lambda f: f.path
        )
        lines = "".join(f"{f.path} {f.sha256}\n" for f in files)
        rev = wire.Revision(
            repo=req.repo,
            commit=hashlib.sha1(lines.encode()).hexdigest(),
            refs=[req.ref],
            size_bytes=sum(f.size for f in files),
            file_count=len(files),
            files=files,
            added_unix=time.time(),
            source="upload",
        )
        self.revisions.insert(0, rev)
        return self._json(rev)

    async def _start_pull(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        req = wire.PullRequest.model_validate(await request.json())
        if "quota" in req.source:
            return self._error(
                507, "quota", "it would pass the quota", hint="remove org/big (2 GB) first"
            )
        pull_id = f"p{len(self.pulls) + 1}"
        repo, _, rev = req.source.removeprefix("hf:").partition("@")
        pull = wire.Pull(pull_id=pull_id, source=req.source, repo=repo, started_unix=time.time())
        self.pulls[pull_id] = pull
        asyncio.get_running_loop().create_task(self._run(pull, rev or "main"))
        return self._json(pull, status=202)

    async def _run(self, pull: wire.Pull, ref: str) -> None:
        self._changed(pull, state="fetching", bytes_total=1000, files_total=2, file="a.bin")
        self._changed(pull, bytes_done=500, files_done=1, rate_bytes_s=500.0, eta_s=1.0)
        self.at_half.set()
        if self.gate is not None:
            await self.gate.wait()
        if "missing" in pull.source:
            error = wire.ErrorDetail(code="not_found", message=f"{pull.repo} is not on the hub")
            self._changed(pull, state="failed", error=error, finished_unix=time.time())
            return
        commit = hashlib.sha1(pull.source.encode()).hexdigest()
        self.hold(pull.repo, commit, {"a.bin": b"a" * 500, "b.bin": b"b" * 500}, refs=(ref,))
        self._changed(
            pull,
            state="done",
            commit=commit,
            bytes_done=1000,
            files_done=2,
            eta_s=0.0,
            finished_unix=time.time(),
            revision=self.revisions[0],
        )

    def _changed(self, pull: wire.Pull, **update) -> None:
        for k, v in update.items():
            setattr(pull, k, v)
        self._log(pull).append(pull.model_copy(deep=True))
        self._log_changed(pull).set()

    def _log(self, pull: wire.Pull) -> list[wire.Pull]:
        """Every view of a pull so far, in order: what a follow sends."""
        return self._logs.setdefault(pull.pull_id, [])

    def _log_changed(self, pull: wire.Pull) -> asyncio.Event:
        return self._events.setdefault(pull.pull_id, asyncio.Event())

    async def _pulls(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        return self._json(wire.PullList(pulls=list(self.pulls.values())))

    async def _pull(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        pull = self.pulls.get(request.match_info["id"])
        if pull is None:
            return self._error(404, "not_found", "no such pull")
        return self._json(pull)

    async def _follow(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        pull = self.pulls.get(request.match_info["id"])
        if pull is None:
            return self._error(404, "not_found", "no such pull")
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        sent = 0
        while True:
            log = self._log(pull)
            while sent < len(log):
                await resp.write(log[sent].model_dump_json().encode() + b"\n")
                sent += 1
                if log[sent - 1].state in ("done", "failed"):
                    await resp.write_eof()
                    return resp
            event = self._log_changed(pull)
            event.clear()
            if sent < len(self._log(pull)):
                continue
            await event.wait()

    async def _du(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        biggest = sorted(self._listed(), key=lambda r: r.size_bytes, reverse=True)
        return self._json(
            wire.Du(
                used_bytes=sum(r.size_bytes for r in self.revisions),
                max_bytes=10 << 30,
                free_disk_bytes=100 << 30,
                revisions=biggest,
            )
        )

    async def _peers(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        return self._json(wire.PeerList(peers=self.peers))

    async def _add_peer(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        req = wire.PeerRequest.model_validate(await request.json())
        self.peers.append(wire.Peer(url=req.url, state="unknown"))
        return self._json(wire.PeerList(peers=self.peers))

    async def _rm_peer(self, request):
        if refused := self._refused(request, "admin"):
            return refused
        url = request.query.get("url", "")
        self.peers = [p for p in self.peers if p.url != url]
        return self._json(wire.PeerList(peers=self.peers))
