"""What the disk under the scratch database did during a benchmark phase, and the
kernel's unwritten pages before a step is measured.

``relations`` and ``statements`` count the pages PostgreSQL read from outside shared
buffers; they cannot say what each read cost. The block device's own counters
(``/proc/diskstats``) can: reads completed and the milliseconds they took, so a phase
reports how long a read waited on the device, and how much the device wrote meanwhile
(the kernel writing back pages that a bulk load left dirty competes with those reads).

The scratch server runs with ``fsync`` off, so its ``CHECKPOINT`` leaves what it wrote
in the kernel's page cache, where a server with ``fsync`` on would have had it on disk
by the checkpoint's end: ``settle`` writes that out (``sync``) before a step's probe.

Linux only; elsewhere each reading is None and the phase reports no disk figures.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DISKSTATS = Path("/proc/diskstats")
_MEMINFO = Path("/proc/meminfo")
_SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size


@dataclass(frozen=True)
class DiskCounters:
    reads: int
    read_sectors: int
    read_ms: int
    writes: int
    write_sectors: int


def read_disk(path: Path) -> DiskCounters | None:
    """The cumulative counters of the block device holding ``path``."""
    device = os.stat(path).st_dev
    wanted = (os.major(device), os.minor(device))
    try:
        lines = _DISKSTATS.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 11 and (int(fields[0]), int(fields[1])) == wanted:
            reads, _merged, read_sectors, read_ms, writes, _wmerged, write_sectors = (
                int(value) for value in fields[3:10]
            )
            return DiskCounters(reads, read_sectors, read_ms, writes, write_sectors)
    return None  # e.g. overlay or tmpfs: a filesystem with no block device of its own


def phase_disk(before: DiskCounters | None, after: DiskCounters | None) -> dict[str, Any] | None:
    """Reads, their mean wait and the bytes written between two readings (every process's:
    the device does not know who asked)."""
    if before is None or after is None:
        return None
    reads = after.reads - before.reads
    return {
        "reads": reads,
        "read_mib": round((after.read_sectors - before.read_sectors) * _SECTOR / 2**20, 1),
        # Summed over requests, so with several in flight it is each read's own wait.
        "read_wait_ms": round((after.read_ms - before.read_ms) / reads, 3) if reads else None,
        "writes": after.writes - before.writes,
        "write_mib": round((after.write_sectors - before.write_sectors) * _SECTOR / 2**20, 1),
    }


def unwritten_mib() -> float | None:
    """The kernel's dirty pages and those being written back, MiB (``/proc/meminfo``)."""
    try:
        lines = _MEMINFO.read_text().splitlines()
    except OSError:
        return None
    kib = {
        name: int(rest.split()[0])
        for name, _, rest in (line.partition(":") for line in lines)
        if name in ("Dirty", "Writeback")
    }
    return round(sum(kib.values()) / 1024, 1) if kib else None


def settle() -> dict[str, Any]:
    """Write out the kernel's dirty pages; what was unwritten before and how long it took."""
    unwritten = unwritten_mib()
    started = time.perf_counter()
    os.sync()
    return {
        "unwritten_before_sync_mib": unwritten,
        "sync_ms": round((time.perf_counter() - started) * 1000, 1),
    }
