"""Rollup runs on real log files with the directory checkpoint store (TRF-2..5).

Each test writes real nginx logs, rotates them the way logrotate does, runs the
rollup one or more times and compares what the sink received with the sums of
every line written (folded one line at a time by the reference parser).
"""

from __future__ import annotations

import gzip
import json
import os
from datetime import date, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from app.config import load_settings
from app.traffic.rollup import RollupOptions, RollupRun
from app.traffic.store_directory import DirectoryCheckpointStore, StateLocked
from tests.support.nginx_logs import (
    CST,
    LogDir,
    MemorySink,
    nginx_line,
    reference_sums,
    rows_as_sums,
)

DOMAIN = "sc.example.com"
OTHER = "s3.example.com"
TODAY = date(2026, 8, 1)
NOW = datetime(2026, 8, 1, 12, 0, tzinfo=CST).timestamp()


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2026, 8, 1, hour, minute, second, tzinfo=CST)


def lines(start: datetime, count: int, step_seconds: int = 20, path: str = "/a.webp") -> list[str]:
    return [
        nginx_line(start + timedelta(seconds=i * step_seconds), path, body_bytes=100 + i)
        for i in range(count)
    ]


class Harness:
    def __init__(self, tmp_path: Path, domains=(DOMAIN,), **traffic):
        self.tmp_path = tmp_path
        self.logs = {d: LogDir(tmp_path / "logs", d) for d in domains}
        values = {"domains": list(domains), "log_dir": str(tmp_path / "logs")}
        values.update(traffic)
        settings, _ = load_settings(env={}, overrides={"traffic": values})
        self.settings = settings.traffic
        self.sink = MemorySink()
        self.state_dir = tmp_path / "state"
        self.now = NOW

    def run(
        self,
        granularity: str = "5m",
        *,
        start: date = date(2026, 7, 30),
        end: date = date(2026, 8, 2),
        force: bool = False,
        source: str = "test-server",
        on_bytes=None,
    ) -> dict:
        store = DirectoryCheckpointStore(self.state_dir)
        try:
            run = RollupRun(
                self.settings, store, self.sink, clock=lambda: self.now, on_bytes=on_bytes
            )
            options = RollupOptions(
                granularity=granularity,
                start_date=start,
                end_date=end,
                force_full_scan=force,
                source_server=source,
            )
            return run.execute(options).as_dict()
        finally:
            store.close()

    def received(self, domain: str = DOMAIN, granularity: str = "5m") -> dict:
        return {
            k: v
            for k, v in rows_as_sums(self.sink.for_domain(domain)).items()
            if k[0] == granularity
        }

    def expected(self, domain: str = DOMAIN, granularity: str = "5m") -> dict:
        written = self.logs[domain].written
        return {k: v for k, v in reference_sums(written).items() if k[0] == granularity}

    def assert_exact(self, domain: str = DOMAIN) -> None:
        assert self.received(domain, "5m") == self.expected(domain, "5m")


def test_incremental_run_reads_only_new_bytes_and_bucket_spanning_runs_is_exact(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(10, 0), 8))  # 10:00:00 .. 10:02:20, bucket 10:00
    first = h.run()
    assert first["scanMode"] == "full"
    assert first["matchedLines"] == 8
    size_before = log.path().stat().st_size
    log.write_lines(lines(at(10, 3), 10))  # 10:03 .. 10:06: same bucket 10:00 and the next
    second = h.run()
    assert second["scanMode"] == "incremental"
    assert second["bytesRead"] == log.path().stat().st_size - size_before
    assert second["scannedLines"] == 10
    h.assert_exact()
    bucket_10 = int(at(10).timestamp())
    # 10:03:00 .. 10:04:40 are six more lines in the 10:00 bucket; none counted twice.
    assert h.received()[("5m", bucket_10, "GET", "/a.webp")][3] == 8 + 6


def test_running_the_same_window_twice_changes_nothing(tmp_path):
    h = Harness(tmp_path)
    h.logs[DOMAIN].write_lines(lines(at(9), 30))
    first = h.run()
    batches = h.sink.batches
    second = h.run()
    assert first["rows"] > 0
    assert second["rows"] == 0 and second["scanMode"] == "cached"
    assert h.sink.batches == batches


