"""What one sync with a peer does: the pure comparison of this mirror's State with the peer's.

Neither mirror leads; each decides from the two States alone:

- a tombstone of the peer's is taken when it is newer than what is known
  here (the store keeps it with its own time, and drops the revision if it
  was added before it: removed there while this one was down);
- a live revision of the peer's is copied when it is not held here, unless
  a tombstone here is newer than its adding (removed here later: it is not
  copied back); one added again after its removal is copied (it stands);
- a ref of the peer's is followed when the revision it names there was
  added later than the one it names here, so both mirrors end with each ref
  on the newest revision either has, whichever syncs first.

"Behind" counts what the peer has that is not taken here: revisions to copy,
removals that drop a revision held here, refs to move.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmgw.mirror.wire import Removal, Revision, State

Key = tuple[str, str, str]  # (kind, repo, commit), as the store keys a holding


def key_of(item: Revision | Removal) -> Key:
    return (item.kind, item.repo, item.commit)


@dataclass(frozen=True)
class Copy:
    """A revision of the peer's to hold here, with the refs to point at it."""

    revision: Revision
    refs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SyncPlan:
    # The peer's tombstones newer than this mirror's own for the same revision.
    removals: list[Removal]
    # Revisions to copy, oldest first (so a ref moved twice ends on the newest).
    copies: list[Copy]
    # Held here and there, but a ref of the peer's names it and not here yet.
    ref_moves: list[Copy]
    # How many of the peer's revisions, removals and refs are not taken here.
    behind: int

    @property
    def in_step(self) -> bool:
        return self.behind == 0


def _ref_times(state: State) -> dict[tuple[str, str], float]:
    """(repo, ref) -> when the revision that ref names was added (models only)."""
    out: dict[tuple[str, str], float] = {}
    for rev in state.revisions:
        if rev.kind != "model":
            continue
        for ref in rev.refs:
            out[(rev.repo, ref)] = max(out.get((rev.repo, ref), -1.0), rev.added_unix)
    return out


def _refs_to_take(rev: Revision, here: dict[tuple[str, str], float]) -> list[str]:
    if rev.kind != "model":
        return []
    return [r for r in rev.refs if here.get((rev.repo, r), -1.0) < rev.added_unix]


def plan_sync(local: State, peer: State) -> SyncPlan:
    """What to take from ``peer`` so this mirror holds and has removed what it has."""
    held = {key_of(r): r for r in local.revisions}
    removed_here: dict[Key, float] = {}
    for r in local.removed:
        removed_here[key_of(r)] = max(removed_here.get(key_of(r), -1.0), r.removed_unix)

    removals: list[Removal] = []
    dropping: set[Key] = set()
    for r in peer.removed:
        key = key_of(r)
        if removed_here.get(key, -1.0) >= r.removed_unix:
            continue
        removals.append(r)
        # Ties keep the revision: live unless a tombstone is newer than its adding.
        if key in held and held[key].added_unix < r.removed_unix:
            dropping.add(key)

    refs_here = _ref_times(
        State(
            mirror_id=local.mirror_id,
            revisions=[r for k, r in held.items() if k not in dropping],
            removed=[],
        )
    )
    copies: list[Copy] = []
    ref_moves: list[Copy] = []
    for rev in sorted(peer.revisions, key=lambda r: (r.added_unix, r.repo, r.commit)):
        key = key_of(rev)
        refs = _refs_to_take(rev, refs_here)
        if key in held and key not in dropping:
            have = set(held[key].refs)
            moves = [r for r in refs if r not in have]
            if moves:
                ref_moves.append(Copy(revision=held[key], refs=moves))
            continue
        if removed_here.get(key, -1.0) > rev.added_unix:
            continue
        copies.append(Copy(revision=rev, refs=refs))
    return SyncPlan(
        removals=removals,
        copies=copies,
        ref_moves=ref_moves,
        behind=len(copies) + len(dropping) + len(ref_moves),
    )
