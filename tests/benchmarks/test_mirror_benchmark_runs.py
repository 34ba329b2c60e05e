"""The mirror benchmark runs at a tiny size beside nginx (its figures are reported, never asserted)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.benchmarks.runner import run_benchmark


@pytest.mark.skipif(
    not (shutil.which("curl") and (shutil.which("nginx") or Path("/usr/sbin/nginx").exists())),
    reason="needs nginx and curl (apt-get install nginx-light curl)",
)
def test_the_mirror_benchmark_serves_a_file_beside_nginx_and_a_peer_converges(tmp_path):
    report = run_benchmark(
        "mirror.py",
        tmp_path / "mirror.json",
        "--size-mb", "8", "--clients", "1,2", "--rounds", "1", "--converge-mb", "4",
        timeout_s=240,
    )  # fmt: skip
    # It ran: both servers sent every byte to every client, and the peer took the add.
    assert report["file"]["bytes"] == 8 << 20
    for n in ("1", "2"):
        assert (
            report["counts"][n]["mirror"]["mb_s"] > 0 and report["counts"][n]["nginx"]["mb_s"] > 0
        )
    assert report["converge"]["seconds"] is not None