def test_partial_last_line_is_counted_once_complete(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    complete = lines(at(11), 3)
    tail = nginx_line(at(11, 2), "/late.webp")
    log.write_lines(complete)
    log.append(tail[:37])  # nginx is in the middle of writing this line
    summary = h.run()
    assert summary["matchedLines"] == 3
    log.append(tail[37:])
    log.written.append(tail)
    summary = h.run()
    assert summary["matchedLines"] == 1
    h.assert_exact()


def test_rename_and_create_rotation(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(8), 10))
    h.run()
    log.write_lines(lines(at(8, 5), 4))  # written after our read, before rotation
    log.rotate_rename()
    log.write_lines(lines(at(8, 10), 6))  # the new access.log
    summary = h.run()
    assert summary["scannedLines"] == 10  # 4 from access.log.1's tail, 6 from the new file
    h.assert_exact()


def test_copytruncate_rotation(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(8), 10))
    h.run()
    log.write_lines(lines(at(8, 4), 3))
    log.copytruncate()  # access.log.1 is a new inode with the old content
    log.write_lines(lines(at(8, 20), 5))  # same inode as before, new content
    summary = h.run()
    assert summary["scannedLines"] == 3 + 5
    h.assert_exact()
    assert h.run()["scanMode"] == "cached"


def test_copytruncate_seen_between_copy_and_truncate(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(7), 5))
    h.run()
    log.write_lines(lines(at(7, 3), 2))
    import shutil

    shutil.copyfile(log.path(), log.path(".1"))  # the copy exists, the original not yet cut
    assert h.run()["scannedLines"] == 2  # the copy is recognised, not counted again
    os.truncate(log.path(), 0)
    log.write_lines(lines(at(7, 30), 3))
    assert h.run()["scannedLines"] == 3
    h.assert_exact()


def test_truncation_while_not_running(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(6), 12))
    h.run()
    # Someone empties the log (": > access.log") and nginx writes on.
    os.truncate(log.path(), 0)
    log.write_lines(lines(at(6, 30), 4))
    summary = h.run()
    assert summary["domainComplete"][DOMAIN] is True
    assert summary["scannedLines"] == 4
    h.assert_exact()  # the 12 earlier lines stay counted: that traffic happened


def test_gzip_of_a_file_already_read_is_not_decompressed(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(5), 20))
    log.rotate_rename()
    h.run()
    log.compress(".1")
    summary = h.run()
    assert summary["bytesRead"] == 0 and summary["scanMode"] == "cached"
    log.rotate_rename()  # access.log.2.gz → .3.gz, empty access.log → .1
    log.write_lines(lines(at(5, 50), 2))
    h.run()
    h.assert_exact()


def test_gzip_that_holds_lines_not_yet_read(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(4), 6))
    h.run()
    log.write_lines(lines(at(4, 10), 5))  # appended after our read
    log.rotate_rename()
    log.compress(".1")  # .1 is gone before we saw it: only the .gz has those 5 lines
    summary = h.run()
    assert summary["scannedLines"] == 5
    h.assert_exact()


def test_file_rotated_during_a_run_drops_the_domain_and_keeps_checkpoints(tmp_path):
    h = Harness(tmp_path, domains=(DOMAIN, OTHER))
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(9), 10))
    h.logs[OTHER].write_lines(lines(at(9), 3, path="/other"))
    rotated = []

    def rotate_while_reading(_bytes: int) -> None:
        if not rotated:
            rotated.append(True)
            log.rotate_rename()
            log.write_lines(lines(at(9, 30), 2))

    summary = h.run(on_bytes=rotate_while_reading)
    assert summary["domainComplete"] == {DOMAIN: False, OTHER: True}
    assert "during the run" in summary["errors"][DOMAIN]
    assert summary["matchedLinesByDomain"][DOMAIN] == 0
    assert h.received(DOMAIN) == {}
    h.assert_exact(OTHER)
    summary = h.run()
    assert summary["domainComplete"][DOMAIN] is True
    h.assert_exact(DOMAIN)


