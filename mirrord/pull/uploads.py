"""Uploads: local files made into a model revision, and wheels and engine archives put whole.

A model is uploaded a file at a time under an upload id the client picks
(``PUT /v1/uploads/{upload}/{path}``), then committed as one revision
(``POST /v1/uploads/{upload}/commit``). Until the commit the files wait in
incoming/uploads/<upload>/ with a list of what came, so a client that lost
its connection sends only what is missing. The commit id is sha1 over the
sorted ``"path sha256\\n"`` lines: the same files make the same commit on
every mirror, so two mirrors given the same upload agree without talking.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import shutil
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

from llmgw.catalog.model import is_pickled
from llmgw.fsutil import write_atomic
from llmgw.mirror.names import (
    SHA256_RE,
    check_file_name,
    check_file_path,
    check_repo,
    check_revision,
)
from llmgw.mirror.wire import CommitRequest, FileEntry, Revision
from mirrord.pull.errors import DigestMismatch, PullError, PullInvalid
from mirrord.pull.select import refuse_pickles

# Bytes gathered before one write (and hash) in a thread.
WRITE_BYTES = 4 << 20


def upload_commit(files: list[FileEntry]) -> str:
    """The commit id of an upload: sha1 of its sorted "path sha256" lines (40 hex)."""
    lines = "".join(f"{f.path} {f.sha256}\n" for f in sorted(files, key=lambda f: f.path))
    return hashlib.sha1(lines.encode()).hexdigest()


def _append(path: Path, data: bytes, h) -> None:
    with open(path, "ab") as f:
        f.write(data)
    h.update(data)


def _check_sha(sha256: str, what: str) -> str:
    if sha256 and not SHA256_RE.fullmatch(sha256):
        raise PullInvalid(
            f"{what}: {sha256!r} is not a sha256 (64 lowercase hex digits)",
            hint="give the file's sha256 as sha256sum prints it",
        )
    return sha256


def _is_wheel(path: Path) -> bool:
    """A zip with a ``*.dist-info/METADATA``: what pip reads a wheel's name and version from."""
    try:
        with zipfile.ZipFile(path) as z:
            return any(
                n.count("/") == 1
                and n.split("/")[0].endswith(".dist-info")
                and n.endswith("/METADATA")
                for n in z.namelist()
            )
    except (zipfile.BadZipFile, OSError):
        return False


