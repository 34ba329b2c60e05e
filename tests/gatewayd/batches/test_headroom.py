"""The slots a batch leaves free for clients: none without clients, a Poisson margin with them."""

from __future__ import annotations

import math

from gatewayd.batches.headroom import Headroom


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_without_clients_a_batch_may_use_every_slot():
    h = Headroom(3.0, lambda _m: 0, clock=Clock())
    assert h.margin("m") == 0


def test_with_clients_three_sigmas_of_their_number_in_flight_stay_free():
    clock, held = Clock(), {"m": 10}
    h = Headroom(3.0, held.get, clock=clock)
    assert h.margin("m") == math.ceil(3 * math.sqrt(10))
    # The mean follows the clients: when they are gone the margin goes within seconds.
    held["m"] = 0
    clock.t = 30.0
    assert h.margin("m") == 0


def test_the_mean_is_followed_over_time_not_taken_from_one_sample():
    clock, held = Clock(), {"m": 16}
    h = Headroom(2.0, held.get, clock=clock, tau_s=5.0)
    assert h.margin("m") == 8
    # A moment with none in flight between requests keeps most of the margin.
    held["m"] = 0
    clock.t = 0.5
    assert h.margin("m") == math.ceil(2 * math.sqrt(16 * math.exp(-0.1)))


def test_sigmas_zero_gives_the_batch_every_slot_clients_do_not_hold():
    h = Headroom(0.0, lambda _m: 25, clock=Clock())
    assert h.margin("m") == 0
