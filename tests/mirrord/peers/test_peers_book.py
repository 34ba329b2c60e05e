"""A mirror's peers: mirror.yaml's kept, run-time ones in peers.json, each with its lag."""

from __future__ import annotations

import json

import pytest

from mirrord.peers import PeerFromConfig, PeerNotFound, PeerRefused
from mirrord.peers.state import PeerBook, PeerRecord

A = "http://127.0.0.1:7081"
B = "http://127.0.0.1:7082"


def test_peers_added_at_run_time_are_there_after_a_restart(tmp_path):
    book = PeerBook([A], tmp_path)
    book.add(B + "/")
    assert json.loads((tmp_path / "peers.json").read_text()) == {"peers": [B]}
    assert PeerBook([A], tmp_path).urls() == [A, B]


def test_a_peer_of_mirror_yaml_is_not_removed_at_run_time(tmp_path):
    book = PeerBook([A], tmp_path)
    with pytest.raises(PeerFromConfig) as e:
        book.remove(A)
    assert "mirror.yaml" in e.value.hint
    assert book.urls() == [A]


def test_removing_a_peer_added_at_run_time_forgets_it(tmp_path):
    book = PeerBook([], tmp_path)
    book.add(B)
    book.remove(B)
    assert PeerBook([], tmp_path).urls() == []
    with pytest.raises(PeerNotFound):
        book.remove(B)


def test_a_peer_url_with_credentials_is_refused_with_an_example(tmp_path):
    with pytest.raises(PeerRefused) as e:
        PeerBook([], tmp_path).add("http://user:pw@10.0.0.6:7080")
    assert "peers add http://" in e.value.hint


def test_a_peers_json_that_cannot_be_read_stops_the_mirror_naming_the_file(tmp_path):
    (tmp_path / "peers.json").write_text("{not json")
    with pytest.raises(PeerRefused) as e:
        PeerBook([], tmp_path)
    assert "peers.json" in str(e.value)


def test_lag_counts_from_the_last_time_everything_the_peer_held_was_here():
    rec = PeerRecord(url=A, from_config=True)
    assert rec.wire(now=1000).lag_s == -1  # never in step
    rec.read(behind=0, read_unix=1000)
    rec.read(behind=2, read_unix=1010, reason="a copy failed")
    peer = rec.wire(now=1030)
    assert (peer.state, peer.behind, peer.lag_s, peer.last_sync_unix) == ("behind", 2, 30, 1010)
    rec.down("cannot be reached", now=1040)
    assert (rec.wire(now=1050).state, rec.wire(now=1050).lag_s) == ("down", 50)
