"""The kit's Heartbeat: what each answer of the renew callback means for the guard."""

from __future__ import annotations

import threading
import time

import pytest

from app.leases import Heartbeat, LeaseGuard, LeaseLost


def _wait_until(predicate, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


def test_a_confirmed_renewal_keeps_the_guard_alive_past_the_first_lease():
    calls = []
    guard = LeaseGuard(1.0, claimed_at=time.monotonic())

    def renewed() -> bool:
        calls.append(1)
        return True

    with Heartbeat(renewed, guard, interval=0.05) as beat:
        _wait_until(lambda: beat.renewals >= 3)
        time.sleep(1.0)  # longer than the first lease: only renewals keep it
        assert not guard.is_set()
    assert beat.renewals == len(calls)


def test_a_renewal_that_says_not_ours_loses_the_guard_once_and_stops():
    lost = []
    calls = []
    guard = LeaseGuard(60, claimed_at=time.monotonic())

    def not_ours() -> bool:
        calls.append(1)
        return False

    beat = Heartbeat(not_ours, guard, interval=0.01, on_lost=lambda: lost.append(1)).start()
    _wait_until(guard.is_set)
    beat.stop()
    assert (guard.reason, guard.operation) == ("lease_lost", "heartbeat")
    assert lost == [1] and len(calls) == 1  # no renewal after the database said no
    with pytest.raises(LeaseLost) as raised:
        guard.raise_if_lost()
    assert raised.value.reason == "lease_lost"


def test_renewals_that_cannot_be_confirmed_lose_the_lease_when_it_would_expire():
    def failing() -> bool:
        raise ConnectionError("database down")

    guard = LeaseGuard(0.5, claimed_at=time.monotonic())
    with Heartbeat(failing, guard, interval=0.05):
        assert guard.wait(20)  # the local deadline trips it, not a hang
    assert guard.reason == "lease_expired"


def test_not_renewed_but_not_lost_changes_nothing():
    # None: the owner's own transaction holds the row and extends the lease itself.
    guard = LeaseGuard(60, claimed_at=time.monotonic())
    calls = []

    def held() -> None:
        calls.append(1)

    with Heartbeat(held, guard, interval=0.01) as beat:
        _wait_until(lambda: len(calls) >= 3)
    assert not guard.is_set() and beat.renewals == 0


def test_stop_waits_for_a_renewal_in_progress():
    entered, release = threading.Event(), threading.Event()
    finished = []

    def slow() -> bool:
        entered.set()
        release.wait(10)
        finished.append(1)
        return True

    guard = LeaseGuard(60, claimed_at=time.monotonic())
    beat = Heartbeat(slow, guard, interval=0.01).start()
    assert entered.wait(10)
    threading.Timer(0.1, release.set).start()
    beat.stop()
    assert finished == [1]  # no renewal can race the caller's final write
