"""The mirror's package index, files by name and blobs by digest, read by pip and httpx."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import sys
import zipfile
from pathlib import Path

import httpx


def make_wheel(name: str, version: str, *, requires_python: str = "") -> tuple[str, bytes]:
    """A real, installable pure-Python wheel: its file name and bytes."""
    dist = name.replace("-", "_")
    file_name = f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    if requires_python:
        meta += f"Requires-Python: {requires_python}\n"
    files = {
        f"{dist}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{info}/METADATA": meta.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return file_name, buf.getvalue()


async def _pip(*args: str) -> tuple[int, str]:
    # --isolated: no pip.conf or PIP_* of the machine (an extra index there would
    # answer what the mirror refuses).
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pip",
        "--isolated",
        "--disable-pip-version-check",
        "--no-cache-dir",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode, out.decode(errors="replace")


def _index(mirror) -> str:
    return f"http://llmgw:{mirror.read_token}@127.0.0.1:{mirror.port}/simple/"


async def test_pip_downloads_and_installs_a_wheel_from_the_index_with_the_token(mirror, tmp_path):
    name, data = make_wheel("Tiny_Pkg", "1.2.0")
    mirror.put_artifact("wheel", name, data)
    code, out = await _pip(
        "download", "--no-deps", "--index-url", _index(mirror), "--dest", str(tmp_path / "d"),
        "tiny-pkg",
    )  # fmt: skip
    assert code == 0, out
    assert (tmp_path / "d" / name).read_bytes() == data
    code, out = await _pip(
        "install", "--no-deps", "--index-url", _index(mirror), "--target", str(tmp_path / "t"),
        "tiny.pkg==1.2.0",
    )  # fmt: skip
    assert code == 0, out
    assert (tmp_path / "t" / "Tiny_Pkg" / "__init__.py").read_text() == "VERSION = '1.2.0'\n"


async def test_pip_skips_a_wheel_whose_python_does_not_match(mirror, tmp_path):
    # data-requires-python from the wheel's METADATA: pip takes the one it can run.
    old, old_data = make_wheel("picky", "1.0")
    new, new_data = make_wheel("picky", "2.0", requires_python=">=99")
    mirror.put_artifact("wheel", old, old_data)
    mirror.put_artifact("wheel", new, new_data)
    async with mirror.client() as c:
        page = (await c.get("/simple/picky/")).text
    assert 'data-requires-python="&gt;=99"' in page
    code, out = await _pip(
        "download", "--no-deps", "--index-url", _index(mirror), "--dest", str(tmp_path / "d"),
        "picky",
    )  # fmt: skip
    assert code == 0, out
    assert [p.name for p in (tmp_path / "d").iterdir()] == [old]


async def test_the_index_names_projects_normalised_with_their_sha256(mirror):
    name, data = make_wheel("Foo.Bar_baz", "0.1")
    rev = mirror.put_artifact("wheel", name, data)
    async with mirror.client() as c:
        root = await c.get("/simple/")
        page = await c.get("/simple/Foo_Bar.baz/", follow_redirects=True)
        no_slash = await c.get("/simple/foo-bar-baz")
    assert '<a href="/simple/foo-bar-baz/">foo-bar-baz</a>' in root.text
    assert f'href="/files/wheel/{name}#sha256={rev.commit}"' in page.text
    assert no_slash.status_code == 301 and no_slash.headers["location"] == "/simple/foo-bar-baz/"


async def test_pip_without_the_token_is_refused(mirror, tmp_path):
    name, data = make_wheel("secret", "1.0")
    mirror.put_artifact("wheel", name, data)
    index = f"http://127.0.0.1:{mirror.port}/simple/"
    code, out = await _pip(
        "download", "--no-deps", "--no-input", "--index-url", index, "--dest", str(tmp_path),
        "secret",
    )  # fmt: skip
    assert code != 0, out
    assert not list(tmp_path.glob("*.whl"))


async def test_an_engine_archive_and_a_blob_are_served_with_ranges(mirror):
    data = os.urandom(100_000)
    rev = mirror.put_artifact("engine", "llama-b1-bin-ubuntu-x64.zip", data)
    async with mirror.client() as c:
        whole = await c.get("/files/engine/llama-b1-bin-ubuntu-x64.zip")
        part = await c.get(f"/blobs/sha256/{rev.commit}", headers={"Range": "bytes=1000-"})
        head = await c.head(f"/blobs/sha256/{rev.commit}")
        missing = await c.get("/blobs/sha256/" + "0" * 64)
        bad = await c.get("/blobs/sha256/nothex")
    assert whole.content == data and whole.headers["etag"] == f'"{rev.commit}"'
    assert part.status_code == 206 and part.content == data[1000:]
    assert head.headers["content-length"] == str(len(data)) and head.content == b""
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert bad.status_code == 400


async def test_files_and_blobs_need_a_credential(mirror):
    rev = mirror.put_artifact("engine", "e.zip", b"zip")
    async with httpx.AsyncClient(base_url=mirror.url) as c:
        r = await c.get(f"/blobs/sha256/{rev.commit}")
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"


def test_the_wheel_made_here_is_a_wheel(tmp_path):
    name, data = make_wheel("x", "1")
    Path(tmp_path / name).write_bytes(data)
    assert zipfile.ZipFile(tmp_path / name).testzip() is None


async def test_uv_installs_a_hash_pinned_requirement_from_the_index_given_in_its_environment(
    mirror, tmp_path
):
    # What a node does for vLLM and SGLang (agentd/provision/pyenv.py): uv with the
    # mirror's index in UV_INDEX_URL, every requirement held to its hash.
    uv = Path(sys.executable).with_name("uv")
    name, data = make_wheel("hashed-pkg", "0.3.0")
    mirror.put_artifact("wheel", name, data)
    req = tmp_path / "requirements.txt"
    req.write_text(f"hashed-pkg==0.3.0 --hash=sha256:{hashlib.sha256(data).hexdigest()}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "VIRTUAL_ENV"))}
    env |= {"UV_INDEX_URL": _index(mirror), "UV_CACHE_DIR": str(tmp_path / "uv-cache")}

    async def run(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            str(uv), *args, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await proc.communicate()
        return proc.returncode, out.decode(errors="replace")

    venv = tmp_path / "venv"
    code, out = await run("venv", "--no-config", "--python", sys.executable, str(venv))
    assert code == 0, out
    code, out = await run(
        "pip", "install", "--no-config", "--python", str(venv / "bin" / "python"),
        "--require-hashes", "-r", str(req),
    )  # fmt: skip
    assert code == 0, out
    assert mirror.read_token not in out
    found = list((venv / "lib").glob("python3*/site-packages/hashed_pkg/__init__.py"))
    assert found and found[0].read_text() == "VERSION = '0.3.0'\n"