def test_lines_out_of_time_order(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(10, 15), 5))
    h.run()
    log.write_lines([nginx_line(at(9, 1), "/a.webp", status=404)])  # a late, older line
    log.write_lines(lines(at(10, 17), 2))
    summary = h.run()
    assert summary["rows"] == 2  # the old 09:00 bucket and the 10:15 bucket
    h.assert_exact()


def test_inode_reuse_by_a_different_file(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(3), 4))
    h.run()
    inode = log.path().stat().st_ino
    # A different, longer file now occupies the same inode: offset and size alone would
    # wrongly continue in the middle of it; the fingerprint says it is new.
    replacement = lines(at(3, 40), 9, path="/replacement")
    with open(log.path(), "r+", encoding="utf-8") as handle:
        handle.write("".join(replacement))
    log.written.extend(replacement)
    assert log.path().stat().st_ino == inode
    summary = h.run()
    assert summary["scannedLines"] == 9
    h.assert_exact()


def test_a_lagging_domain_is_not_skipped_because_another_advanced(tmp_path):
    h = Harness(tmp_path, domains=(DOMAIN, OTHER))
    h.logs[DOMAIN].write_lines(lines(at(1), 5))
    h.logs[OTHER].write_lines(lines(at(1), 5, path="/o"))
    h.run()
    # OTHER's logs become unreadable (a corrupt gzip) while DOMAIN keeps advancing.
    bad = h.logs[OTHER].path(".1.gz")
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage-not-deflate")
    for hour in (2, 3):
        h.logs[DOMAIN].write_lines(lines(at(hour), 5))
        h.logs[OTHER].write_lines(lines(at(hour), 5, path="/o"))
        summary = h.run()
        assert summary["domainComplete"] == {DOMAIN: True, OTHER: False}
        assert summary["ok"] is False
    bad.unlink()
    summary = h.run()
    assert summary["domainComplete"] == {DOMAIN: True, OTHER: True}
    assert summary["scannedLines"] == 10  # OTHER catches up from its own checkpoint
    h.assert_exact(DOMAIN)
    h.assert_exact(OTHER)


def test_day_rows_are_frozen_and_a_completed_day_is_cached(tmp_path):
    h = Harness(tmp_path, day_cache_hours=1.0)
    log = h.logs[DOMAIN]
    yesterday = datetime(2026, 7, 31, 15, tzinfo=CST)
    log.write_lines(lines(yesterday, 6) + lines(at(0, 5), 2))
    first = h.run("day", start=date(2026, 7, 31), end=date(2026, 7, 31))
    assert first["scanMode"] == "full"
    assert first["matchedLines"] == 6
    day_rows = [r for r in h.sink.rows.values() if r["granularity"] == "day"]
    assert [(r["business_date"], r["total_requests"], r["frozen"]) for r in day_rows] == [
        ("2026-07-31", 6, True)
    ]
    assert day_rows[0]["bucket_start"] == "2026-07-30T16:00:00Z"
    assert day_rows[0]["bucket_end"] == "2026-07-31T16:00:00Z"
    second = h.run("day", start=date(2026, 7, 31), end=date(2026, 7, 31))
    assert second["scanMode"] == "cached" and second["bytesRead"] == 0 and second["rows"] == 0
    h.now += 2 * 3600  # past day_cache_hours: revalidated by re-reading the files
    third = h.run("day", start=date(2026, 7, 31), end=date(2026, 7, 31))
    assert third["scanMode"] == "full" and third["scannedLines"] == 8
    assert third["rows"] == 0  # nothing differed
    fourth = h.run("day", start=date(2026, 7, 31), end=date(2026, 7, 31))
    assert fourth["scanMode"] == "cached"


YESTERDAY = date(2026, 7, 31)
YESTERDAY_END = datetime(2026, 8, 1, 0, 0, tzinfo=CST)  # business midnight (UTC+8)


def day_run(h: Harness) -> dict:
    return h.run("day", start=YESTERDAY, end=YESTERDAY)


def test_a_line_after_the_days_end_marks_the_day_verified(tmp_path):
    h = Harness(tmp_path, day_cache_hours=1.0)
    h.logs[DOMAIN].write_lines(lines(datetime(2026, 7, 31, 23, 50, tzinfo=CST), 3))
    h.logs[DOMAIN].write_lines([nginx_line(YESTERDAY_END, "/after")])  # 00:00:00 today
    first = day_run(h)
    assert first["scanMode"] == "full" and first["matchedLines"] == 3
    second = day_run(h)
    assert second["scanMode"] == "cached" and second["bytesRead"] == 0


