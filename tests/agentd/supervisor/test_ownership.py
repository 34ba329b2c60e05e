"""Which shard a process belongs to: the pure rule over a table, and the real table."""

from __future__ import annotations

import os

from agentd.supervisor import ProcLink, descends, owner_of, owns, process_table
from agentd.supervisor.ownership import MAX_ANCESTRY_DEPTH

# 100 is an engine (its own group); 101 its worker; 102 a grandchild that
# moved into a group of its own; 103 its child; 200 a stranger; 300 a
# stranger that happens to sit in the engine's group.
TABLE = {
    100: ProcLink(ppid=1, pgid=100),
    101: ProcLink(ppid=100, pgid=100),
    102: ProcLink(ppid=101, pgid=102),
    103: ProcLink(ppid=102, pgid=102),
    200: ProcLink(ppid=1, pgid=200),
    300: ProcLink(ppid=1, pgid=100),
}


def chain(length: int) -> dict[int, ProcLink]:
    """Process 1000 started 1001, which started 1002, … ``length`` generations."""
    table = {1000: ProcLink(1, 1000)}
    for n in range(1, length + 1):
        table[1000 + n] = ProcLink(1000 + n - 1, 1000 + n)
    return table


def test_children_and_grandchildren_descend_from_the_engine():
    assert descends(101, 100, TABLE)
    assert descends(102, 100, TABLE)
    assert descends(103, 100, TABLE)


def test_a_process_does_not_descend_from_itself_or_a_stranger():
    assert not descends(100, 100, TABLE)
    assert not descends(200, 100, TABLE)
    assert not descends(100, 101, TABLE)


def test_a_pid_missing_from_the_table_descends_from_nobody():
    assert not descends(999, 100, TABLE)


def test_the_walk_up_is_bounded():
    assert descends(1000 + MAX_ANCESTRY_DEPTH, 1000, chain(MAX_ANCESTRY_DEPTH))
    assert not descends(1000 + MAX_ANCESTRY_DEPTH + 1, 1000, chain(MAX_ANCESTRY_DEPTH + 1))


def test_a_loop_in_a_table_read_mid_change_ends():
    # Read while processes come and go, a table can say 5's parent is 6
    # and 6's is 5; the walk must end all the same.
    looped = {5: ProcLink(6, 5), 6: ProcLink(5, 6)}
    assert not descends(5, 99, looped)


def test_a_shard_owns_its_process_its_group_and_its_descendants():
    assert owns(100, 100, 100, TABLE)
    assert owns(101, 100, 100, TABLE)
    assert owns(103, 100, 100, TABLE)  # descends, though in another group
    assert owns(300, 100, 100, TABLE)  # same group, though not a descendant
    assert not owns(200, 100, 100, TABLE)


def test_a_shard_without_a_group_owns_by_descent_only():
    assert not owns(300, 100, 0, TABLE)
    assert owns(101, 100, 0, TABLE)


def test_a_gpu_process_is_attributed_to_the_right_shard():
    shards = {"a": (100, 100), "b": (200, 200)}
    assert owner_of(103, shards, TABLE) == "a"
    assert owner_of(200, shards, TABLE) == "b"
    assert owner_of(999, shards, TABLE) is None


def test_the_real_process_table_knows_this_process():
    table = process_table()
    assert table[os.getpid()] == ProcLink(ppid=os.getppid(), pgid=os.getpgid(0))
