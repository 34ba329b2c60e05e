"""``/v1/files``: upload, list, show, read and delete a project's files (OpenAI's Files API).

A file belongs to the project of the key that uploaded it (or whose batch
wrote it); to any other project's key it does not exist (404, the same words
as for an id never made). Uploads stream into the store a chunk at a time
(``filestore.py``), so every control plane serves, lists and deletes every
file; they are capped in size: ``files.max_bytes`` each,
``files.max_project_bytes`` per project. The store away is a 503 the SDKs retry.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs

from gatewayd.batches.filestore import FileStore, is_file_id
from gatewayd.batches.multipart import MultipartError, MultipartReader, boundary_of
from gatewayd.batches.objects import file_object, new_id
from gatewayd.gateway.protocol.errors import ApiError
from gatewayd.store import Store
from gatewayd.store.batch_records import FileRecord
from llmgw.config import FilesConfig
from llmgw.errors import StoreError

log = logging.getLogger(__name__)

# Room for the form's own bytes (boundaries, part headers, the purpose field)
# beside the file itself, when the body's length is checked against the cap.
FORM_OVERHEAD_BYTES = 64 * 1024
# A refused upload's body is read and dropped up to this much, so the client
# (which sends the whole body before it reads an answer) gets the 413 rather
# than a reset connection; past it the connection is simply closed.
DRAIN_MAX_BYTES = 64 * 2**20
# OpenAI's bounds on a file's expires_after[seconds].
EXPIRES_AFTER_MIN_S, EXPIRES_AFTER_MAX_S = 3600, 2_592_000
# The purposes served: uploads are batch input; batch_output is what batches write.
UPLOAD_PURPOSES = ("batch",)
FILENAME_MAX = 255


def size_words(n: int) -> str:
    """A size as server.yaml would write it: 200 MB, 64 MiB, 512 bytes."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    for unit, scale in (("KB", 10**3), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


def _too_large(cap: int) -> ApiError:
    return ApiError(
        413,
        f"the file is over the {size_words(cap)} cap on uploads (files.max_bytes in server.yaml)",
        code="file_too_large",
        param="file",
    )


def store_away(e: StoreError) -> ApiError:
    log.warning("files and batches: %s", e)
    return ApiError(
        503,
        "the store is not reachable now; try again in a few seconds",
        code="store_unavailable",
        retry_after_s=2,
    )


def no_file(file_id: str) -> ApiError:
    return ApiError(404, f"no file {file_id!r}", code="file_not_found", param="file_id")


def query(call) -> dict[str, str]:
    raw = call.scope.get("query_string", b"").decode("latin-1")
    return {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}


def int_param(q: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = q.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"{name} must be a whole number", param=name) from None
    if not low <= value <= high:
        raise ApiError(400, f"{name} must be between {low} and {high}", param=name)
    return value


