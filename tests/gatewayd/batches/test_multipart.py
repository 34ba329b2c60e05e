"""The streaming multipart/form-data reader, fed the body as httpx (the openai SDK) writes it."""

from __future__ import annotations

import httpx
import pytest

from gatewayd.batches.multipart import MultipartError, MultipartReader, Part, boundary_of


def _form(content: bytes) -> tuple[str, bytes]:
    request = httpx.Request(
        "POST",
        "http://x/v1/files",
        data={"purpose": "batch"},
        files={"file": ("in.jsonl", content, "application/jsonl")},
    )
    return request.headers["content-type"], request.read()


def _read(content_type: str, body: bytes, chunk: int) -> tuple[dict, bytes, bool]:
    reader = MultipartReader(boundary_of(content_type))
    fields, data, current = {}, b"", None
    for i in range(0, len(body), chunk):
        for ev in reader.feed(body[i : i + chunk]):
            if isinstance(ev, Part):
                current = ev
            elif ev is None:
                current = None
            elif current.filename is not None:
                data += ev
            else:
                fields[current.name] = fields.get(current.name, b"") + ev
    return fields, data, reader.done


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_a_form_read_in_chunks_of_any_size_gives_its_fields_and_file_whole(chunk):
    # Bytes that look like the start of a boundary inside the file must stay in it.
    content = b'{"a": 1}\r\n--\r\n-' * 50 + b"\r\n"
    content_type, body = _form(content)
    fields, data, done = _read(content_type, body, chunk)
    assert fields == {"purpose": b"batch"} and data == content and done


def test_what_is_not_a_form_is_refused_in_words():
    with pytest.raises(MultipartError, match="must be multipart/form-data"):
        boundary_of("application/json")
    with pytest.raises(MultipartError, match="names no boundary"):
        boundary_of("multipart/form-data")
    reader = MultipartReader(b"xyz")
    with pytest.raises(MultipartError, match="content-disposition"):
        list(reader.feed(b"--xyz\r\nContent-Type: text/plain\r\n\r\nhi\r\n--xyz--"))
