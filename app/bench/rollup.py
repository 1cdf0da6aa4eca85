"""`netmap bench rollup`: the traffic rollup as an operator runs it, end to end (PRF-3).

Writes a realistic business day of nginx access log to a scratch directory
(``--lines`` lines, default 1.65 M like one busy production day (PRF-3): a diurnal load
curve, Zipf-distributed paths — about 34 k five-minute rows a day — query
strings, mixed methods and statuses, a few unknown request lengths), or copies
a real log given with ``--log-file``. Then it runs the real command,
``netmap traffic rollup``, as a subprocess:

* ``--mode database`` (default): rows and checkpoints in a scratch embedded
  PostgreSQL (durable settings, as ``netmap up`` runs it);
* ``--mode standalone``: checkpoints in a scratch ``--state-dir``, rows posted
  to a scratch netmap server (``--endpoint``) backed by that PostgreSQL.

Measured: ``parse_lines_per_s`` (the parser and aggregator alone, in this
process, one core); ``full_run_seconds`` and ``end_to_end_lines_per_s`` (first
run, command start to exit, rows committed) with the split the command reports
(``split_seconds``: start-up and exit, reading, parsing, aggregating,
checkpoints and partial sums, row writes), its peak RSS and its CPU seconds
(``*_cpu_seconds``: the command and its worker processes, user + system; the
database server's work is not in it; in standalone mode
``full_run_server_cpu_seconds`` is the ingest endpoint's, served from this process); then five more
minutes of traffic (``--append-lines``) are appended and
``incremental_run_seconds`` is the next run, again start to exit.
``help_start_seconds`` is ``netmap traffic rollup --help``: the command's start
alone.

Prints one JSON object on stdout; progress on stderr. Never touches real data:
a ``--log-file`` is copied, never written.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
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


def _line_epoch(line: bytes) -> int | None:
    from app.traffic.logline import ParsedLine, parse_line

    parsed = parse_line(line.rstrip(b"\n"))
    return parsed.epoch if isinstance(parsed, ParsedLine) else None


def _first_and_last_epoch(path: Path) -> tuple[int, int]:
    """Times of the first and last parseable lines (the log's business days)."""
    first = last = None
    with open(path, "rb") as handle:
        for line in handle:
            first = _line_epoch(line)
            if first is not None:
                break
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - (1 << 20)))
        for line in reversed(handle.read().split(b"\n")):
            last = _line_epoch(line)
            if last is not None:
                break
    if first is None or last is None:
        raise click.UsageError(f"--log-file: no nginx access-log lines found in {path}")
    return first, last


