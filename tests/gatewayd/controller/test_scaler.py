"""The scaler's decisions from load samples: up when high for long enough, down when low, no flapping."""

from __future__ import annotations

import pytest

from gatewayd.controller.scaler import Load, Scaler
from llmgw.scaling import ScalingConfig

CFG = ScalingConfig(up_after_s=10, down_after_s=20, cooldown_s=5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(
    scaler: Scaler,
    clock: Clock,
    seconds: float,
    busy: float,
    *,
    ready=None,
    low=1,
    high=4,
    slots=1,
    waiting=0.0,
    ttft=None,
    step=1.0,
) -> list[int]:
    """Samples every ``step`` s for ``seconds``; every ready replica of the target is up."""
    seen = []
    end = clock.now + seconds
    while clock.now < end:
        target = scaler.target("m") or low
        n = target if ready is None else ready
        seen.append(
            scaler.decide(
                "m",
                low=low,
                high=high,
                have=target,
                ready=n,
                slots=slots,
                load=Load(busy=busy, waiting=waiting, ttft_s=ttft),
            )
        )
        clock.now += step
    return seen


def test_a_sustained_high_load_adds_one_replica_after_the_window_then_waits_the_cooldown():
    clock = Clock()
    s = Scaler(CFG, clock=clock)
    seen = run(s, clock, 9, busy=3.0)
    assert set(seen) == {1}  # not yet: the window is 10 s
    seen = run(s, clock, 2, busy=3.0)
    assert seen[-1] == 2
    assert s.reason("m") == "scaled up to 2: over 0.8 requests a slot for 10 s (3.00 on average)"
    # A change restarts the window: the next one comes 10 s later, not at once.
    seen = run(s, clock, 9, busy=3.0)
    assert set(seen) == {2}
    seen = run(s, clock, 2, busy=3.0)
    assert seen[-1] == 3
    assert [(c.before, c.after) for c in s.changes] == [(1, 2), (2, 3)]


def test_a_load_spike_shorter_than_the_window_changes_nothing():
    clock = Clock()
    s = Scaler(CFG, clock=clock)
    run(s, clock, 12, busy=0.0)
    seen = run(s, clock, 3, busy=10.0) + run(s, clock, 8, busy=0.0)
    assert set(seen) == {1}
    assert not s.changes


def test_nothing_is_decided_while_a_replica_it_asked_for_is_not_ready():
    clock = Clock()
    s = Scaler(CFG, clock=clock)
    run(s, clock, 11, busy=4.0)
    assert s.target("m") == 2
    # Only one of the two is ready: the load over it is high, but capacity is on its way.
    seen = run(s, clock, 30, busy=4.0, ready=1)
    assert set(seen) == {2}


def test_the_load_falling_takes_replicas_away_one_at_a_time_down_to_min():
    clock = Clock()
    s = Scaler(CFG, clock=clock)
    for _ in range(3):
        run(s, clock, 11, busy=10.0)
    assert s.target("m") == 4
    seen = run(s, clock, 200, busy=0.1)
    assert seen[-1] == 1
    downs = [c for c in s.changes if c.after < c.before]
    assert [(c.before, c.after) for c in downs] == [(4, 3), (3, 2), (2, 1)]
    assert downs[0].reason.startswith("scaled down to 3:")


def test_a_load_that_one_replica_fewer_could_not_carry_keeps_them_no_flapping():
    clock = Clock()
    s = Scaler(CFG, clock=clock)
    run(s, clock, 11, busy=3.0)
    assert s.target("m") == 2
    # 1.0 a slot over 2 is 0.5 each: not high (0.8); with one fewer 1.0 > low (0.4).
    seen = run(s, clock, 300, busy=1.0)
    assert set(seen) == {2}
    assert len(s.changes) == 1


def test_a_queue_or_a_slow_first_token_counts_as_high():
    clock = Clock()
    s = Scaler(CFG, clock=clock)
    run(s, clock, 11, busy=0.5, waiting=2.0)
    assert s.target("m") == 2
    assert "queued" in s.reason("m")

    clock2 = Clock()
    slow = Scaler(CFG.model_copy(update={"high_ttft_s": 1.0}), clock=clock2)
    run(slow, clock2, 11, busy=0.2, ttft=3.0)
    assert slow.target("m") == 2
    assert "time to first token over 1 s for 10 s (3.00 s on average)" in slow.reason("m")


def test_bounds_changed_by_the_operator_clamp_the_target_at_once():
    clock = Clock()
    s = Scaler(CFG, clock=clock)
    for _ in range(3):
        run(s, clock, 11, busy=10.0)
    assert s.target("m") == 4
    assert s.decide("m", low=1, high=2, have=4, ready=4, slots=1, load=Load()) == 2
    assert s.reason("m") == "scale set to 1..2"


def test_a_control_plane_that_takes_over_starts_from_the_replicas_it_finds():
    s = Scaler(CFG, clock=Clock())
    assert s.decide("m", low=1, high=4, have=3, ready=3, slots=1, load=None) == 3
    assert s.decide("n", low=2, high=4, have=0, ready=0, slots=1, load=None) == 2


def test_slots_count_as_capacity():
    clock = Clock()
    s = Scaler(CFG, clock=clock)
    # 3 busy on one replica of 4 slots: 0.75 a slot, under 0.8.
    assert set(run(s, clock, 30, busy=3.0, slots=4)) == {1}


def test_thresholds_that_would_undo_each_other_are_refused():
    with pytest.raises(ValueError, match="must be under high_per_slot"):
        ScalingConfig(high_per_slot=0.5, low_per_slot=0.6)


def test_a_models_yaml_may_say_its_bounds_as_scale():
    from llmgw.catalog import Model

    m = Model.model_validate({"name": "m", "source": "/m.gguf", "scale": {"min": 0, "max": 3}})
    assert (m.replicas_min, m.replicas_max) == (0, 3)
    with pytest.raises(ValueError, match="expected"):
        Model.model_validate({"name": "m", "source": "/m.gguf", "scale": {"lo": 1}})
    with pytest.raises(ValueError, match="replicas_max is below replicas_min"):
        Model.model_validate({"name": "m", "source": "/m.gguf", "scale": {"min": 3, "max": 1}})


def test_the_classes_must_keep_normal_and_be_whole_numbers():
    from llmgw.settings import ClusterSettings

    assert ClusterSettings().classes == {"high": 200, "normal": 100, "low": 50}
    with pytest.raises(ValueError, match='must keep "normal"'):
        ClusterSettings(classes={"gold": 1})
    assert ClusterSettings(classes={"normal": 1, "gold": 9}).classes["gold"] == 9
