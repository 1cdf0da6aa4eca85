"""One rollup run: read what is new in each domain's logs, commit, publish changed rows.

``RollupRun.execute(options)`` keeps each domain on its own checkpoints, so one
lagging or broken domain never holds back or skips another (TRF-3). It

1. plans every domain: lists its files and probes their first bytes (no store
   connection is held while touching files), then plans the reads
   (``file_identity``): new bytes of known files, new files from the start;
   for a day run, the files holding a completed day that was not revalidated
   within ``day_cache_hours`` are re-read from the start and their sums
   *replaced* (TRF-5); ``--force-full-scan`` re-reads every file; a past day
   is marked verified (and then cached) only once the log showed it complete
   (``day_seen_complete``), otherwise the next run reads it again;
2. reads all domains' planned bytes at once (``scan``): in this process when
   there is little, else in a pool of processes (ranges of large files, whole
   small and gzip files), so a full scan uses every core;
3. per domain, lists the files again: if any was rotated, truncated, replaced
   or failed to read, the domain's result is dropped for this run and its
   checkpoints stay as they were (TRF-4);
4. commits checkpoints, partial sums and dirty keys in one atomic step; a store
   that lives in the database of the rows (PostgreSQL checkpoints with the
   database sink) also writes the changed rows in that commit, in SQL;
5. publishes the dirty rows of the requested granularity up to the end of the
   window to the sink (database or HTTP), clearing each dirty mark only after
   the sink accepted the row. Rows are absolute sums, so publishing twice is
   harmless, and a run that crashed between commit and publish leaves the keys
   dirty for the next run.

Dirty rows older than the window start (late lines for an earlier day) are
published too: nothing else would ever send them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from pathlib import Path

from app.config import TrafficSettings
from app.observability import emit
from app.traffic.business_time import BusinessCalendar
from app.traffic.checkpoints import (
    CheckpointConflict,
    CheckpointStore,
    DatabasePublish,
    DomainCommit,
    DomainState,
    FileChange,
    FileCheckpoint,
)
from app.traffic.file_identity import DomainPlan, PlannedRead, plan_domain
from app.traffic.logfiles import (
    FINGERPRINT_BYTES,
    FileChanged,
    LogCandidate,
    fingerprint,
    list_domain_files,
    probe,
    snapshot,
)
from app.traffic.logline import TOTAL
from app.traffic.partials import RowRenderer, partials_from_buckets
from app.traffic.scan import (
    ScanResult,
    ScanTask,
    merge,
    run_scans,
    scan_processes,
    split_ranges,
)
from app.traffic.sinks import RowSink, SinkError

SCAN_MODES = ("full", "incremental", "mixed", "cached")


@dataclass(frozen=True)
class RollupOptions:
    granularity: str = "5m"
    start_date: date | None = None
    end_date: date | None = None
    domains: tuple[str, ...] | None = None  # None: [traffic] domains
    log_dir: Path | None = None  # None: [traffic] log_dir
    force_full_scan: bool = False
    source_server: str = ""


def default_window(granularity: str, today: date) -> tuple[date, date]:
    """5m: today; day: yesterday (the last completed business day)."""
    if granularity == "day":
        yesterday = today - timedelta(days=1)
        return yesterday, yesterday
    return today, today


@dataclass
class DomainOutcome:
    complete: bool = False
    mode: str = "cached"
    scanned_lines: int = 0
    matched_lines: int = 0
    malformed_lines: int = 0
    oversized_lines: int = 0
    bytes_read: int = 0
    files_read: int = 0
    error: str | None = None


@dataclass
class RollupSummary:
    granularity: str
    start_date: date
    end_date: date
    source_server: str
    domains: dict[str, DomainOutcome] = field(default_factory=dict)
    rows: int = 0
    accepted: int = 0
    publish_error: str | None = None
    duration_ms: float = 0.0
    # Past days a day run read but could not mark verified yet (the log has not passed
    # their end); the runner reads them again on its next five-minute run (TRF-5).
    unverified_days: int = 0
    # Where the time went: reading and parsing files into 5-minute sums, aggregating them
    # into 5-minute and day partial sums, committing checkpoints and partial sums (rows
    # written inside that commit count as rows), writing rows.
    phase_seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(("parse", "aggregate", "checkpoints", "rows"), 0.0)
    )

    @property
    def ok(self) -> bool:
        return self.publish_error is None and all(o.complete for o in self.domains.values())

    @property
    def scan_mode(self) -> str:
        modes = {o.mode for o in self.domains.values()}
        return modes.pop() if len(modes) == 1 else ("mixed" if modes else "cached")

    def as_dict(self) -> dict:
        complete = {d: o.complete for d, o in self.domains.items()}
        by_domain = {d: (o.matched_lines if o.complete else 0) for d, o in self.domains.items()}
        errors = {d: o.error for d, o in self.domains.items() if o.error}
        if self.publish_error:
            errors["publish"] = self.publish_error
        return {
            "ok": self.ok,
            "granularity": self.granularity,
            "startDate": self.start_date.isoformat(),
            "endDate": self.end_date.isoformat(),
            "rows": self.rows,
            "accepted": self.accepted,
            "scannedLines": sum(o.scanned_lines for o in self.domains.values()),
            "matchedLines": sum(by_domain.values()),
            "matchedLinesByDomain": by_domain,
            "domainComplete": complete,
            "scanMode": self.scan_mode,
            "scanModeByDomain": {d: o.mode for d, o in self.domains.items()},
            "bytesRead": sum(o.bytes_read for o in self.domains.values()),
            "filesRead": sum(o.files_read for o in self.domains.values()),
            "malformedLines": sum(o.malformed_lines for o in self.domains.values()),
            "oversizedLines": sum(o.oversized_lines for o in self.domains.values()),
            "sourceServer": self.source_server,
            "durationMs": round(self.duration_ms, 1),
            "phaseMs": {k: round(v * 1000, 1) for k, v in self.phase_seconds.items()},
            "errors": errors,
            # Like the previous script: nothing was read and nothing had to be sent.
            "skipped": self.scan_mode == "cached" and self.rows == 0,
        }


@dataclass
class DomainPlanned:
    """One domain between planning and committing: what was loaded, seen and planned."""

    state: DomainState
    before: dict[str, tuple[int, int, int]]
    plan: DomainPlan
    due_days: list[date]


class _Delivery:
    """``sink.write(rows)`` on a thread of its own. A daemon thread: an interrupted run
    exits at once instead of waiting for a post that is retrying."""

    def __init__(self, sink: RowSink, rows: list[dict]):
        self._accepted = 0
        self._error: Exception | None = None
        self._thread = threading.Thread(
            target=self._write, args=(sink, rows), name="rollup-delivery", daemon=True
        )
        self._thread.start()

    def _write(self, sink: RowSink, rows: list[dict]) -> None:
        try:
            self._accepted = sink.write(rows)
        except Exception as exc:  # noqa: BLE001 - re-raised in the caller by result()
            self._error = exc

    def result(self) -> int:
        """Rows accepted; re-raises what ``write`` raised (SinkError)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._accepted