@contextlib.contextmanager
def _rollup_server(settings, token: str):
    """A netmap server for the standalone mode: the real app on 127.0.0.1, a free port."""
    from werkzeug.serving import make_server

    from app import create_app, db

    settings = settings.replace(traffic={"ingest_token": token})
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    application = create_app(settings, engine=db.get_engine(), modules="off")
    server = make_server("127.0.0.1", 0, application, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def _run_command(args: list[str], env: dict[str, str]) -> tuple[float, dict, float, float]:
    """Runs ``netmap ARGS``; (seconds start to exit, JSON summary, peak RSS MB, CPU seconds
    of the command and its worker processes: a figure a busy machine disturbs less)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", "app", *args], stdout=out, stderr=err, env=env
        )
        # wait4: this child's own rusage (largest resident set among it and the
        # processes it waited for), not the whole bench's.
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    lines = stdout.strip().splitlines()
    try:
        summary = json.loads(lines[-1]) if lines else {}
    except ValueError:
        summary = {}
    if process.returncode not in (0, 1) or not summary:
        raise click.ClickException(
            f"netmap {' '.join(args[:2])} failed ({process.returncode}): {stderr[-2000:]}"
        )
    return seconds, summary, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def _split(seconds: float, summary: dict) -> dict[str, float]:
    """Where a run's time went: the command's own phases, and start-up + exit around them."""
    split = {name: round(ms / 1000, 3) for name, ms in summary.get("phaseMs", {}).items()}
    split["start_and_exit"] = round(seconds - summary.get("durationMs", 0) / 1000, 3)
    return split


@click.command("rollup")
@click.option("--lines", "line_count", type=click.IntRange(1000, 50_000_000), default=1_650_000)
@click.option("--append-lines", type=click.IntRange(1, 1_000_000), default=6000)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 50000),
    help="Passed to `netmap traffic rollup --batch-size` (default: [traffic] batch_size).",
)
@click.option(
    "--log-file",
    type=click.Path(exists=True, dir_okay=False),
    help="Measure on a copy of this nginx access log instead of a generated day.",
)
@click.option(
    "--mode",
    type=click.Choice(["database", "standalone"]),
    default="database",
    show_default=True,
    help="database: checkpoints and rows in PostgreSQL; standalone: --state-dir + --endpoint.",
)
def command(
    line_count: int, append_lines: int, batch_size: int | None, log_file: str | None, mode: str
) -> None:
    """The real `netmap traffic rollup`, full and incremental, start to exit."""
    from app.bench.scratch import scratch_database
    from app.traffic.business_time import BusinessCalendar

    workdir = Path(tempfile.mkdtemp(prefix="netmap-bench-rollup-"))
    try:
        log_dir = workdir / "nginx"
        log_dir.mkdir()
        log = log_dir / f"{DOMAIN}.access.log"
        writer = LogWriter()
        if log_file:
            _progress(f"copying {log_file}")
            shutil.copyfile(log_file, log)
            first, last = _first_and_last_epoch(log)
            append_start = last + 1
        else:
            day_start = int(datetime(DAY.year, DAY.month, DAY.day, tzinfo=BUSINESS_TZ).timestamp())
            _progress(f"generating {line_count:,} lines")
            day_seconds = 86400 - 600  # the day so far; the next five minutes come later
            for part in range(0, day_seconds, 3600):
                share = round(line_count * min(3600, day_seconds - part) / day_seconds)
                _write(log, writer.lines(day_start + part, min(3600, day_seconds - part), share))
            first, append_start = day_start, day_start + day_seconds
        with open(log, "rb") as handle:
            chunks = iter(lambda: handle.read(1 << 22), b"")
            lines_written = sum(chunk.count(b"\n") for chunk in chunks)
        file_bytes = log.stat().st_size
        _progress(f"{lines_written:,} lines, {file_bytes / 1e6:,.0f} MB; parser alone")
        parse_rate = _parse_rate(log)
        calendar = BusinessCalendar(BUSINESS_TZ)
        window = [
            "--start-date",
            calendar.business_date(first).isoformat(),
            "--end-date",
            calendar.business_date(append_start + 300).isoformat(),
        ]
        overrides = {"traffic": {"domains": [DOMAIN], "log_dir": str(log_dir)}}
        # Durable settings, like the embedded server `netmap up` runs: what users see.
        durable = {"fsync": "on", "full_page_writes": "on"}
        with contextlib.ExitStack() as stack:
            scratch = stack.enter_context(
                scratch_database(overrides=overrides, server_tuning=durable)
            )
            env = {k: v for k, v in os.environ.items() if not k.startswith("NETMAP_")}
            env.update(
                NETMAP_DATA_DIR=str(workdir / "var"),
                NETMAP_LOG_LEVEL="WARNING",
                NETMAP_DATABASE_URL=scratch.database_url,
            )
            args = [
                "traffic",
                "rollup",
                "--log-dir",
                str(log_dir),
                "--domains",
                DOMAIN,
                "--source-server",
                "bench",
                *window,
            ]
            if batch_size is not None:
                args += ["--batch-size", str(batch_size)]
            if mode == "standalone":
                token = secrets.token_urlsafe(24)
                endpoint = stack.enter_context(_rollup_server(scratch.settings, token))
                env["NETMAP_BENCH_ROLLUP_TOKEN"] = token
                args += ["--state-dir", str(workdir / "state"), "--endpoint", endpoint]
                args += ["--token-env", "NETMAP_BENCH_ROLLUP_TOKEN"]
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "app", "traffic", "rollup", "--help"],
                env=env,
                capture_output=True,
                check=True,
            )
            help_seconds = time.perf_counter() - started
            _progress(f"full run ({mode} mode): netmap {' '.join(args)}")
            server_cpu = time.process_time()
            full_seconds, full, full_rss, full_cpu = _run_command(args, env)
            # Standalone: this process serves the ingest endpoint (werkzeug threads) while
            # the command runs, so its CPU time is the server's share of the run.
            server_cpu = time.process_time() - server_cpu
            _write(log, writer.lines(append_start, 300, append_lines))
            _progress(f"appended {append_lines:,} lines (five minutes); incremental run")
            inc_seconds, incremental, inc_rss, inc_cpu = _run_command(args, env)
        result = {
            "mode": mode,
            "batch_size": batch_size,
            "log_file": log_file,
            "lines": lines_written,
            "file_bytes": file_bytes,
            "rows_published": full.get("rows"),
            "parse_lines_per_s": round(parse_rate),
            "full_run_seconds": round(full_seconds, 3),
            "end_to_end_lines_per_s": round(lines_written / full_seconds),
            "full_run_split_seconds": _split(full_seconds, full),
            "full_run_peak_rss_mb": round(full_rss, 1),
            "full_run_cpu_seconds": round(full_cpu, 3),
            "full_run_server_cpu_seconds": round(server_cpu, 3) if mode == "standalone" else None,
            "full_run_scan_mode": full.get("scanMode"),
            "incremental_lines": incremental.get("scannedLines"),
            "incremental_rows": incremental.get("rows"),
            "incremental_run_seconds": round(inc_seconds, 3),
            "incremental_run_split_seconds": _split(inc_seconds, incremental),
            "incremental_run_peak_rss_mb": round(inc_rss, 1),
            "incremental_run_cpu_seconds": round(inc_cpu, 3),
            "incremental_scan_mode": incremental.get("scanMode"),
            "help_start_seconds": round(help_seconds, 3),
            "ok": bool(full.get("ok") and incremental.get("ok")),
        }
        click.echo(json.dumps(result))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
