"""The mirror's one handler: each request to the part that answers it, by the path's start.

/health                     no credential
/v1/…                       the management API (manage.py)
/api/…                      the hub API (hub.py)
/simple/…                   the package index (files.py)
/files/{kind}/{name}        wheels and engine archives by name (files.py)
/blobs/sha256/{sha256}      blobs by digest (files.py)
/{org}/{name}/resolve/…     files of a model revision (hub.py)
"""

from __future__ import annotations

from mirrord.api import files, hub, manage
from mirrord.api.context import MirrorContext
from mirrord.api.errors import hub_error, wire_error
from mirrord.http.messages import Request, Response


class MirrorApp:
    """``await app(req)``: the answer to one request."""

    def __init__(self, ctx: MirrorContext) -> None:
        self.ctx = ctx
        self._pythons = files.RequiresPython()

    async def __call__(self, req: Request):
        # Split while still %-encoded: a revision may hold a quoted "/".
        parts = req.path.strip("/").split("/")
        head = parts[0]
        if req.path == "/health":
            return manage.health(self.ctx)
        if head == "v1":
            return await manage.handle(self.ctx, req, parts[1:])
        if head == "api":
            return await hub.api(self.ctx, req, parts[1:])
        if head == "simple":
            return await files.simple(self.ctx, req, parts[1:], self._pythons)
        if head == "files" and len(parts) == 3 and parts[1] in ("wheel", "engine"):
            return await files.named_file(self.ctx, req, parts[1], parts[2])
        if head == "blobs" and len(parts) == 3 and parts[1] == "sha256":
            return await files.blob(self.ctx, req, parts[2])
        if len(parts) >= 5 and parts[2] == "resolve":
            return await hub.resolve(self.ctx, req, parts)
        if len(parts) >= 6 and head in ("datasets", "spaces") and parts[3] == "resolve":
            return hub_error(404, "RepoNotFound", "this mirror holds models only")
        if req.path == "/":
            return Response(200, [("Content-Type", "text/plain")], b"llmgw mirror\n")
        return wire_error(404, "not_found", f"nothing is served at {req.path}")
