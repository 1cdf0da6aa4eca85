"""The worker's side of runner supervision: heartbeat file, ready mark, beating cancel event."""

from __future__ import annotations

import os
import threading
import time

from jobs.runner import READY, BeatingEvent, Heartbeat


def _age(path) -> float:
    return time.time() - path.stat().st_mtime


def test_looking_at_the_cancel_event_is_a_heartbeat(tmp_path):
    path = tmp_path / "worker-0"
    path.write_bytes(b"booting")
    os.utime(path, (0, 0))
    heartbeat = Heartbeat(path, interval_seconds=0.0)
    cancelled = BeatingEvent(threading.Event(), heartbeat)
    assert cancelled.is_set() is False
    assert _age(path) < 60
    os.utime(path, (0, 0))
    assert cancelled.wait(0.01) is False
    assert _age(path) < 60
    cancelled.set()
    assert cancelled.wait(5) is True


def test_beats_are_throttled_and_ready_marks_the_file(tmp_path):
    path = tmp_path / "worker-1"
    path.write_bytes(b"booting")
    heartbeat = Heartbeat(path, interval_seconds=3600)
    heartbeat.ready()
    assert path.read_bytes() == READY
    os.utime(path, (0, 0))
    heartbeat.beat()  # within the interval of the ready mark: no write
    assert _age(path) > 60


def test_a_removed_heartbeat_directory_does_not_break_the_worker(tmp_path):
    heartbeat = Heartbeat(tmp_path / "gone" / "worker-2", interval_seconds=0.0)
    heartbeat.beat()
    heartbeat.ready()
