"""CPU seconds of a benchmark's own work: this process and its scratch PostgreSQL server.

The benchmark machine may be shared, so wall time alone says little about a
change; the CPU time the scratch server's processes and this process spent over
a timed phase measures the work itself (Linux ``/proc``; elsewhere the server's
share reads as 0).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


def server_cpu_seconds(pgdata: Path) -> float:
    """CPU time used so far by the PostgreSQL server of ``pgdata`` (postmaster and children)."""
    try:
        postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry.name), int(fields[1])
        if pid == postmaster:
            # Its own time, plus that of the children it has reaped (autovacuum workers,
            # closed connections): without it a process that ends mid-phase would take
            # its time with it.
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / ticks


@dataclass
class CpuClock:
    """CPU seconds since ``start()``: this process (all threads) and the scratch server."""

    pgdata: Path | None
    _process: float = 0.0
    _server: float = 0.0

    def start(self) -> CpuClock:
        self._process = time.process_time()
        self._server = self._server_now()
        return self

    def read(self) -> dict[str, float]:
        process = time.process_time() - self._process
        server = self._server_now() - self._server
        return {
            "cpu_seconds": round(process + server, 3),
            "process_cpu_seconds": round(process, 3),
            "server_cpu_seconds": round(server, 3),
        }

    def _server_now(self) -> float:
        return server_cpu_seconds(self.pgdata) if self.pgdata is not None else 0.0