def day_seen_complete(day_end: int, newest_line: int | None, files: list[LogCandidate]) -> bool:
    """Whether the log has shown everything of the business day ending at ``day_end`` (TRF-5).

    A day that is over by the clock may still be incomplete on disk: nginx buffers
    lines, and logs copied from another host arrive late. Caching such a day for
    ``day_cache_hours`` would freeze a short count, so a day counts as complete only
    on evidence that the log moved past its end: a line stamped at or after the
    day's end (``newest_line``, the start of the newest 5-minute bucket read from
    any of the domain's files; nginx writes in time order), or the log rotated
    after the day's end, seen as an empty plain file (the new log nginx reopened,
    or the original truncated by copytruncate) created after that moment.
    """
    if newest_line is not None and newest_line >= day_end:
        return True
    return any(f.size == 0 and not f.compressed and f.mtime >= day_end for f in files)


def _snapshot_changed(before: dict, after: dict) -> str | None:
    if before.keys() != after.keys():
        appeared = sorted(after.keys() - before.keys())
        gone = sorted(before.keys() - after.keys())
        return f"files changed during the run (new: {appeared}, gone: {gone})"
    for name, (device, inode, size) in before.items():
        a_device, a_inode, a_size = after[name]
        if (device, inode) != (a_device, a_inode):
            return f"{name} was replaced during the run"
        if a_size < size or (name.endswith(".gz") and a_size != size):
            return f"{name} was truncated or rewritten during the run"
    return None


