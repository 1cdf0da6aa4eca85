"""The block device's counters a benchmark phase reports (``app.bench.disk``): the
device holding a path, read through psutil as the resource samples read it; the
differences per phase; the kernel's unwritten pages."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.bench import disk
from app.bench.disk import phase_disk, read_disk


def _counters(**fields):
    # psutil's sdiskio, with the fields a phase reads.
    base = dict.fromkeys(("read_count", "read_bytes", "read_time", "write_count", "write_bytes"), 0)
    return SimpleNamespace(**{**base, **fields})


def test_a_write_and_an_uncached_read_show_on_the_device_holding_the_path(tmp_path):
    if read_disk(tmp_path) is None:
        pytest.skip("the temporary directory has no block device of its own")
    path, size = tmp_path / "block", 1 << 20
    before = read_disk(tmp_path)
    with open(path, "wb") as handle:
        handle.write(os.urandom(size))
        handle.flush()
        os.fsync(handle.fileno())
    # O_DIRECT bypasses the page cache, so the read reaches the device; it needs an
    # aligned buffer, which an anonymous mapping is.
    buffer = mmap.mmap(-1, size)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        assert os.readv(fd, [buffer]) == size
    finally:
        os.close(fd)
    phase = phase_disk(before, read_disk(tmp_path))
    assert phase["writes"] >= 1 and phase["write_mib"] >= 1.0
    assert phase["reads"] >= 1 and phase["read_mib"] >= 1.0
    assert phase["read_wait_ms"] is not None and phase["read_wait_ms"] >= 0


def test_a_filesystem_without_a_block_device_gives_no_reading():
    assert read_disk(Path("/proc")) is None


def test_a_phase_is_the_difference_with_each_reads_mean_wait():
    before = _counters(read_count=100, read_bytes=2**20, read_time=250, write_count=40)
    after = _counters(read_count=300, read_bytes=2**20 + 1_677_722, read_time=650,
                      write_count=45, write_bytes=2048 * 2**20)  # fmt: skip
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
