"""A package index on 127.0.0.1 that the real uv reads: PEP 503 HTML and PEP 691 JSON.

    with LocalIndex() as index:
        index.add(wheel_path, upload_time=datetime(2025, 10, 2, 18, 0, tzinfo=UTC))
        index.simple_url  # "http://127.0.0.1:PORT/simple" for --index-url

uv's ``--exclude-newer`` needs each file's ``upload-time`` (PEP 700), which
only the JSON form carries; a file without one is treated as not there. So
``/simple/<project>/`` answers JSON (api-version 1.1, with upload-time and
size) to a client that asks for ``application/vnd.pypi.simple.v1+json`` —
uv does — and HTML to one that does not. Files are served from
``/files/<name>`` with their sha256 in the URL fragment (HTML) or
``hashes`` (JSON). Every request is kept in ``requests`` for tests to read.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def normalize(name: str) -> str:
    """A project name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class IndexedFile:
    project: str
    filename: str
    path: Path
    sha256: str
    size: int
    upload_time: datetime


class LocalIndex:
    """A simple index in a thread of its own, for sync fixtures and async tests alike."""

    def __init__(self) -> None:
        self.files: dict[str, IndexedFile] = {}
        self.requests: list[tuple[str, str]] = []  # (path, Accept)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def add(self, path: Path, *, upload_time: datetime, project: str = "") -> IndexedFile:
        """List a wheel under its project (from its file name unless given)."""
        data = path.read_bytes()
        entry = IndexedFile(
            project=normalize(project or path.name.split("-", 1)[0]),
            filename=path.name,
            path=path,
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            upload_time=upload_time.astimezone(UTC),
        )
        with self._lock:
            self.files[path.name] = entry
        return entry

    @property
    def url(self) -> str:
        assert self._server is not None, "the index is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def simple_url(self) -> str:
        return f"{self.url}/simple"

    def start(self) -> Self:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="local-index", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- pages -----------------------------------------------------------

    def project_files(self, project: str) -> list[IndexedFile]:
        with self._lock:
            return sorted(
                (f for f in self.files.values() if f.project == normalize(project)),
                key=lambda f: f.filename,
            )

    def projects(self) -> list[str]:
        with self._lock:
            return sorted({f.project for f in self.files.values()})

    def project_json(self, project: str) -> dict:
        files = self.project_files(project)
        return {
            "meta": {"api-version": "1.1"},
            "name": normalize(project),
            "versions": sorted({f.filename.split("-")[1] for f in files}),
            "files": [
                {
                    "filename": f.filename,
                    "url": f"../../files/{f.filename}",
                    "hashes": {"sha256": f.sha256},
                    "requires-python": ">=3.9",
                    "size": f.size,
                    "upload-time": f.upload_time.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    "yanked": False,
                }
                for f in files
            ],
        }

    def project_html(self, project: str) -> str:
        links = "\n".join(
            f'<a href="../../files/{html.escape(f.filename)}#sha256={f.sha256}" '
            f'data-requires-python="&gt;=3.9">{html.escape(f.filename)}</a><br/>'
            for f in self.project_files(project)
        )
        return (
            '<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" '
            f'content="1.1"><title>Links for {project}</title></head>'
            f"<body><h1>Links for {project}</h1>\n{links}\n</body></html>\n"
        )


def _handler(index: LocalIndex) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args) -> None:
            pass

        def do_GET(self) -> None:
            accept = self.headers.get("accept", "")
            path = self.path.split("?", 1)[0]
            index.requests.append((path, accept))
            parts = [p for p in path.split("/") if p]
            wants_json = JSON_TYPE in accept
            if parts == ["simple"]:
                if wants_json:
                    body = {
                        "meta": {"api-version": "1.1"},
                        "projects": [{"name": p} for p in index.projects()],
                    }
                    self._send(json.dumps(body).encode(), JSON_TYPE)
                else:
                    links = "".join(f'<a href="{p}/">{p}</a>\n' for p in index.projects())
                    self._send(f"<html><body>{links}</body></html>".encode(), "text/html")
            elif len(parts) == 2 and parts[0] == "simple":
                if not index.project_files(parts[1]):
                    self._send(b"not found", "text/plain", status=404)
                elif wants_json:
                    self._send(json.dumps(index.project_json(parts[1])).encode(), JSON_TYPE)
                else:
                    self._send(index.project_html(parts[1]).encode(), "text/html")
            elif len(parts) == 2 and parts[0] == "files" and parts[1] in index.files:
                self._file(index.files[parts[1]].path.read_bytes())
            else:
                self._send(b"not found", "text/plain", status=404)

        def do_HEAD(self) -> None:
            # uv asks a wheel's size, and whether ranges work, before reading
            # only its METADATA from the end of the zip.
            parts = [p for p in self.path.split("?", 1)[0].split("/") if p]
            index.requests.append((self.path, "HEAD"))
            if len(parts) == 2 and parts[0] == "files" and parts[1] in index.files:
                self._file(index.files[parts[1]].path.read_bytes(), head=True)
            else:
                self._send(b"", "text/plain", status=404, head=True)

        def _file(self, data: bytes, *, head: bool = False) -> None:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("range", "").strip())
            if m is None or not (m[1] or m[2]):
                self._send(data, "application/octet-stream", head=head, ranges=True)
                return
            if m[1]:
                start = int(m[1])
                end = min(int(m[2]), len(data) - 1) if m[2] else len(data) - 1
            else:  # the last N bytes
                start, end = max(0, len(data) - int(m[2])), len(data) - 1
            self.send_response(206)
            self.send_header("content-type", "application/octet-stream")
            self.send_header("accept-ranges", "bytes")
            self.send_header("content-range", f"bytes {start}-{end}/{len(data)}")
            self.send_header("content-length", str(end - start + 1))
            self.end_headers()
            if not head:
                self.wfile.write(data[start : end + 1])

        def _send(
            self,
            data: bytes,
            content_type: str,
            status: int = 200,
            *,
            head: bool = False,
            ranges: bool = False,
        ) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            if ranges:
                self.send_header("accept-ranges", "bytes")
            self.end_headers()
            if not head:
                self.wfile.write(data)

    return Handler
