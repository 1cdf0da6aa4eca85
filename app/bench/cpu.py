"""CPU seconds of a benchmark's own work: this process, a server it started, and its
scratch PostgreSQL server.

The benchmark machine may be shared, so wall time alone says little about a
change; the CPU time the measured processes spent over a timed phase measures the
work itself (Linux ``/proc``; elsewhere the figures read as 0 or None).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


def process_tree_cpu_seconds(root: int) -> float | None:
    """CPU seconds (user + system) of ``root`` and every live descendant, plus what the
    processes of the tree have reaped of their exited children (gunicorn workers that
    were replaced, PostgreSQL backends that closed): without the reaped share, a process
    that ends mid-phase would take its time with it. None when ``root`` is not running
    or there is no ``/proc``."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return None
    for entry in entries:
        fields = _stat_fields(entry)
        if fields is None:
            continue  # exited meanwhile
        pid = int(entry)
        parents[pid] = int(fields[1])
        # utime, stime, cutime, cstime (fields 14-17 of stat(5))
        ticks[pid] = sum(int(value) for value in fields[11:15])
    if root not in ticks:
        return None
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    tree, frontier = set(), [root]
    while frontier:
        pid = frontier.pop()
        if pid not in tree:
            tree.add(pid)
            frontier.extend(children.get(pid, ()))
    return sum(ticks[pid] for pid in tree) / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from the state on (stat(5) field 3: ``[1]`` is the
    parent, ``[11]``/``[12]`` utime/stime, ``[13]``/``[14]`` what reaped children spent),
    or None when the process is gone. The command name before them may hold spaces and
    parentheses, so it is skipped up to its last ``)``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def own_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of the one process ``pid`` so far: one small read, cheap
    enough between the statements of a timed phase. 0 when it cannot be read."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postmaster_pid(pgdata: Path) -> int | None:
    """The PostgreSQL server of ``pgdata`` (first line of ``postmaster.pid``)."""
    try:
        return int((pgdata / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def tree_cpu_seconds(root: int | None) -> float:
    """``process_tree_cpu_seconds`` as a reading to subtract: 0 with no process to read."""
    return (process_tree_cpu_seconds(root) or 0.0) if root else 0.0


@dataclass(frozen=True)
class ServedCpu:
    """CPU seconds so far of a web server's process tree, a PostgreSQL server's and this
    process (the client that drives them); the difference of two readings is what each
    spent over a phase. A process given as None reads 0."""

    web: float
    postgres: float
    client: float

    @classmethod
    def read(cls, web_pid: int | None, postgres_pid: int | None) -> ServedCpu:
        return cls(tree_cpu_seconds(web_pid), tree_cpu_seconds(postgres_pid), time.process_time())

    def __sub__(self, before: ServedCpu) -> ServedCpu:
        return ServedCpu(
            self.web - before.web, self.postgres - before.postgres, self.client - before.client
        )

    @property
    def total(self) -> float:
        return self.web + self.postgres + self.client


def server_cpu_seconds(pgdata: Path) -> float:
    """CPU time used so far by the PostgreSQL server of ``pgdata`` (postmaster and children)."""
    return tree_cpu_seconds(postmaster_pid(pgdata))


# Server processes that work for nobody's request: their CPU during a timed phase is the
# server's own upkeep (flushing, vacuuming), not the phase's work.
_BACKGROUND_TITLES = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum",
    "logical replication",
    "archiver",
)


def _server_children_cpu(pgdata: Path) -> tuple[float, float]:
    """(foreground, background) CPU seconds of the live children of the server of
    ``pgdata``: background are the processes that work for nobody's request
    (checkpointer, background writer, WAL writer, autovacuum launcher and workers),
    recognised by the process title each sets; foreground the client backends. The
    postmaster is neither: it holds what its exited children spent, autovacuum workers
    included, which would charge a whole vacuum to whatever phase it ended in."""
    root = postmaster_pid(pgdata)
    if root is None:
        return 0.0, 0.0
    foreground = background = 0
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return 0.0, 0.0
    for entry in entries:
        fields = _stat_fields(entry)
        if fields is None or int(fields[1]) != root:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                title = handle.read().decode("utf-8", "replace").removeprefix("postgres: ")
        except OSError:
            continue  # exited meanwhile
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        if title.startswith(_BACKGROUND_TITLES):
            background += ticks
        else:
            foreground += ticks
    tick = os.sysconf("SC_CLK_TCK")
    return foreground / tick, background / tick


def server_background_cpu_seconds(pgdata: Path) -> float:
    """CPU seconds of the server's live background processes (``_server_children_cpu``)."""
    return _server_children_cpu(pgdata)[1]


def server_foreground_cpu_seconds(pgdata: Path) -> float:
    """CPU seconds of the server's live client backends (``_server_children_cpu``): a
    pooled connection's work, without what exited processes handed the postmaster."""
    return _server_children_cpu(pgdata)[0]


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
