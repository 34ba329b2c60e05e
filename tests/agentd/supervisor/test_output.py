"""An engine's output file and the follower that reads it into the shard's log."""

from __future__ import annotations

import os
import stat

from agentd.supervisor.output import ADOPTED_TAIL_BYTES, LogRing, OutputFollower, open_output


def test_the_ring_keeps_the_last_lines():
    ring = LogRing(max_lines=3)
    for n in range(5):
        ring.add(f"line {n}")
    assert ring.tail(10) == ["line 2", "line 3", "line 4"]
    assert ring.tail(1) == ["line 4"]
    assert ring.tail(0) == []


def test_an_output_file_is_new_and_private_even_where_an_old_one_was(tmp_path):
    path = tmp_path / "shard-a.log"
    path.write_text("an earlier run's output\n")
    path.chmod(0o644)
    fd = open_output(path)
    os.close(fd)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == ""


def test_the_follower_takes_lines_as_they_are_written(tmp_path):
    path = tmp_path / "out.log"
    fd = open_output(path)
    ring = LogRing()
    follower = OutputFollower(path, ring)
    os.write(fd, b"one\ntw")
    follower.read_available()
    assert ring.tail(10) == ["one"]
    os.write(fd, b"o\n")
    follower.read_available()
    assert ring.tail(10) == ["one", "two"]
    os.write(fd, b"no newline at the end")
    follower.drain()
    assert ring.tail(1) == ["no newline at the end"]
    os.close(fd)
    follower.close()


def test_a_progress_bar_shows_its_last_drawing(tmp_path):
    path = tmp_path / "out.log"
    path.write_bytes(b"loading  10%\rloading  50%\rloading 100%\r\ndone\n")
    ring = LogRing()
    OutputFollower(path, ring).drain()
    assert ring.tail(10) == ["loading 100%", "done"]


def test_a_file_emptied_by_someone_else_is_read_from_its_start(tmp_path):
    # An earlier agent (or this one) emptied it past its bound.
    path = tmp_path / "out.log"
    fd = open_output(path)
    ring = LogRing()
    follower = OutputFollower(path, ring)
    os.write(fd, b"a long line before\n")
    follower.read_available()
    os.truncate(path, 0)
    os.write(fd, b"after\n")
    follower.read_available()
    assert ring.tail(10) == ["a long line before", "after"]
    os.close(fd)


def test_a_file_past_its_cap_is_emptied_and_said_so(tmp_path):
    path = tmp_path / "out.log"
    path.write_bytes(b"x" * 99 + b"\n" + b"y" * 200)
    ring = LogRing()
    OutputFollower(path, ring, max_bytes=128).read_available()
    assert path.stat().st_size == 0
    assert ring.tail(1) == ["[output file passed 128 bytes and was emptied]"]


def test_an_adopted_shard_reads_the_end_of_a_long_file_from_a_whole_line(tmp_path):
    path = tmp_path / "out.log"
    path.write_bytes(b"z" * (ADOPTED_TAIL_BYTES + 10) + b"\nthe last line\n")
    ring = LogRing()
    OutputFollower(path, ring, from_tail=True).drain()
    assert ring.tail(10) == ["the last line"]
