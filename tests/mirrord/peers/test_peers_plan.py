"""What a sync with a peer takes, decided from the two mirrors' States alone."""

from __future__ import annotations

from llmgw.mirror.wire import FileEntry, Removal, Revision, State
from mirrord.peers.plan import plan_sync

X = "a" * 40
Y = "b" * 40


def rev(
    commit: str = X, added: float = 100.0, refs: tuple[str, ...] = (), repo="org/x"
) -> Revision:
    f = FileEntry(path="model.gguf", size=3, sha256=commit[0] * 64)
    return Revision(repo=repo, commit=commit, refs=list(refs), files=[f], added_unix=added)


def gone(commit: str = X, at: float = 200.0, repo="org/x") -> Removal:
    return Removal(repo=repo, commit=commit, removed_unix=at)


def state(revisions=(), removed=(), mid="m") -> State:
    return State(mirror_id=mid, revisions=list(revisions), removed=list(removed))


def test_a_revision_the_peer_holds_and_this_mirror_lacks_is_copied_with_its_refs():
    plan = plan_sync(state(), state([rev(refs=("main",))], mid="p"))
    assert [(c.revision.commit, c.refs) for c in plan.copies] == [(X, ["main"])]
    assert plan.behind == 1


def test_a_revision_held_on_both_sides_is_in_step():
    plan = plan_sync(state([rev()]), state([rev()]))
    assert plan.copies == [] and plan.removals == [] and plan.in_step


def test_a_removal_newer_than_the_revision_held_here_drops_it():
    plan = plan_sync(state([rev(added=100)]), state([], [gone(at=200)]))
    assert plan.removals == [gone(at=200)]
    assert plan.behind == 1


def test_a_removal_older_than_the_revision_held_here_is_kept_but_drops_nothing():
    # Added here again after the peer removed it: it stands, and the peer copies it back.
    plan = plan_sync(state([rev(added=300)]), state([], [gone(at=200)]))
    assert plan.removals == [gone(at=200)]
    assert plan.behind == 0


def test_a_removal_known_here_already_is_not_taken_again():
    plan = plan_sync(state([], [gone(at=200)]), state([], [gone(at=200)]))
    assert plan.removals == [] and plan.in_step


def test_a_revision_removed_here_after_the_peer_added_it_is_not_copied_back():
    # The failure guarded: a mirror down while the other removed X brought X back.
    plan = plan_sync(state([], [gone(at=200)]), state([rev(added=100)]))
    assert plan.copies == [] and plan.in_step


def test_a_revision_added_again_after_its_removal_here_is_copied():
    plan = plan_sync(state([], [gone(at=200)]), state([rev(added=300)], [gone(at=200)]))
    assert [c.revision.commit for c in plan.copies] == [X]


def test_a_ref_follows_the_revision_added_last_on_either_side():
    here = state([rev(X, added=100, refs=("main",))])
    there = state([rev(X, added=100), rev(Y, added=200, refs=("main",))])
    plan = plan_sync(here, there)
    assert [(c.revision.commit, c.refs) for c in plan.copies] == [(Y, ["main"])]
    # And the other way round, the older ref there does not move the newer one here.
    back = plan_sync(there, here)
    assert back.copies == [] and back.ref_moves == [] and back.in_step


def test_a_ref_moved_to_a_revision_held_on_both_sides_is_a_ref_move():
    here = state([rev(X, added=100, refs=("main",)), rev(Y, added=200)])
    there = state([rev(X, added=100), rev(Y, added=200, refs=("main",))])
    plan = plan_sync(here, there)
    assert plan.copies == []
    assert [(m.revision.commit, m.refs) for m in plan.ref_moves] == [(Y, ["main"])]
    assert plan.behind == 1


def test_copies_come_oldest_first():
    there = state([rev(Y, added=300), rev(X, added=100)])
    assert [c.revision.commit for c in plan_sync(state(), there).copies] == [X, Y]


def test_wheels_and_engines_are_compared_like_models_but_carry_no_refs():
    wheel = Revision(
        kind="wheel",
        repo="a-1.0-py3-none-any.whl",
        commit="c" * 64,
        refs=["main"],
        files=[FileEntry(path="a-1.0-py3-none-any.whl", size=1, sha256="c" * 64)],
        added_unix=5,
    )
    plan = plan_sync(state(), state([wheel]))
    assert [(c.revision.kind, c.refs) for c in plan.copies] == [("wheel", [])]