def test_a_rotation_after_the_days_end_marks_the_day_verified(tmp_path):
    # A quiet domain: no line after midnight yet, but logrotate moved the day's file away
    # after midnight and nginx reopened a new, empty access.log.
    h = Harness(tmp_path, day_cache_hours=1.0)
    log = h.logs[DOMAIN]
    log.write_lines(lines(datetime(2026, 7, 31, 23, 50, tzinfo=CST), 3))
    log.rotate_rename()
    rotated_at = (YESTERDAY_END + timedelta(minutes=1)).timestamp()
    os.utime(log.path(), (rotated_at, rotated_at))
    first = day_run(h)
    assert first["matchedLines"] == 3
    assert day_run(h)["scanMode"] == "cached"


def test_a_copytruncate_after_the_days_end_marks_the_day_verified(tmp_path):
    h = Harness(tmp_path, day_cache_hours=1.0)
    log = h.logs[DOMAIN]
    log.write_lines(lines(datetime(2026, 7, 31, 23, 50, tzinfo=CST), 3))
    log.copytruncate()  # access.log.1 holds the day; access.log is truncated in place
    truncated_at = (YESTERDAY_END + timedelta(minutes=2)).timestamp()
    os.utime(log.path(), (truncated_at, truncated_at))
    assert day_run(h)["matchedLines"] == 3
    assert day_run(h)["scanMode"] == "cached"


def test_a_day_the_log_has_not_passed_is_read_again_until_it_has(tmp_path):
    # Midnight is over by the clock, but the log stops at 23:55 and its last rotation was
    # before midnight: lines of the day may still be buffered or on their way.
    h = Harness(tmp_path, day_cache_hours=1.0)
    log = h.logs[DOMAIN]
    log.write_lines(lines(datetime(2026, 7, 31, 21, 0, tzinfo=CST), 2))
    log.rotate_rename()
    rotated_at = datetime(2026, 7, 31, 22, 0, tzinfo=CST).timestamp()
    os.utime(log.path(), (rotated_at, rotated_at))
    log.write_lines(lines(datetime(2026, 7, 31, 23, 55, tzinfo=CST), 2))
    first = day_run(h)
    assert first["matchedLines"] == 4
    second = day_run(h)  # within day_cache_hours, and still read again
    assert second["scanMode"] == "full" and second["bytesRead"] > 0
    assert second["rows"] == 0  # nothing new: the same sums
    late = [nginx_line(datetime(2026, 7, 31, 23, 59, tzinfo=CST), "/late")]
    log.write_lines([*late, nginx_line(YESTERDAY_END + timedelta(seconds=5), "/after")])
    third = day_run(h)
    assert third["matchedLines"] == 5  # the late line of the day is counted
    assert h.received(granularity="day") == {
        k: v for k, v in h.expected(granularity="day").items() if k[1] < YESTERDAY_END.timestamp()
    }
    assert day_run(h)["scanMode"] == "cached"


def test_force_full_scan_rebuilds_and_republishes(tmp_path):
    h = Harness(tmp_path)
    h.logs[DOMAIN].write_lines(lines(at(10), 30))
    first = h.run()
    h.sink.rows.clear()  # the receiver lost its rows
    assert h.run()["rows"] == 0
    rebuilt = h.run(force=True)
    assert rebuilt["scanMode"] == "full"
    assert rebuilt["rows"] == first["rows"]
    h.assert_exact()


