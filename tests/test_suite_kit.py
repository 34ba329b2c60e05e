"""The suite's own kit: ports dealt per worker, files dealt to workers, the worker count."""

from __future__ import annotations

import itertools
import socket

from scripts.test_workers import GIB, workers
from tests import ports
from tests.xdist_schedule import _rank, _shared_group


def test_ports_are_never_handed_out_twice_and_none_is_taken_while_given():
    # Regression: two picks in a row by bind(0) returned one port ("the agent and
    # http ports are both 52807").
    given = ports.free_ports(50)
    assert len(set(given)) == 50
    # The next port in turn, taken by someone else meanwhile: passed over.
    following = ports.free_port() + 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", following))
        s.listen()
        assert following not in ports.free_ports(3)


def test_each_worker_has_a_block_of_its_own_below_the_ephemeral_range(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    blocks = []
    for i in range(4):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{i}")
        blocks.append(ports._worker_block())
    for (a_first, a_last), (b_first, _) in itertools.pairwise(blocks):
        assert a_first < a_last < b_first
    assert blocks[-1][1] < 32768


def test_files_sharing_the_starter_or_the_machines_users_go_to_one_worker():
    groups: dict[str, str] = {}
    starter = {
        _shared_group(f, groups)
        for f in ("tests/e2e/test_up_sdks.py", "tests/e2e/test_up_conformance.py")
    }
    users = {
        _shared_group(f, groups)
        for f in (
            "tests/e2e/test_up_as_root.py",
            "tests/agentd/supervisor/test_engine_user_setup.py",
        )
    }
    assert starter == {"shared:starter_gateway"} and users == {"shared:machine-users"}
    assert _shared_group("tests/e2e/test_up.py", groups) == "tests/e2e/test_up.py"
    order = sorted(
        ["tests/llmgw/test_paths.py", "tests/e2e/test_up.py", "shared:starter_gateway"], key=_rank
    )
    assert order == ["shared:starter_gateway", "tests/e2e/test_up.py", "tests/llmgw/test_paths.py"]


def test_the_worker_count_follows_cores_and_memory():
    assert workers(2, 24 * GIB) == 4
    assert workers(16, 24 * GIB) == 8  # memory bounds it
    assert workers(1, 2 * GIB) == 2
    assert workers(64, 512 * GIB) == 16