class Uploads:
    """Uploads into ``store``."""

    def __init__(self, store) -> None:
        self.store = store
        self.root = Path(store.incoming_dir) / "uploads"

    async def _receive(
        self, body: AsyncIterator[bytes], sha256: str, what: str
    ) -> tuple[Path, str, int]:
        """The body in a file of incoming/, its sha256 and size; checked against ``sha256``."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"receiving-{secrets.token_hex(8)}"
        h = hashlib.sha256()
        size = 0
        buf = bytearray()
        try:
            tmp.touch()
            async for chunk in body:
                buf += chunk
                if len(buf) >= WRITE_BYTES:
                    await asyncio.to_thread(_append, tmp, bytes(buf), h)
                    size += len(buf)
                    buf.clear()
            if buf:
                await asyncio.to_thread(_append, tmp, bytes(buf), h)
                size += len(buf)
            got = h.hexdigest()
            if sha256 and got != sha256:
                raise DigestMismatch(
                    f"{what}: the bytes received have sha256 {got}, not {sha256} as given",
                    hint="nothing was kept; send the file again (or check the digest given)",
                )
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp, got, size

    # -- a model, a file at a time ------------------------------------------------------

    def _dir(self, upload_id: str) -> Path:
        return self.root / check_file_name(upload_id)

    def _manifest(self, upload_id: str) -> dict[str, FileEntry]:
        path = self._dir(upload_id) / "files.json"
        if not path.is_file():
            return {}
        raw = json.loads(path.read_text())
        return {p: FileEntry.model_validate(e) for p, e in raw.items()}

    async def put_file(
        self, upload_id: str, path: str, body: AsyncIterator[bytes], sha256: str = ""
    ) -> FileEntry:
        """One file of an upload, streamed in; sent again, it replaces the one before."""
        up = self._dir(upload_id)
        check_file_path(path)
        _check_sha(sha256, path)
        tmp, got, size = await self._receive(body, sha256, path)
        # From here to the manifest's write, no await: two files of one upload at once
        # both find their place in it.
        blobs = up / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        tmp.replace(blobs / got)
        entry = FileEntry(path=path, size=size, sha256=got, pickle=is_pickled(path))
        files = self._manifest(upload_id)
        files[path] = entry
        write_atomic(
            up / "files.json",
            json.dumps({p: e.model_dump(mode="json") for p, e in files.items()}, indent=1),
        )
        return entry

    def files(self, upload_id: str) -> list[FileEntry]:
        """What an upload holds so far, by path."""
        return sorted(self._manifest(upload_id).values(), key=lambda f: f.path)

    async def commit(self, upload_id: str, req: CommitRequest) -> Revision:
        """The upload's files as one model revision, named by ``req.ref``; the upload is done."""
        if req.kind != "model":
            raise PullInvalid(
                f"an upload is committed as a model, not a {req.kind}",
                hint="put a wheel or engine archive whole: PUT /v1/files/{kind}/{name}",
            )
        repo = check_repo(req.repo)
        ref = check_revision(req.ref or "main")
        up = self._dir(upload_id)
        files = self.files(upload_id)
        if not files:
            raise PullError(
                f"the upload {upload_id!r} holds no files",
                hint="send its files first (PUT /v1/uploads/{upload}/{path})",
                code="not_found",
            )
        refuse_pickles([f.path for f in files], allow_pickle=req.allow_pickle, where=repo)
        unheld = {f.sha256: f.size for f in files if not self.store.has_blob(f.sha256)}
        self.store.check_room(sum(unheld.values()))
        rev = Revision(
            kind="model",
            repo=repo,
            commit=upload_commit(files),
            files=files,
            source=f"upload:{upload_id}",
            allow_pickle=req.allow_pickle,
        )
        # Adopted and written with no await between: nothing collects a blob in the gap.
        for f in files:
            if not self.store.has_blob(f.sha256):
                self.store.adopt_blob(up / "blobs" / f.sha256, f.sha256)
        stored = self.store.put(rev, refs=[ref])
        await asyncio.to_thread(shutil.rmtree, up, True)
        return stored

    # -- a wheel or an engine archive, whole ----------------------------------------------

    async def put_artifact(
        self, kind: str, name: str, body: AsyncIterator[bytes], sha256: str = ""
    ) -> Revision:
        """A wheel (``*.whl``, a zip with METADATA) or an engine archive (its sha256 given)."""
        check_file_name(name)
        _check_sha(sha256, name)
        if kind == "wheel" and not name.endswith(".whl"):
            raise PullInvalid(
                f"{name!r} is not a wheel's name (name-version-tags.whl)",
                hint="upload wheels as pip download or pip wheel wrote them",
            )
        if kind == "engine" and not sha256:
            raise PullInvalid(
                f"{name}: an engine archive needs its sha256",
                hint="give the release's sha256 (X-Llmgw-Sha256, or --sha256)",
            )
        if kind not in ("wheel", "engine"):
            raise PullInvalid(
                f"{kind!r}: only wheels and engine archives are put whole",
                hint="a model is uploaded a file at a time, then committed",
            )
        tmp, got, size = await self._receive(body, sha256, name)
        try:
            if kind == "wheel" and not await asyncio.to_thread(_is_wheel, tmp):
                raise PullInvalid(
                    f"{name} is not a wheel: no zip with a *.dist-info/METADATA",
                    hint="upload the .whl files pip wrote, unchanged",
                )
            held = self.store.get(kind, name, got)
            if held is not None:
                return held
            if not self.store.has_blob(got):
                self.store.check_room(size)
            self.store.adopt_blob(tmp, got)
        finally:
            tmp.unlink(missing_ok=True)
        rev = Revision(
            kind=kind,
            repo=name,
            commit=got,
            files=[FileEntry(path=name, size=size, sha256=got)],
            source=f"upload:{name}",
        )
        return self.store.put(rev)
