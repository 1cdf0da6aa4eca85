"""What the disk under the scratch database did during a benchmark phase, and the
kernel's unwritten pages before a step is measured.

``relations`` and ``statements`` count the pages PostgreSQL read from outside shared
buffers; they cannot say what each read cost. The block device's own counters can:
reads completed and the milliseconds they took, so a phase reports how long a read
waited on the device, and how much the device wrote meanwhile (the kernel writing back
pages that a bulk load left dirty competes with those reads). The device is found and
read as the runner's resource samples do it (``app.ops.resources.device_of``,
psutil's per-disk counters).

The scratch server runs with ``fsync`` off, so its ``CHECKPOINT`` leaves what it wrote
in the kernel's page cache, where a server with ``fsync`` on would have had it on disk
by the checkpoint's end: ``settle`` writes that out (``sync``) before a step's probe.

Where the path has no block device of its own (overlay, tmpfs) or the platform has no
per-disk counters, each reading is None and the phase reports no disk figures.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil

from app.ops.resources import device_of

_MEMINFO = Path("/proc/meminfo")  # Dirty and Writeback: psutil does not report them


def read_disk(path: Path) -> Any | None:
    """The cumulative counters (psutil's ``sdiskio``) of the block device holding
    ``path``."""
    device = device_of(path)
    if device is None:
        return None
    try:
        return psutil.disk_io_counters(perdisk=True).get(device)
    except (OSError, RuntimeError):
        return None


def phase_disk(before: Any | None, after: Any | None) -> dict[str, Any] | None:
    """Reads, their mean wait and the bytes written between two readings (every process's:
    the device does not know who asked)."""
    if before is None or after is None:
        return None
    reads = after.read_count - before.read_count
    return {
        "reads": reads,
        "read_mib": round((after.read_bytes - before.read_bytes) / 2**20, 1),
        # Summed over requests, so with several in flight it is each read's own wait.
        "read_wait_ms": round((after.read_time - before.read_time) / reads, 3) if reads else None,
        "writes": after.write_count - before.write_count,
        "write_mib": round((after.write_bytes - before.write_bytes) / 2**20, 1),
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
