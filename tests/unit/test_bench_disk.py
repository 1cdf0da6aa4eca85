"""The block device's counters a benchmark phase reports (``app.bench.disk``): read from
the line of the device that holds a path, differences per phase, the kernel's unwritten
pages."""

from __future__ import annotations

import os

import pytest

from app.bench import disk
from app.bench.disk import DiskCounters, phase_disk, read_disk


def _diskstats(tmp_path, major: int, minor: int):
    # The kernel's layout: major, minor, name, then reads, merged, sectors, ms, writes,
    # merged, sectors, ms, in flight, io ms, weighted io ms (later kernels add more).
    path = tmp_path / "diskstats"
    path.write_text(
        f"   7       0 loop0 9 9 9 9 9 9 9 9 0 9 9\n"
        f" {major} {minor} vdz 100 7 4096 250 40 3 2048 90 0 300 340 0 0 0 0 0 0\n"
    )
    return path


def test_the_line_of_the_device_holding_the_path_is_read(tmp_path, monkeypatch):
    device = os.stat(tmp_path).st_dev
    stats = _diskstats(tmp_path, os.major(device), os.minor(device))
    monkeypatch.setattr(disk, "_DISKSTATS", stats)
    assert read_disk(tmp_path) == DiskCounters(100, 4096, 250, 40, 2048)


def test_a_device_diskstats_does_not_name_gives_no_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(disk, "_DISKSTATS", _diskstats(tmp_path, 4095, 4095))
    assert read_disk(tmp_path) is None
    monkeypatch.setattr(disk, "_DISKSTATS", tmp_path / "absent")
    assert read_disk(tmp_path) is None


def test_a_phase_is_the_difference_with_each_reads_mean_wait():
    before = DiskCounters(reads=100, read_sectors=4096, read_ms=250, writes=40, write_sectors=0)
    after = DiskCounters(reads=300, read_sectors=4096 + 3200, read_ms=650, writes=45,
                         write_sectors=2 * 2**20 * 2)  # fmt: skip
    assert phase_disk(before, after) == {
        "reads": 200, "read_mib": 1.6, "read_wait_ms": 2.0, "writes": 5, "write_mib": 2048.0,
    }  # fmt: skip
    # No reads: no wait to report, rather than a division by zero or a made-up zero.
    assert phase_disk(before, before)["read_wait_ms"] is None
    assert phase_disk(None, after) is None and phase_disk(before, None) is None


def test_unwritten_pages_are_dirty_and_writeback_together(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal: 100 kB\nDirty:  2048 kB\nWriteback: 1024 kB\nWritebackTmp: 9 kB\n"
    )
    monkeypatch.setattr(disk, "_MEMINFO", meminfo)
    assert disk.unwritten_mib() == 3.0
    monkeypatch.setattr(disk, "_MEMINFO", tmp_path / "absent")
    assert disk.unwritten_mib() is None


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="Linux only")
def test_settle_writes_out_and_says_what_was_unwritten():
    settled = disk.settle()
    assert settled["unwritten_before_sync_mib"] >= 0 and settled["sync_ms"] >= 0
