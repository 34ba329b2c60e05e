"""The package index and files by name or digest: what pip and agents read offline.

    GET       /simple/                  PEP 503: every project of the wheels held
    GET       /simple/{project}/        its files, ``#sha256=`` and data-requires-python
    GET|HEAD  /files/wheel/{name}       a wheel (or sdist) by file name, with Range
    GET|HEAD  /files/engine/{name}      an engine archive by file name, with Range
    GET|HEAD  /blobs/sha256/{sha256}    any held blob by digest (ETag: its sha256)

Project names are normalised as PEP 503 says (``Foo_Bar`` is ``foo-bar``), and
``/simple/Foo_Bar/`` answers the same page as ``/simple/foo-bar/`` (pip asks
for the normalised one). Requires-Python comes from the wheel's METADATA, read
once per digest: pip then skips a wheel its Python cannot run.
"""

from __future__ import annotations

import html
import logging
import re
import zipfile
from email.parser import HeaderParser
from pathlib import Path
from urllib.parse import unquote

from llmgw.mirror.names import SHA256_RE, NameRefused, check_file_name
from llmgw.mirror.wire import Revision
from mirrord.api.context import MirrorContext
from mirrord.api.errors import wire_error, wire_error_of
from mirrord.http.auth import Refused
from mirrord.http.messages import Request, Response
from mirrord.http.ranges import serve_file

log = logging.getLogger(__name__)

_NORMALISE_RE = re.compile(r"[-_.]+")
# What a METADATA file may be, at most, for us to read it.
METADATA_MAX_BYTES = 1 << 20


def normalise(name: str) -> str:
    """A project name as PEP 503 compares it."""
    return _NORMALISE_RE.sub("-", name).lower()


def project_of(file_name: str) -> str:
    """The (normalised) project a wheel or sdist file belongs to; "" when unreadable."""
    if file_name.endswith(".whl"):
        return normalise(file_name.split("-", 1)[0]) if "-" in file_name else ""
    for ext in (".tar.gz", ".tar.bz2", ".zip", ".tgz"):
        if file_name.endswith(ext):
            stem = file_name[: -len(ext)]
            return normalise(stem.rsplit("-", 1)[0]) if "-" in stem else ""
    return ""


class RequiresPython:
    """Requires-Python of wheels, by sha256, read from their METADATA once."""

    def __init__(self) -> None:
        self._known: dict[str, str] = {}

    def of(self, rev: Revision, blob: Path) -> str:
        if rev.commit not in self._known:
            self._known[rev.commit] = _read_requires_python(rev.repo, blob)
        return self._known[rev.commit]


def _read_requires_python(name: str, blob: Path) -> str:
    if not name.endswith(".whl"):
        return ""
    try:
        with zipfile.ZipFile(blob) as z:
            meta = next(
                (
                    n
                    for n in z.namelist()
                    if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
                ),
                None,
            )
            if meta is None or z.getinfo(meta).file_size > METADATA_MAX_BYTES:
                return ""
            text = z.read(meta).decode("utf-8", "replace")
    except (OSError, zipfile.BadZipFile, KeyError) as e:
        log.warning("could not read the METADATA of %s: %s", name, e)
        return ""
    return (HeaderParser().parsestr(text).get("Requires-Python") or "").strip()


_PAGE = """<!DOCTYPE html>
<html>
  <head><meta name="pypi:repository-version" content="1.0"><title>{title}</title></head>
  <body>
{links}
  </body>
</html>
"""


def _page(title: str, links: list[str]) -> Response:
    body = _PAGE.format(title=html.escape(title), links="\n".join(links)).encode()
    return Response(200, [("Content-Type", "text/html; charset=utf-8")], body)


def _refused(e: Refused) -> Response:
    return wire_error_of(e)


async def simple(ctx: MirrorContext, req: Request, parts: list[str], pythons: RequiresPython):
    """``/simple/`` and ``/simple/{project}/`` (``parts`` after "simple")."""
    try:
        ctx.auth.check(req, "read")
    except Refused as e:
        return _refused(e)
    wheels = ctx.store.revisions("wheel")
    parts = [p for p in parts if p]
    if not parts:
        projects = sorted({project_of(r.repo) for r in wheels} - {""})
        links = [f'    <a href="/simple/{p}/">{p}</a>' for p in projects]
        return _page("Simple index", links)
    if len(parts) != 1:
        return wire_error(404, "not_found", f"no such page: {req.path}")
    wanted = normalise(unquote(parts[0]))
    if not req.path.endswith("/"):
        # pip asks with the slash; the relative links of the page need it.
        return Response(301, [("Location", f"/simple/{wanted}/")])
    links = []
    for r in sorted(wheels, key=lambda r: r.repo):
        if project_of(r.repo) != wanted:
            continue
        attrs = ""
        requires = pythons.of(r, ctx.store.blob_path(r.commit))
        if requires:
            attrs = f' data-requires-python="{html.escape(requires, quote=True)}"'
        name = html.escape(r.repo)
        links.append(f'    <a href="/files/wheel/{name}#sha256={r.commit}"{attrs}>{name}</a>')
    if not links:
        return wire_error(
            404,
            "not_found",
            f"the mirror holds no files of the project {wanted}",
            hint="add its wheels with: llmgw ctl mirror add <wheel or dir> --wheels",
        )
    return _page(f"Links for {wanted}", links)


async def named_file(ctx: MirrorContext, req: Request, kind: str, name: str) -> Response:
    """``/files/{kind}/{name}``: a wheel or an engine archive, newest held of that name."""
    try:
        ctx.auth.check(req, "read")
    except Refused as e:
        return _refused(e)
    if req.method not in ("GET", "HEAD"):
        return wire_error(405, "invalid", "files are read with GET or HEAD")
    name = unquote(name)
    try:
        check_file_name(name)
    except NameRefused as e:
        return wire_error_of(e)
    rev = ctx.store.find(name, "", kind)
    if rev is None:
        return wire_error(404, "not_found", f"the mirror holds no {kind} named {name}")
    return serve_file(
        req,
        ctx.store.blob_path(rev.commit),
        rev.size_bytes,
        rev.commit,
        [("Content-Disposition", f'attachment; filename="{name}"')],
    )


async def blob(ctx: MirrorContext, req: Request, sha256: str) -> Response:
    """``/blobs/sha256/{sha256}``: a held blob by its digest, whatever holds it."""
    try:
        ctx.auth.check(req, "read")
    except Refused as e:
        return _refused(e)
    if req.method not in ("GET", "HEAD"):
        return wire_error(405, "invalid", "blobs are read with GET or HEAD")
    if not SHA256_RE.fullmatch(sha256):
        return wire_error(400, "invalid", f"{sha256!r} is not a sha256 (64 lowercase hex)")
    if not ctx.store.has_blob(sha256):
        return wire_error(404, "not_found", f"the mirror holds no blob {sha256}")
    path = ctx.store.blob_path(sha256)
    try:
        size = path.stat().st_size
    except OSError:
        return wire_error(404, "not_found", f"the mirror holds no blob {sha256}")
    return serve_file(req, path, size, sha256, [("Cache-Control", "public, immutable")])
