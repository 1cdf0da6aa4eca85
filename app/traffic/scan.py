"""Reading log files into 5-minute sums, on one core or on all of them (TRF-1, PRF-3).

A *scan task* is one byte range of one file's content: the new bytes of a file,
or, for a plain file with much to read, one of several ranges cut at line
boundaries (each range but the last ends just after a ``\\n``, so every line
lies in exactly one range and the sums of the ranges are the sums of the file).
Gzip files are one task each (a stream cannot be entered in the middle).

``run_scans`` runs the tasks in this process when there is little to read (an
incremental run: no process start-up to pay) and otherwise in a pool of worker
processes, one task per process at a time, so a full scan of a large file or of
several files and domains uses every core. A task whose file changed or could
not be read returns that error instead of a result: it drops its own domain's
result for the run, never another domain's. Workers only read files and return
plain sums; they never touch the database or the checkpoint store. While
waiting, the caller's ``on_bytes`` is called at least once a second (the
runner renews its lease and honours cancels there); raising from it stops the
workers.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

from app.traffic.logfiles import FileChanged, LogCandidate, read_lines
from app.traffic.logline import LineAggregator

# Below this much to read, worker processes cost more than they save.
PARALLEL_MIN_BYTES = 48 << 20
# A plain file is cut into ranges of at least this size (one per process).
RANGE_MIN_BYTES = 24 << 20
_BOUNDARY_PROBE = 1 << 16


@dataclass(frozen=True)
class ScanTask:
    read_index: int  # which planned read (file) the range belongs to
    candidate: LogCandidate
    start: int
    end: int | None  # None: up to the file's size when it is opened (its last range)
    max_line_bytes: int
    max_path_bytes: int


@dataclass
class ScanResult:
    read_index: int
    buckets: dict[tuple[int, bytes, bytes], list[int]]
    lines: int
    malformed: int
    oversized: int
    bytes_read: int
    end: int
    reached_content_end: bool


def scan(task: ScanTask, on_chunk: Callable[[int], None] | None = None) -> ScanResult:
    """Read one range and fold its complete lines into per-bucket sums."""
    aggregator = LineAggregator(
        max_line_bytes=task.max_line_bytes, max_path_bytes=task.max_path_bytes
    )
    result = read_lines(
        task.candidate,
        task.start,
        end=task.end,
        max_line_bytes=task.max_line_bytes,
        on_lines=aggregator.feed,
        on_oversized=aggregator.add_oversized,
        on_chunk=on_chunk,
    )
    return ScanResult(
        read_index=task.read_index,
        buckets=aggregator.buckets,
        lines=aggregator.lines,
        malformed=aggregator.malformed,
        oversized=aggregator.oversized,
        bytes_read=result.bytes_read,
        end=result.end,
        reached_content_end=result.reached_content_end,
    )


def split_ranges(candidate: LogCandidate, start: int, parts: int) -> list[tuple[int, int | None]]:
    """``[start, size)`` of a plain file as up to ``parts`` ranges that end on line ends."""
    length = candidate.size - start
    if candidate.compressed or parts < 2 or length < 2 * RANGE_MIN_BYTES:
        return [(start, None)]
    count = min(parts, length // RANGE_MIN_BYTES)
    bounds = [start]
    with open(candidate.path, "rb") as handle:
        for part in range(1, count):
            position = start + length * part // count
            if position <= bounds[-1]:
                continue
            handle.seek(position)
            while True:  # the next line end at or after ``position``
                block = handle.read(_BOUNDARY_PROBE)
                if not block:
                    position = -1
                    break
                newline = block.find(b"\n")
                if newline >= 0:
                    position += newline + 1
                    break
                position += len(block)
            if position < 0 or position >= candidate.size:
                break
            bounds.append(position)
    # A file replaced meanwhile is caught when its ranges are opened (device and inode).
    return [*pairwise(bounds), (bounds[-1], None)]


def scan_processes(configured: int, to_read: int) -> int:
    """How many processes read ``to_read`` bytes: 1 for little, else ``[traffic]
    scan_processes`` or, when that is 0, one per CPU this process may use."""
    if to_read < PARALLEL_MIN_BYTES:
        return 1
    if configured:
        return configured
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def scan_or_error(
    task: ScanTask, on_chunk: Callable[[int], None] | None = None
) -> ScanResult | Exception:
    """``scan``, with a file that changed or failed to read returned rather than raised
    (it drops only its own domain's result)."""
    try:
        return scan(task, on_chunk)
    except (FileChanged, OSError) as exc:
        return exc


def run_scans(
    tasks: list[ScanTask],
    processes: int,
    on_bytes: Callable[[int], None] | None = None,
) -> list[ScanResult | Exception]:
    """Results (or the file's error) in task order; in this process unless several tasks
    and processes make sense."""
    parallel = (
        processes > 1
        and len(tasks) > 1
        and not multiprocessing.current_process().daemon  # daemons cannot have children
    )
    if not parallel:
        return [scan_or_error(task, on_bytes) for task in tasks]
    # fork starts in milliseconds; with other threads running only spawn is safe.
    method = "fork" if threading.active_count() == 1 else "spawn"
    context = multiprocessing.get_context(method)
    results: list[ScanResult | Exception] = []
    with context.Pool(min(processes, len(tasks))) as pool:  # exit terminates the workers
        pending = [pool.apply_async(scan_or_error, (task,)) for task in tasks]
        for waiting in pending:
            while True:
                try:
                    result = waiting.get(timeout=1.0)
                    break
                except multiprocessing.TimeoutError:
                    if on_bytes is not None:
                        on_bytes(0)
            results.append(result)
            if on_bytes is not None and isinstance(result, ScanResult):
                on_bytes(result.bytes_read)
    return results


def merge(results: list[ScanResult]) -> ScanResult:
    """The ranges of one file, in order, as one result (sums added, end of the last)."""
    first = results[0]
    buckets = first.buckets
    for other in results[1:]:
        for key, sums in other.buckets.items():
            existing = buckets.get(key)
            if existing is None:
                buckets[key] = sums
            else:
                for slot, value in enumerate(sums):
                    existing[slot] += value
    last = results[-1]
    return ScanResult(
        read_index=first.read_index,
        buckets=buckets,
        lines=sum(r.lines for r in results),
        malformed=sum(r.malformed for r in results),
        oversized=sum(r.oversized for r in results),
        bytes_read=sum(r.bytes_read for r in results),
        end=last.end,
        reached_content_end=all(r.reached_content_end for r in results),
    )