def test_revalidation_corrects_a_file_modified_in_place(tmp_path):
    h = Harness(tmp_path, day_cache_hours=0.0)
    log = h.logs[DOMAIN]
    day_lines = lines(datetime(2026, 7, 31, 9, tzinfo=CST), 12)
    log.write_lines(day_lines)
    h.run("day", start=date(2026, 7, 31), end=date(2026, 7, 31))
    # Rewrite the last line in place (same length, beyond the fingerprinted first KiB,
    # different status): offsets cannot notice, only a re-read does.
    content = log.path().read_text()
    head, last = content[: -len(day_lines[-1])], day_lines[-1]
    assert len(head) > 1024
    changed = head + last.replace('" 200 111 ', '" 500 111 ')
    assert changed != content
    log.path().write_text(changed)
    log.written = changed.splitlines(keepends=True)
    summary = h.run("day", start=date(2026, 7, 31), end=date(2026, 7, 31))
    assert summary["rows"] == 1
    assert h.received(granularity="day") == h.expected(granularity="day")


def test_summary_fields_and_malformed_counts(tmp_path):
    h = Harness(tmp_path, max_line_bytes=512)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(10), 3))
    log.append("garbage line\n" + nginx_line(at(10), "/" + "x" * 800))
    summary = h.run(source="blue")
    assert set(summary) >= {
        "rows",
        "accepted",
        "scannedLines",
        "matchedLines",
        "matchedLinesByDomain",
        "domainComplete",
        "scanMode",
        "bytesRead",
    }
    assert summary["scannedLines"] == 5
    assert summary["matchedLines"] == 3
    assert (summary["malformedLines"], summary["oversizedLines"]) == (1, 1)
    assert summary["rows"] == summary["accepted"] == 1
    assert json.loads(json.dumps(summary)) == summary
    row = next(iter(h.sink.rows.values()))
    assert row["source_server"] == "blue"
    assert set(row) == {
        "bucket_start",
        "bucket_end",
        "business_date",
        "granularity",
        "domain",
        "method",
        "path",
        "response_bytes",
        "request_bytes",
        "request_bytes_known_count",
        "total_requests",
        "status_counts",
        "source_server",
        "generated_at",
        "frozen",
    }


