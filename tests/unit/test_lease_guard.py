"""Unit behaviour of the projection's lease guard, error text and config ranges."""

from __future__ import annotations

import threading
import time

import pytest

from app.config import ConfigError, load_settings
from app.leases import LeaseGuard, LeaseLost
from app.projection.slices import describe_error


def test_the_guard_trips_on_its_local_deadline_without_asking_anyone():
    guard = LeaseGuard(10, claimed_at=time.monotonic() - 9.5, runner_cancel=threading.Event())
    assert guard.is_set()  # 9.5 s of a 10 s lease is past the 90% the worker trusts
    assert (guard.reason, guard.operation) == ("lease_expired", "local_deadline")
    with pytest.raises(LeaseLost):
        guard.raise_if_lost()


def test_a_renewal_moves_the_local_deadline():
    guard = LeaseGuard(10, claimed_at=time.monotonic() - 8.5, runner_cancel=threading.Event())
    assert not guard.is_set()
    guard.renewed(time.monotonic())
    assert not guard.wait(0.01)
    assert not guard.is_set()


def test_the_runner_cancel_trips_the_guard_and_ends_waits():
    cancel = threading.Event()
    guard = LeaseGuard(60, claimed_at=time.monotonic(), runner_cancel=cancel)
    threading.Timer(0.05, cancel.set).start()
    assert guard.wait(30)  # woke on the runner's event, long before 30 s
    assert guard.reason == "runner_cancelled"


def test_lose_keeps_the_first_reason():
    guard = LeaseGuard(60, claimed_at=time.monotonic(), runner_cancel=threading.Event())
    guard.lose("lease_lost", "heartbeat")
    guard.lose("lease_lost", "checkpoint")
    assert (guard.reason, guard.operation) == ("lease_lost", "heartbeat")
    assert guard.wait(0)


def test_a_413_error_says_what_to_change():
    class Meta:
        status = 413

    class Refused(Exception):
        meta = Meta()

    try:
        try:
            raise Refused("request entity too large")
        except Refused as cause:
            raise RuntimeError("bulk request rejected with 413") from cause
    except RuntimeError as exc:
        text = describe_error(exc)
    assert text.startswith("RuntimeError: bulk request rejected with 413")
    assert "projection_bulk_max_bytes" in text


def test_projection_retry_base_has_a_range():
    with pytest.raises(ConfigError) as error:
        load_settings(env={}, overrides={"elasticsearch": {"projection_retry_base_seconds": 0}})
    assert "elasticsearch.projection_retry_base_seconds" in str(error.value)
    settings, _ = load_settings(
        env={"NETMAP_ELASTICSEARCH_PROJECTION_RETRY_BASE_SECONDS": "0.5"}, overrides={}
    )
    assert settings.elasticsearch.projection_retry_base_seconds == 0.5
