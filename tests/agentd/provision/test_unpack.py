"""Archives are unpacked inside their directory or not at all."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from agentd.provision.unpack import UnsafeArchive, unpack


def tar_gz(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tf.addfile(m)
            else:
                name, data = m
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o755
                tf.addfile(info, io.BytesIO(data))
    return path


def link(name: str, target: str, *, hard: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.LNKTYPE if hard else tarfile.SYMTYPE
    info.linkname = target
    return info


GOOD = ("build/bin/llama-server", b"\x7fELF pretend")


@pytest.mark.parametrize(
    ("member", "words"),
    [
        (("../evil", b"x"), "'../evil' has a '..' in its path"),
        (("build/../../evil", b"x"), "'build/../../evil' has a '..' in its path"),
        (("/etc/cron.d/evil", b"x"), "'/etc/cron.d/evil' has an absolute path"),
        (
            link("build/bin/passwd", "/etc/passwd"),
            "'build/bin/passwd' is a link to an absolute path",
        ),
        (link("build/bin/up", "../../.."), "'build/bin/up' is a link that leaves the install"),
        (link("build/bin/h", "/etc/shadow", hard=True), "'build/bin/h' is a hard link"),
    ],
)
def test_an_archive_with_a_member_that_leaves_its_directory_is_refused_naming_it(
    tmp_path, member, words
):
    archive = tar_gz(tmp_path / "llama-b1.tar.gz", [GOOD, member])
    dest = tmp_path / "dest"

    with pytest.raises(UnsafeArchive) as caught:
        unpack(archive, dest)

    assert words in str(caught.value)
    assert "llama-b1.tar.gz" in str(caught.value)
    assert not dest.exists(), "nothing is written before every member is checked"


def test_a_device_file_is_refused(tmp_path):
    dev = tarfile.TarInfo("build/bin/sda")
    dev.type, dev.devmajor, dev.devminor = tarfile.BLKTYPE, 8, 0
    archive = tar_gz(tmp_path / "a.tar.gz", [GOOD, dev])

    with pytest.raises(UnsafeArchive, match="'build/bin/sda' is a device file"):
        unpack(archive, tmp_path / "dest")


def test_a_member_written_through_a_link_is_refused(tmp_path):
    # The classic two-step: a harmless-looking link, then a file "inside" it.
    archive = tar_gz(tmp_path / "a.tar.gz", [link("build/lib", "bin"), ("build/lib/x.so", b"x")])

    with pytest.raises(UnsafeArchive, match="'build/lib/x.so' would be written through a link"):
        unpack(archive, tmp_path / "dest")


def test_a_link_that_leaves_only_through_another_link_is_caught_on_disk(tmp_path):
    # "here -> ." and "b/up -> ../here/.." read as inside by name alone.
    members = [
        GOOD,
        link("here", "."),
        link("b/up", "../here/.."),
    ]
    archive = tar_gz(tmp_path / "a.tar.gz", members)
    dest = tmp_path / "dest" / "inner"

    # By name, b/up is dest/here/.. = dest: only the disk knows "here" is dest.
    with pytest.raises(UnsafeArchive, match="b/up is a link that resolves outside"):
        unpack(archive, dest)


def test_a_release_unpacks_with_its_links_and_without_set_uid_bits(tmp_path):
    setuid = tarfile.TarInfo("build/bin/llama-server")
    data = b"\x7fELF pretend"
    setuid.size, setuid.mode = len(data), 0o4755
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.addfile(setuid, io.BytesIO(data))
        tf.addfile(link("build/bin/libggml.so", "libggml.so.0"))
        info = tarfile.TarInfo("build/bin/libggml.so.0")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"lib"))
        tf.addfile(link("build/bin/copy.so", "build/bin/libggml.so.0", hard=True))
    dest = tmp_path / "dest"

    names = unpack(archive, dest)

    assert "build/bin/llama-server" in names
    server = dest / "build/bin/llama-server"
    assert server.read_bytes() == data
    assert stat.S_IMODE(server.stat().st_mode) == 0o755
    assert os.readlink(dest / "build/bin/libggml.so") == "libggml.so.0"
    assert (dest / "build/bin/copy.so").read_bytes() == b"lib"


def test_a_zip_is_held_to_the_same_rules(tmp_path):
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as zf:
        info = zipfile.ZipInfo("build/bin/llama-server")
        info.external_attr = (stat.S_IFREG | 0o755) << 16
        zf.writestr(info, b"\x7fELF")
        ln = zipfile.ZipInfo("build/bin/libllama.so")
        ln.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(ln, "libllama.so.0")
    unpack(good, tmp_path / "g")
    assert os.access(tmp_path / "g/build/bin/llama-server", os.X_OK)
    assert os.readlink(tmp_path / "g/build/bin/libllama.so") == "libllama.so.0"

    for name, target, words in [
        ("../evil", None, "'../evil' has a '..'"),
        ("build/passwd", "/etc/passwd", "'build/passwd' is a link to an absolute path"),
    ]:
        bad = tmp_path / "bad.zip"
        with zipfile.ZipFile(bad, "w") as zf:
            info = zipfile.ZipInfo(name)
            if target:
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target or "x")
        with pytest.raises(UnsafeArchive, match=words):
            unpack(bad, tmp_path / "b")
        assert not (tmp_path / "b").exists()


def test_a_file_that_is_no_archive_is_refused_in_plain_words(tmp_path):
    junk = tmp_path / "llama-b1.tar.gz"
    junk.write_bytes(b"<html>Rate limit exceeded</html>")
    with pytest.raises(UnsafeArchive, match="not an archive this agent can read"):
        unpack(junk, tmp_path / "dest")
