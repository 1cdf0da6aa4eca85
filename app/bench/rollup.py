"""`netmap bench rollup`: full-scan throughput and incremental-run time of traffic rollups (PRF-3).

Generates a realistic business day of nginx access log in a scratch directory
(``--lines`` lines, default 1.65 M like one busy production day (PRF-3): a
diurnal load curve, Zipf-distributed paths — about 34 k five-minute rows a day
— query strings, mixed methods and statuses, a few unknown request lengths),
then on a scratch PostgreSQL:

1. ``parse_lines_per_s``: the parser and aggregator alone on one core;
2. the first (full) rollup run in runner mode (PostgreSQL checkpoints, rows
   upserted): ``full_lines_per_s`` is lines per second of its scan phase
   (read + parse + aggregate), ``full_run_seconds`` the whole run including
   writing partial sums and publishing every row;
3. five more minutes of traffic (~6,000 lines) appended, and an incremental run:
   ``incremental_seconds`` end to end (runner mode), and the same in standalone
   mode with a state directory (``incremental_seconds_state_dir``).

Prints one JSON object on stdout; progress on stderr. Never touches real data.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import sys
import tempfile
import time
from bisect import bisect_left
from datetime import date, datetime, timedelta, timezone
from itertools import accumulate
from pathlib import Path

import click

DOMAIN = "bench.example.com"
BUSINESS_TZ = timezone(timedelta(hours=8))
DAY = date(2026, 8, 1)
AGENTS = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0.0.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.5 Safari/605.1.15",
    "okhttp/4.12.0",
    "curl/8.5.0",
]
STATUSES = [200] * 80 + [206] * 4 + [304] * 8 + [301] * 1 + [404] * 4 + [499] + [500] + [502]


def _targets(rng: random.Random) -> tuple[list[tuple[str, str]], list[float]]:
    """(method, path) pairs with Zipf popularity: ~34 k five-minute rows per 1.65 M lines."""
    targets = [("GET", f"/uploads/{rng.getrandbits(40):010x}.webp") for _ in range(2700)]
    targets += [("GET", f"/static/js/chunk-{i}.js") for i in range(150)]
    targets += [(rng.choice(("GET", "POST")), f"/api/v1/endpoint-{i}") for i in range(150)]
    rng.shuffle(targets)
    weights = [1 / (rank + 1) ** 1.9 for rank in range(len(targets))]
    return targets, list(accumulate(weights))


class LogWriter:
    """Writes realistic lines for a time range; load follows a daily curve."""

    def __init__(self, seed: int = 20260801):
        self.rng = random.Random(seed)  # noqa: S311 - synthetic data, not secrets
        self.targets, self.cumulative = _targets(self.rng)
        self._stamps: dict[int, str] = {}

    def _stamp(self, epoch: int) -> str:
        stamp = self._stamps.get(epoch)
        if stamp is None:
            stamp = datetime.fromtimestamp(epoch, BUSINESS_TZ).strftime("%d/%b/%Y:%H:%M:%S %z")
            self._stamps[epoch] = stamp
        return stamp

    def lines(self, start: int, seconds: int, count: int) -> list[str]:
        rng = self.rng
        # Diurnal load: busiest early afternoon, quietest before dawn (business time).
        hours = [(start + s) / 3600 + 8 for s in range(0, seconds, 60)]
        weights = [1.0 + 0.85 * math.sin(2 * math.pi * ((h % 24) - 8) / 24) for h in hours]
        cumulative = list(accumulate(weights))
        total_weight = cumulative[-1]
        offsets = sorted(
            bisect_left(cumulative, rng.random() * total_weight) * 60 + rng.randrange(60)
            for _ in range(count)
        )
        total_path_weight = self.cumulative[-1]
        out = []
        for offset in offsets:
            epoch = start + min(offset, seconds - 1)
            method, path = self.targets[
                bisect_left(self.cumulative, rng.random() * total_path_weight)
            ]
            if rng.random() < 0.3:
                path += f"?X-Amz-Signature={rng.getrandbits(64):016x}&w={rng.choice((320, 640))}"
            if rng.random() < 0.003:
                method = "HEAD"
            status = rng.choice(STATUSES)
            body = rng.randint(200, 400_000) if status in (200, 206) else rng.randint(0, 600)
            length = rng.randint(350, 1400) if rng.random() > 0.01 else "-"
            out.append(
                f"{rng.randint(1, 223)}.{rng.randrange(256)}.{rng.randrange(256)}."
                f"{rng.randrange(1, 255)} - - [{self._stamp(epoch)}] "
                f'"{method} {path} HTTP/1.1" {status} {body} "https://{DOMAIN}/" '
                f'"{rng.choice(AGENTS)}" request_length={length} bytes_sent={body + 320}\n'
            )
        return out


def _write(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("".join(lines))


def _parse_rate(path: Path) -> float:
    from app.traffic.logline import LineAggregator

    aggregator = LineAggregator()
    started = time.perf_counter()
    with open(path, "rb") as handle:
        rest = b""
        while chunk := handle.read(4 << 20):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            aggregator.feed(lines)
    return aggregator.lines / (time.perf_counter() - started)


def _progress(message: str) -> None:
    print(f"[bench rollup] {message}", file=sys.stderr, flush=True)


@click.command("rollup")
@click.option("--lines", "line_count", type=click.IntRange(1000, 50_000_000), default=1_650_000)
@click.option("--append-lines", type=click.IntRange(1, 1_000_000), default=6000)
def command(line_count: int, append_lines: int) -> None:
    """Full-scan lines/s and incremental-run time of the traffic rollup."""
    from app.bench.scratch import scratch_database
    from app.traffic.rollup import RollupOptions, RollupRun
    from app.traffic.sinks import DatabaseRowSink
    from app.traffic.store_directory import DirectoryCheckpointStore
    from app.traffic.store_postgres import PostgresCheckpointStore

    workdir = Path(tempfile.mkdtemp(prefix="netmap-bench-rollup-"))
    try:
        log_dir = workdir / "nginx"
        log_dir.mkdir()
        log = log_dir / f"{DOMAIN}.access.log"
        day_start = int(datetime(DAY.year, DAY.month, DAY.day, tzinfo=BUSINESS_TZ).timestamp())
        writer = LogWriter()
        _progress(f"generating {line_count:,} lines")
        day_seconds = 86400 - 600  # the day so far; the next five minutes come later
        for part in range(0, day_seconds, 3600):
            share = round(line_count * min(3600, day_seconds - part) / day_seconds)
            _write(log, writer.lines(day_start + part, min(3600, day_seconds - part), share))
        lines_written = sum(1 for _ in open(log, "rb"))
        file_bytes = log.stat().st_size
        _progress(f"{lines_written:,} lines, {file_bytes / 1e6:,.0f} MB; parser alone")
        parse_rate = _parse_rate(log)
        now = day_start + 86400 - 60  # clock: 23:59 of the business day
        window = RollupOptions(
            granularity="5m", start_date=DAY, end_date=DAY, source_server="bench"
        )
        overrides = {"traffic": {"domains": [DOMAIN], "log_dir": str(log_dir)}}
        with scratch_database(overrides=overrides) as scratch:
            traffic = scratch.settings.traffic
            _progress("full run (runner mode: PostgreSQL checkpoints, rows upserted)")
            full = RollupRun(
                traffic, PostgresCheckpointStore(), DatabaseRowSink(), clock=lambda: now
            ).execute(window)
            state_dir = workdir / "state"
            _progress("full run (standalone mode: state directory)")
            state_store = DirectoryCheckpointStore(state_dir)
            try:
                RollupRun(traffic, state_store, DatabaseRowSink(), clock=lambda: now).execute(
                    window
                )
            finally:
                state_store.close()
            _write(log, writer.lines(day_start + day_seconds, 300, append_lines))
            _progress(f"appended {append_lines:,} lines (five minutes); incremental runs")
            started = time.perf_counter()
            incremental = RollupRun(
                traffic, PostgresCheckpointStore(), DatabaseRowSink(), clock=lambda: now
            ).execute(window)
            incremental_seconds = time.perf_counter() - started
            started = time.perf_counter()
            state_store = DirectoryCheckpointStore(state_dir)
            try:
                standalone = RollupRun(
                    traffic, state_store, DatabaseRowSink(), clock=lambda: now
                ).execute(window)
            finally:
                state_store.close()
            state_seconds = time.perf_counter() - started
        full_summary = full.as_dict()
        read_seconds = full.phase_seconds["read"]
        result = {
            "lines": lines_written,
            "file_bytes": file_bytes,
            "rows_5m": full_summary["rows"],
            "parse_lines_per_s": round(parse_rate),
            "full_lines_per_s": round(lines_written / read_seconds),
            "full_run_seconds": round(full.duration_ms / 1000, 3),
            "full_run_phase_ms": full_summary["phaseMs"],
            "incremental_lines": incremental.as_dict()["scannedLines"],
            "incremental_bytes_read": incremental.as_dict()["bytesRead"],
            "incremental_rows": incremental.rows,
            "incremental_seconds": round(incremental_seconds, 4),
            "incremental_phase_ms": incremental.as_dict()["phaseMs"],
            "incremental_seconds_state_dir": round(state_seconds, 4),
            "incremental_scan_mode": incremental.scan_mode,
            "ok": full.ok and incremental.ok and standalone.ok,
        }
        click.echo(json.dumps(result))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