class FilesApi:
    def __init__(self, store: Store, files: FileStore, cfg: FilesConfig) -> None:
        self._store, self._files, self._cfg = store, files, cfg

    async def handle(self, call) -> None:
        try:
            return await self._handle(call)
        except StoreError as e:
            if call.started:
                raise
            raise store_away(e) from None

    async def _handle(self, call) -> None:
        parts = call.path.removeprefix("/v1/files").strip("/").split("/")
        method = call.method
        if parts == [""]:
            if method == "POST":
                return await self._upload(call)
            if method == "GET":
                return await self._list(call)
            raise ApiError(405, "/v1/files takes GET or POST", code="method_not_allowed")
        if len(parts) == 1 and method in ("GET", "DELETE"):
            rec = await self.owned(call.key.project_id, parts[0])
            if method == "GET":
                return await call.json(200, file_object(rec))
            return await self._delete(call, rec)
        if len(parts) == 2 and parts[1] == "content" and method == "GET":
            return await self._content(call, await self.owned(call.key.project_id, parts[0]))
        raise ApiError(404, f"no route for {method} {call.path}", code="unknown_route")

    async def owned(self, project_id: str, file_id: str) -> FileRecord:
        """The project's file ``file_id`` (by the project's id); 404 when it is none,
        another's, or expired."""
        rec = await self._store.get_file(file_id) if is_file_id(file_id) else None
        if rec is None or rec.project_id != project_id:
            raise no_file(file_id)
        if rec.expires_at is not None and rec.expires_at <= datetime.now(UTC):
            raise no_file(file_id)
        return rec

    async def _list(self, call) -> None:
        q = query(call)
        order = q.get("order", "desc")
        if order not in ("asc", "desc"):
            raise ApiError(400, "order must be asc or desc", param="order")
        limit = int_param(q, "limit", 10_000, 1, 10_000)
        recs = await self._store.list_files(
            call.key.project_id,
            purpose=q.get("purpose", ""),
            after=q.get("after", ""),
            limit=limit + 1,
            ascending=order == "asc",
        )
        now = datetime.now(UTC)
        recs = [r for r in recs if r.expires_at is None or r.expires_at > now]
        data = [file_object(r) for r in recs[:limit]]
        await call.json(
            200,
            {
                "object": "list",
                "data": data,
                # Strings, required by OpenAI's description: "" for an empty list.
                "first_id": data[0]["id"] if data else "",
                "last_id": data[-1]["id"] if data else "",
                "has_more": len(recs) > limit,
            },
        )

    async def _delete(self, call, rec: FileRecord) -> None:
        # Its bytes with it (an input a batch still reads keeps them until the batch ends).
        await self._store.delete_file(rec.file_id)
        await call.json(200, {"id": rec.file_id, "object": "file", "deleted": True})

    async def _content(self, call, rec: FileRecord) -> None:
        chunks = self._files.chunks(rec.file_id)
        first = await anext(chunks, b"")
        if not first and rec.bytes:
            log.warning("the file %s is recorded but its bytes are not in the store", rec.file_id)
            raise no_file(rec.file_id)
        await call.send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/octet-stream"),
                    (b"content-length", str(rec.bytes).encode()),
                    call.clock.header(),
                ],
            }
        )
        await call.send({"type": "http.response.body", "body": first, "more_body": True})
        async for chunk in chunks:
            await call.send({"type": "http.response.body", "body": chunk, "more_body": True})
        await call.send({"type": "http.response.body", "body": b""})

    # ---- upload ------------------------------------------------------------

    async def _upload(self, call) -> None:
        cap = self._cfg.max_bytes
        try:
            reader = MultipartReader(boundary_of(call.header(b"content-type")))
        except MultipartError as e:
            raise ApiError(400, str(e), code="invalid_form") from None
        length = call.header(b"content-length")
        if length.isdigit() and int(length) > cap + FORM_OVERHEAD_BYTES:
            await self._drain(call)
            raise _too_large(cap)
        fields: dict[str, str] = {}
        filename: str | None = None
        upload = self._files.new_upload(new_id("file-"))
        try:
            await upload.start()
            current, over, seen = None, False, 0
            while True:
                msg = await call.receive()
                if msg["type"] == "http.disconnect":
                    raise ApiError(400, "the client went away before the upload was whole")
                seen += len(msg.get("body", b""))
                if over and seen > cap + DRAIN_MAX_BYTES:
                    raise _too_large(cap)
                try:
                    events = list(reader.feed(msg.get("body", b"")))
                except MultipartError as e:
                    raise ApiError(400, str(e), code="invalid_form") from None
                for ev in events:
                    if ev is None:
                        current = None
                    elif not isinstance(ev, bytes):
                        current = ev
                        if ev.name == "file" and ev.filename is not None:
                            filename = ev.filename
                    elif current is not None and current.name == "file" and not over:
                        if upload.size + len(ev) > cap:
                            over = True
                        else:
                            await upload.write(ev)
                    elif current is not None and current.name != "file":
                        value = fields.get(current.name, "") + ev.decode("utf-8", "replace")
                        if len(value) > 1024:
                            raise ApiError(400, f"the form field {current.name} is too long")
                        fields[current.name] = value
                if not msg.get("more_body"):
                    break
            if over:
                raise _too_large(cap)
            if not reader.done:
                raise ApiError(
                    400, "the form ends before its closing boundary", code="invalid_form"
                )
            rec = await self._check(call, fields, filename, upload)
            await upload.keep(rec)
        except BaseException:
            await upload.discard()
            raise
        await call.json(200, file_object(rec))

    async def _check(self, call, fields: dict[str, str], filename, upload) -> FileRecord:
        size = upload.size
        purpose = fields.get("purpose", "")
        if not purpose:
            raise ApiError(400, "purpose is required: batch", param="purpose")
        if purpose not in UPLOAD_PURPOSES:
            raise ApiError(
                400,
                f"purpose {purpose!r} is not served here: files are uploaded for batch",
                param="purpose",
            )
        if filename is None:
            raise ApiError(400, "the form has no file part", param="file")
        quota = self._cfg.max_project_bytes
        if await self._store.project_file_bytes(call.key.project_id) + size > quota:
            raise ApiError(
                413,
                f"the project's files would be over its {size_words(quota)} cap"
                " (files.max_project_bytes in server.yaml): delete some first",
                code="project_files_full",
                param="file",
            )
        expires_s = self._cfg.expire_after
        seconds = fields.get("expires_after[seconds]", "")
        if seconds:
            if not seconds.isdigit() or not (
                EXPIRES_AFTER_MIN_S <= int(seconds) <= EXPIRES_AFTER_MAX_S
            ):
                raise ApiError(
                    400,
                    f"expires_after[seconds] must be between {EXPIRES_AFTER_MIN_S}"
                    f" and {EXPIRES_AFTER_MAX_S}",
                    param="expires_after",
                )
            expires_s = min(expires_s, int(seconds))
        now = datetime.now(UTC)
        return FileRecord(
            file_id=upload.file_id,
            project_id=call.key.project_id,
            project=call.key.project,
            key_id=call.key.key_id,
            filename=(filename.replace("/", "_").replace("\\", "_") or "file")[:FILENAME_MAX],
            purpose=purpose,
            bytes=size,
            created_at=now,
            expires_at=now + timedelta(seconds=expires_s),
        )

    async def _drain(self, call) -> None:
        seen = 0
        while seen <= DRAIN_MAX_BYTES:
            msg = await call.receive()
            if msg["type"] == "http.disconnect":
                return
            seen += len(msg.get("body", b""))
            if not msg.get("more_body"):
                return