def test_unknown_request_lengths_are_counted_apart(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(
        [
            nginx_line(at(10), request_length=100),
            nginx_line(at(10, 1), request_length=None),
            nginx_line(at(10, 2), request_length=None),
        ]
    )
    h.run()
    row = next(iter(h.sink.rows.values()))
    assert (row["request_bytes"], row["request_bytes_known_count"], row["total_requests"]) == (
        100,
        1,
        3,
    )


def test_checkpoints_do_not_depend_on_the_host_name(tmp_path):
    h = Harness(tmp_path)
    h.logs[DOMAIN].write_lines(lines(at(10), 5))
    h.run(source="blue-container-1234")
    h.logs[DOMAIN].write_lines(lines(at(10, 5), 1))
    summary = h.run(source="green-container-5678")
    assert summary["scanMode"] == "incremental" and summary["scannedLines"] == 1


def test_rows_survive_a_failed_delivery(tmp_path):
    h = Harness(tmp_path)
    h.logs[DOMAIN].write_lines(lines(at(10), 20))
    h.sink.fail_next = 1
    failed = h.run()
    assert failed["ok"] is False and "publish" in failed["errors"]
    assert h.sink.rows == {}
    again = h.run()  # nothing new to read; the dirty rows are delivered now
    assert again["ok"] is True and again["scannedLines"] == 0 and again["rows"] > 0
    h.assert_exact()


class SecondBatchFails(MemorySink):
    """Accepts the first batch, refuses the second, records every batch it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: list[int] = []

    def write(self, rows: list[dict]) -> int:
        self.handed.append(len(rows))
        self.fail_next = 1 if len(self.handed) == 2 else 0
        return super().write(rows)


def test_batches_are_delivered_in_order_and_stop_at_the_first_failure(tmp_path):
    # Rows of 12 five-minute buckets in batches of 5: the next batch is prepared while
    # one is delivered, but none is sent after a refused one, and its marks stay.
    h = Harness(tmp_path, batch_size=5)
    h.sink = SecondBatchFails()
    h.logs[DOMAIN].write_lines(lines(at(10), 180))
    failed = h.run()
    assert failed["ok"] is False and "publish" in failed["errors"]
    assert h.sink.handed == [5, 5]  # the third batch was never handed over
    assert failed["rows"] == 5 and len(h.sink.rows) == 5
    again = h.run()
    assert again["ok"] is True and again["rows"] == 7  # only the undelivered rows
    assert h.sink.handed == [5, 5, 5, 2]
    h.assert_exact()


def test_state_directory_is_atomic_and_locked(tmp_path):
    h = Harness(tmp_path)
    h.logs[DOMAIN].write_lines(lines(at(10), 5))
    h.run()
    names = sorted(p.name for p in h.state_dir.iterdir())
    assert names == ["lock", "manifest.json", "shards"]  # no temporary files left
    manifest = json.loads((h.state_dir / "manifest.json").read_text())
    referenced = {entry["file"] for entry in manifest["shards"].values()}
    assert referenced == {p.name for p in (h.state_dir / "shards").iterdir()}
    held = DirectoryCheckpointStore(h.state_dir)
    try:
        with pytest.raises(StateLocked):
            DirectoryCheckpointStore(h.state_dir)
    finally:
        held.close()
    # A crash after writing new shards but before the manifest switch leaves orphans,
    # which the next open sweeps away.
    (h.state_dir / "shards" / "orphan.json").write_text("{}")
    DirectoryCheckpointStore(h.state_dir).close()
    assert not (h.state_dir / "shards" / "orphan.json").exists()


def test_business_time_zone_decides_the_day(tmp_path):
    h = Harness(tmp_path, timezone="UTC")
    h.logs[DOMAIN].write_lines([nginx_line(at(7, 0), "/x")])  # 23:00 UTC on July 31
    h.run("day", start=date(2026, 7, 31), end=date(2026, 7, 31))
    (row,) = [r for r in h.sink.rows.values() if r["granularity"] == "day"]
    assert row["business_date"] == "2026-07-31"
    assert row["bucket_start"] == "2026-07-31T00:00:00Z"


def test_unsupported_and_empty_files_are_ignored(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(10), 2))
    with gzip.open(log.path(".5.gz"), "wb"):
        pass  # an empty gzip
    log.path(".6.xz").write_bytes(b"\xfd7zXZ\x00")
    summary = h.run()
    assert summary["ok"] is True
    h.assert_exact()


def test_no_log_files_is_reported(tmp_path):
    h = Harness(tmp_path, domains=(DOMAIN, OTHER))
    h.logs[DOMAIN].write_lines(lines(at(10), 2))
    summary = h.run()
    assert summary["domainComplete"] == {DOMAIN: True, OTHER: False}
    assert "no log files" in summary["errors"][OTHER]


def test_files_gone_longer_than_the_retention_are_forgotten(tmp_path):
    h = Harness(tmp_path, retention_days=1)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(9), 3))
    h.run()
    log.path().unlink()
    log.write_lines(lines(at(10), 2))
    h.run()
    h.run("day")
    manifest = json.loads((h.state_dir / "manifest.json").read_text())
    assert len(manifest["files"]) == 2  # the vanished file is still remembered
    h.now += 2 * 86400
    h.run("day")
    manifest = json.loads((h.state_dir / "manifest.json").read_text())
    assert [entry["path"] for entry in manifest["files"].values()] == [str(log.path())]
    shards = {name for name in os.listdir(h.state_dir / "shards")}
    assert shards == {entry["file"] for entry in manifest["shards"].values()}
    h.assert_exact()  # published rows are untouched by the pruning


def test_file_truncated_and_regrown_during_a_run_drops_the_domain(tmp_path):
    h = Harness(tmp_path)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(9), 4))
    rewritten = []

    def truncate_and_regrow(_bytes: int) -> None:
        if not rewritten:
            bigger = lines(at(9, 30), 12, path="/new")
            with open(log.path(), "r+", encoding="utf-8") as handle:  # same inode, larger
                handle.write("".join(bigger))
            log.written = bigger
            rewritten.append(True)

    summary = h.run(on_bytes=truncate_and_regrow)
    assert summary["domainComplete"][DOMAIN] is False
    assert "rewritten during the run" in summary["errors"][DOMAIN]
    assert h.run()["domainComplete"][DOMAIN] is True
    h.assert_exact()


def test_a_large_scan_is_cut_into_ranges_read_by_worker_processes(tmp_path, monkeypatch):
    from app.traffic import scan

    # Small thresholds so a few hundred lines become several ranges, read by processes.
    monkeypatch.setattr(scan, "RANGE_MIN_BYTES", 2048)
    monkeypatch.setattr(scan, "PARALLEL_MIN_BYTES", 0)
    started: list[int] = []
    real_pool = scan.multiprocessing.get_context

    def counting_context(method):
        context = real_pool(method)
        started.append(1)
        return context

    monkeypatch.setattr(scan.multiprocessing, "get_context", counting_context)
    h = Harness(tmp_path, domains=(DOMAIN, OTHER), scan_processes=3, max_line_bytes=600)
    log = h.logs[DOMAIN]
    log.write_lines(lines(at(9), 120, step_seconds=7, path="/r.webp"))
    log.append("garbage without quotes\n" + nginx_line(at(9, 5), "/" + "y" * 900))
    log.write_lines([nginx_line(at(9, 6), f"/p{i}", status=404) for i in range(60)])
    log.rotate_rename()
    log.compress(".1")  # a gzip is one range of its own
    log.write_lines(lines(at(10), 150, step_seconds=3))
    h.logs[OTHER].write_lines(lines(at(10), 40, path="/o"))
    tail = nginx_line(at(10, 30), "/late")
    log.append(tail[:50])  # half a line: not read until complete
    first = h.run()
    assert started, "the scan ran in worker processes"
    assert first["ok"] is True
    assert first["scannedLines"] == 120 + 2 + 60 + 150 + 40
    assert (first["malformedLines"], first["oversizedLines"]) == (1, 1)
    h.assert_exact()
    h.assert_exact(OTHER)
    log.append(tail[50:])
    log.written.append(tail)
    log.write_lines(lines(at(11), 90, step_seconds=5))
    second = h.run()
    assert second["scanModeByDomain"] == {DOMAIN: "incremental", OTHER: "cached"}
    assert second["scannedLines"] == 91
    h.assert_exact()
    forced = h.run(force=True)
    assert forced["scannedLines"] == 120 + 2 + 60 + 150 + 91 + 40
    h.assert_exact()


def test_split_ranges_end_on_line_ends_and_cover_the_new_bytes(tmp_path, monkeypatch):
    from app.traffic import scan
    from app.traffic.logfiles import list_domain_files

    monkeypatch.setattr(scan, "RANGE_MIN_BYTES", 1000)
    log = LogDir(tmp_path, DOMAIN)
    log.write_lines(lines(at(9), 200))
    (candidate,), _ = list_domain_files(tmp_path, DOMAIN, ("{domain}.access.log*",))
    content = log.path().read_bytes()
    for start in (0, content.index(b"\n", 5000) + 1):
        ranges = scan.split_ranges(candidate, start, 4)
        assert len(ranges) == 4
        assert ranges[0][0] == start and ranges[-1][1] is None
        for (_, end), (next_start, _) in pairwise(ranges):
            assert end == next_start and content[end - 1 : end] == b"\n"
    assert scan.split_ranges(candidate, 0, 1) == [(0, None)]


def test_a_file_failing_in_a_worker_drops_only_its_domain(tmp_path, monkeypatch):
    from app.traffic import scan

    monkeypatch.setattr(scan, "PARALLEL_MIN_BYTES", 0)  # a process per file, even small ones
    h = Harness(tmp_path, domains=(DOMAIN, OTHER), scan_processes=2)
    h.logs[DOMAIN].write_lines(lines(at(1), 5))
    h.logs[OTHER].write_lines(lines(at(1), 5, path="/o"))
    # A gzip whose first KiB (the probe, in the parent) is fine and which breaks later,
    # in the worker reading it.
    packed = gzip.compress("".join(lines(at(0), 400, step_seconds=1, path="/z")).encode())
    h.logs[OTHER].path(".1.gz").write_bytes(packed[: len(packed) * 2 // 3])
    summary = h.run()
    assert summary["domainComplete"] == {DOMAIN: True, OTHER: False}
    assert "unreadable gzip" in summary["errors"][OTHER]
    h.assert_exact(DOMAIN)
    assert h.received(OTHER) == {}
    h.logs[OTHER].path(".1.gz").unlink()
    assert h.run()["domainComplete"] == {DOMAIN: True, OTHER: True}
    h.assert_exact(OTHER)