class RollupRun:
    """Executes rollup runs against one checkpoint store and one row sink."""

    def __init__(
        self,
        settings: TrafficSettings,
        store: CheckpointStore,
        sink: RowSink,
        *,
        clock: Callable[[], float] = time.time,
        on_bytes: Callable[[int], None] | None = None,
        report: Callable[[str], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ):
        self.settings = settings
        self.store = store
        self.sink = sink
        self.clock = clock
        self.on_bytes = on_bytes
        self.report = report or (lambda _message: None)
        self.should_stop = should_stop or (lambda: False)
        self.calendar = BusinessCalendar(settings.timezone)
        # Checkpoints and rows in one PostgreSQL: rows are computed and written in SQL.
        self._publishes_in_database = store.publishes_in_database and sink.writes_database

    def execute(self, options: RollupOptions) -> RollupSummary:
        started = time.perf_counter()
        now = self.clock()
        if options.granularity not in ("5m", "day"):
            raise ValueError("granularity must be 5m or day")
        default_start, default_end = default_window(options.granularity, self.calendar.today(now))
        # With one bound given, the other defaults without contradicting it.
        start_date = options.start_date or min(default_start, options.end_date or default_start)
        end_date = options.end_date or max(default_end, start_date)
        if end_date < start_date:
            raise ValueError(f"end date {end_date} is before start date {start_date}")
        domains = tuple(
            dict.fromkeys(options.domains if options.domains is not None else self.settings.domains)
        )
        summary = RollupSummary(
            granularity=options.granularity,
            start_date=start_date,
            end_date=end_date,
            source_server=options.source_server,
        )
        window = (
            self.calendar.midnight(start_date),
            self.calendar.midnight(end_date + timedelta(1)),
        )
        log_dir = options.log_dir or Path(self.settings.log_dir)
        # Plan every domain, read all their new bytes in one go (every core for a full
        # scan of several files or domains), then commit and publish domain by domain.
        planned: dict[str, DomainPlanned] = {}
        for domain in domains:
            outcome = summary.domains[domain] = DomainOutcome()
            if self.should_stop():
                outcome.error = "stopped before this domain (shutdown)"
                continue
            try:
                planned[domain] = self._plan(
                    domain, options, log_dir, now, start_date, end_date, outcome
                )
            except (FileChanged, OSError, CheckpointConflict) as exc:
                self._dropped(domain, options, outcome, exc)
        scanned = self._scan(planned, summary)
        for domain in domains:
            outcome = summary.domains[domain]
            if domain in planned and self.should_stop():
                outcome.error = "stopped before this domain (shutdown)"
                continue
            if domain in planned:
                try:
                    self._commit(
                        domain,
                        planned[domain],
                        scanned,
                        options,
                        log_dir,
                        now,
                        window,
                        outcome,
                        summary,
                    )
                    outcome.complete = True
                except (FileChanged, OSError, CheckpointConflict) as exc:
                    self._dropped(domain, options, outcome, exc)
            elif outcome.error and outcome.error.startswith("stopped"):
                continue
            if summary.publish_error is None:
                publishing = time.perf_counter()
                try:
                    self._publish(domain, options, now, window[1], summary)
                except SinkError as exc:
                    summary.publish_error = str(exc)
                summary.phase_seconds["rows"] += time.perf_counter() - publishing
            if options.granularity == "day":
                self.store.prune(domain, now - self.settings.retention_days * 86400)
        summary.duration_ms = (time.perf_counter() - started) * 1000
        return summary

    # -- reading and committing ------------------------------------------------------
    def _dropped(
        self, domain: str, options: RollupOptions, outcome: DomainOutcome, exc: Exception
    ) -> None:
        outcome.error = f"{type(exc).__name__}: {exc}"
        self.report(f"{domain}: result dropped for this run ({outcome.error})")
        emit(
            "TrafficRollupDomainDropped",
            level=logging.WARNING,
            domain=domain,
            granularity=options.granularity,
            error=outcome.error,
        )

    def _plan(
        self,
        domain: str,
        options: RollupOptions,
        log_dir: Path,
        now: float,
        start_date: date,
        end_date: date,
        outcome: DomainOutcome,
    ) -> DomainPlanned:
        state = self.store.load(domain)
        candidates, unsupported = list_domain_files(log_dir, domain, self.settings.file_patterns)
        if unsupported:
            self.report(f"{domain}: skipped files in unsupported formats: {unsupported}")
        if not candidates:
            if not log_dir.is_dir():
                raise FileChanged(f"the log directory {log_dir} does not exist")
            raise FileChanged(f"no log files for {domain} in {log_dir}")
        before = snapshot(candidates)
        probes = {c.name: probe(c) for c in candidates}

        due_days: list[date] = []
        replace_ids: set[str] = set()
        if options.granularity == "day":
            today = self.calendar.today(now)
            cache_seconds = self.settings.day_cache_hours * 3600
            day = start_date
            while day <= end_date and day < today:
                verified = state.verified_days.get(day)
                if options.force_full_scan or verified is None or now - verified >= cache_seconds:
                    due_days.append(day)
                    replace_ids |= self.store.files_holding_day(domain, self.calendar.midnight(day))
                day += timedelta(days=1)
        plan = plan_domain(
            candidates,
            probes,
            state.files,
            replace_ids=replace_ids,
            replace_all=options.force_full_scan,
        )
        # The mode is what the plan does, so a dropped domain still reports it truly.
        if options.force_full_scan or not state.files or any(r.replace for r in plan.reads):
            outcome.mode = "full"
        elif any(not r.skip for r in plan.reads):
            outcome.mode = "incremental"
        return DomainPlanned(state=state, before=before, plan=plan, due_days=due_days)

    def _commit(
        self,
        domain: str,
        planned_domain: DomainPlanned,
        scanned: dict[tuple[str, int], ScanResult | Exception],
        options: RollupOptions,
        log_dir: Path,
        now: float,
        window: tuple[int, int],
        outcome: DomainOutcome,
        summary: RollupSummary,
    ) -> None:
        state, plan = planned_domain.state, planned_domain.plan
        for index in range(len(plan.reads)):
            failed = scanned.get((domain, index))
            if isinstance(failed, Exception):
                raise failed
        aggregating = time.perf_counter()
        commit = DomainCommit(domain=domain, expected_version=state.version, vanished=plan.vanished)
        for index, planned in enumerate(plan.reads):
            result = scanned.get((domain, index))
            assert not isinstance(result, Exception)
            change = self._change(domain, planned, result, window, outcome)
            if change is not None:
                commit.changes.append(change)
        summary.phase_seconds["aggregate"] += time.perf_counter() - aggregating
        after, _ = list_domain_files(log_dir, domain, self.settings.file_patterns)
        problem = _snapshot_changed(planned_domain.before, snapshot(after))
        if problem:
            raise FileChanged(problem)
        for planned in plan.reads:
            # Truncated and rewritten past its old size while we read: same name, inode
            # and a larger size, but different first bytes.
            if not planned.skip and not planned.candidate.compressed:
                again = probe(planned.candidate).prefix
                if again[: len(planned.probe.prefix)] != planned.probe.prefix:
                    raise FileChanged(f"{planned.candidate.name} was rewritten during the run")
        newest_line = max(
            (
                bucket
                for bucket in [f.newest_bucket for f in state.files]
                + [change.checkpoint.newest_bucket for change in commit.changes]
                if bucket is not None
            ),
            default=None,
        )
        for day in planned_domain.due_days:
            if day_seen_complete(self.calendar.midnight(day + timedelta(1)), newest_line, after):
                commit.verified_days[day] = now
            else:
                # Read again by the next run, whatever day_cache_hours says.
                self.report(f"{domain}: {day} not verified yet (the log has not passed its end)")
                emit("TrafficDayUnverified", domain=domain, business_date=day.isoformat())
                summary.unverified_days += 1
        if options.force_full_scan:
            commit.republish.append((options.granularity, window[0], window[1]))
        if self._publishes_in_database:
            commit.publish = self._database_publish(options, now, window[1])
        committing = time.perf_counter()
        self.store.commit(commit, now)
        committed = time.perf_counter() - committing
        summary.phase_seconds["checkpoints"] += committed - commit.published_seconds
        summary.phase_seconds["rows"] += commit.published_seconds
        summary.rows += commit.published
        summary.accepted += commit.published

    def _scan(
        self, planned: dict[str, DomainPlanned], summary: RollupSummary
    ) -> dict[tuple[str, int], ScanResult | Exception]:
        """Every domain's planned reads as 5-minute sums (or the file's error), keyed by
        (domain, index of the read)."""
        reading = time.perf_counter()
        owners: list[tuple[str, int]] = []
        reads = [
            (domain, index, read)
            for domain, p in planned.items()
            for index, read in enumerate(p.plan.reads)
            if not read.skip
        ]
        to_read = sum(
            r.candidate.size - (0 if r.candidate.compressed else r.start) for *_, r in reads
        )
        processes = scan_processes(self.settings.scan_processes, to_read)
        tasks: list[ScanTask] = []
        for domain, index, read in reads:
            candidate = read.candidate
            if read.start or read.replace:
                self.report(f"{domain}: reading {candidate.name} from byte {read.start}")
            else:
                self.report(f"{domain}: reading {candidate.name}")
            owners.append((domain, index))
            for start, end in split_ranges(candidate, read.start, processes):
                tasks.append(
                    ScanTask(
                        read_index=len(owners) - 1,
                        candidate=candidate,
                        start=start,
                        end=end,
                        max_line_bytes=self.settings.max_line_bytes,
                        max_path_bytes=self.settings.max_path_bytes,
                    )
                )
        grouped: dict[int, list[ScanResult | Exception]] = {}
        for task, result in zip(tasks, run_scans(tasks, processes, self.on_bytes), strict=True):
            grouped.setdefault(task.read_index, []).append(result)
        scanned: dict[tuple[str, int], ScanResult | Exception] = {}
        for owner, results in grouped.items():
            failed = [r for r in results if isinstance(r, Exception)]
            ok = [r for r in results if isinstance(r, ScanResult)]
            scanned[owners[owner]] = failed[0] if failed else merge(ok)
        summary.phase_seconds["parse"] += time.perf_counter() - reading
        return scanned

    def _change(
        self,
        domain: str,
        planned: PlannedRead,
        result: ScanResult | None,
        window: tuple[int, int],
        outcome: DomainOutcome,
    ) -> FileChange | None:
        candidate, old = planned.candidate, planned.checkpoint
        if planned.skip:
            assert old is not None
            moved = (old.device, old.inode, old.path, old.compressed) != (
                candidate.device,
                candidate.inode,
                str(candidate.path),
                candidate.compressed,
            )
            if not moved and not old.vanished:
                return None
            located = replace(
                old,
                device=candidate.device,
                inode=candidate.inode,
                path=str(candidate.path),
                compressed=candidate.compressed,
                vanished=False,
            )
            return FileChange(checkpoint=located, replace=False, deltas={})
        assert result is not None
        outcome.files_read += 1
        outcome.bytes_read += result.bytes_read
        outcome.scanned_lines += result.lines
        outcome.malformed_lines += result.malformed
        outcome.oversized_lines += result.oversized
        if old is not None and (not result.reached_content_end or result.end < old.offset):
            # A copy holding less than was already read: it adds nothing and must not
            # replace the sums of the longer original.
            return None
        if result.end == 0:
            return None  # no complete line yet: nothing to remember
        deltas = partials_from_buckets(result.buckets, self.calendar, self.settings.max_path_bytes)
        for (granularity, bucket, _method, _path), sums in deltas.items():
            if granularity == "5m" and window[0] <= bucket < window[1]:
                outcome.matched_lines += sums[TOTAL]
        newest = max((key[0] for key in result.buckets), default=None)
        prefix = planned.probe.prefix
        if old is None:
            length = min(FINGERPRINT_BYTES, result.end, len(prefix))
            checkpoint = FileCheckpoint(
                id=uuid.uuid4().hex,
                domain=domain,
                device=candidate.device,
                inode=candidate.inode,
                fingerprint_length=length,
                fingerprint=fingerprint(prefix[:length]),
                offset=result.end,
                lines=result.lines,
                compressed=candidate.compressed,
                path=str(candidate.path),
                newest_bucket=newest,
            )
        else:
            length = min(FINGERPRINT_BYTES, result.end, len(prefix))
            grown = length > old.fingerprint_length
            if old.newest_bucket is not None and not planned.replace:
                newest = max(old.newest_bucket, newest or old.newest_bucket)
            checkpoint = replace(
                old,
                device=candidate.device,
                inode=candidate.inode,
                path=str(candidate.path),
                compressed=candidate.compressed,
                vanished=False,
                offset=result.end,
                lines=result.lines if planned.replace else old.lines + result.lines,
                fingerprint_length=length if grown else old.fingerprint_length,
                fingerprint=fingerprint(prefix[:length]) if grown else old.fingerprint,
                newest_bucket=newest,
            )
        return FileChange(checkpoint=checkpoint, replace=planned.replace, deltas=deltas)

    # -- publishing ------------------------------------------------------------------
    def _database_publish(self, options: RollupOptions, now: float, until: int) -> DatabasePublish:
        renderer = RowRenderer(self.calendar, source_server=options.source_server, generated_at=now)
        return DatabasePublish(
            granularity=options.granularity,
            until=until,
            source_server=options.source_server,
            generated_at=now,
            bucket_fields=renderer.bucket_fields,
        )

    def _publish(
        self, domain: str, options: RollupOptions, now: float, until: int, summary: RollupSummary
    ) -> None:
        batch_size = self.settings.batch_size
        if self._publishes_in_database:
            # Rows never leave the database: one statement per batch of dirty keys.
            publish = self._database_publish(options, now, until)
            batches = self.store.publish_dirty(domain, publish, batch_size)  # type: ignore[attr-defined]
            for count in batches:
                summary.rows += count
                summary.accepted += count
                if self.on_bytes is not None:
                    self.on_bytes(0)
            return
        renderer = RowRenderer(self.calendar, source_server=options.source_server, generated_at=now)
        # One batch is delivered (a POST, on a thread) while the next is summed and
        # rendered here. Batches still go one at a time and in order, a mark is cleared
        # only after its batch was accepted, and after a failed batch nothing more is sent.
        sending: tuple[_Delivery, list] | None = None
        for batch in self.store.pending(domain, options.granularity, until, batch_size):
            rows = [renderer.row(domain, pending.key, pending.sums) for pending in batch]
            if sending is not None:
                self._delivered(domain, options, summary, *sending)
            sending = (_Delivery(self.sink, rows), batch)
        if sending is not None:
            self._delivered(domain, options, summary, *sending)

    def _delivered(
        self,
        domain: str,
        options: RollupOptions,
        summary: RollupSummary,
        delivery: _Delivery,
        batch: list,
    ) -> None:
        """Wait for a batch's delivery (its SinkError propagates), then clear its marks."""
        summary.accepted += delivery.result()
        summary.rows += len(batch)
        self.store.mark_published(domain, options.granularity, batch)
        if self.on_bytes is not None:
            self.on_bytes(0)  # long publishes keep leases alive and honour cancels
