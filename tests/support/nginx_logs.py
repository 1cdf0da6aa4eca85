"""Real nginx log files for traffic tests: lines, appends, and logrotate's rotation styles.

``LogDir`` writes one domain's ``<domain>.access.log`` family in a directory and
rotates it the ways logrotate does: rename + create, copytruncate, gzip of a
rotated file (real gzip files), deletion. ``expected_rows`` is the reference
answer, folded line by line with the readable ``parse_line``; the tests compare
what a sink received against it. ``MemorySink`` keeps rows by key like the
server's upsert: it stands in for the remote receiver, the edge of a rollup run.
"""

from __future__ import annotations

import gzip
import os
import shutil
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

from app.traffic.business_time import BusinessCalendar
from app.traffic.logline import ParsedLine, parse_line
from app.traffic.partials import partials_from_buckets

CST = timezone(timedelta(hours=8))


def nginx_line(
    when: datetime,
    path: str = "/asset.webp",
    *,
    method: str = "GET",
    status: int = 200,
    body_bytes: int = 100,
    request_length: int | None = 42,
    bytes_sent: int | None = -1,
    address: str = "203.0.113.7",
) -> str:
    """One combined-format line plus the request_length= / bytes_sent= extras."""
    stamp = when.strftime("%d/%b/%Y:%H:%M:%S %z")
    sent = body_bytes + 250 if bytes_sent == -1 else bytes_sent
    extras = []
    extras.append(f"request_length={'-' if request_length is None else request_length}")
    if sent is not None:
        extras.append(f"bytes_sent={sent}")
    return (
        f'{address} - - [{stamp}] "{method} {path} HTTP/1.1" {status} {body_bytes} '
        f'"https://ref.example/" "Mozilla/5.0 (test)" {" ".join(extras)}\n'
    )


class LogDir:
    def __init__(self, root: Path, domain: str):
        self.root = root
        self.domain = domain
        root.mkdir(parents=True, exist_ok=True)
        self.written: list[str] = []  # every complete line ever written, for expected_rows

    def path(self, suffix: str = "") -> Path:
        return self.root / f"{self.domain}.access.log{suffix}"

    def append(self, text: str, suffix: str = "") -> None:
        with open(self.path(suffix), "a", encoding="utf-8") as handle:
            handle.write(text)

    def write_lines(self, lines: list[str], suffix: str = "") -> None:
        self.append("".join(lines), suffix)
        self.written.extend(lines)

    def rotated_suffixes(self) -> list[str]:
        found = []
        for path in self.root.glob(f"{self.domain}.access.log.*"):
            found.append(path.name[len(f"{self.domain}.access.log") :])
        return sorted(found, key=lambda s: int(s.strip(".").split(".")[0]))

    def _shift(self) -> None:
        for suffix in reversed(self.rotated_suffixes()):
            number = int(suffix.strip(".").split(".")[0])
            new = suffix.replace(f".{number}", f".{number + 1}", 1)
            os.rename(self.path(suffix), self.path(new))

    def rotate_rename(self) -> None:
        """logrotate's default: access.log → access.log.1 (same inode), a new access.log."""
        self._shift()
        os.rename(self.path(), self.path(".1"))
        self.path().touch()

    def copytruncate(self) -> None:
        """logrotate copytruncate: copy access.log to access.log.1, truncate the original."""
        self._shift()
        shutil.copyfile(self.path(), self.path(".1"))
        os.truncate(self.path(), 0)

    def compress(self, suffix: str) -> str:
        """gzip a rotated plain file the way logrotate does (new file, original removed)."""
        source = self.path(suffix)
        target = self.path(suffix + ".gz")
        with open(source, "rb") as plain, gzip.open(target, "wb") as packed:
            shutil.copyfileobj(plain, packed)
        source.unlink()
        return suffix + ".gz"


def reference_sums(lines: list[str], timezone_name: str = "+08:00"):
    """Expected sums per (granularity, bucket, method, path), one line at a time."""
    calendar = BusinessCalendar(timezone_name)
    buckets: dict[tuple[int, bytes, bytes], list[int]] = defaultdict(lambda: [0] * 10)
    for text in lines:
        parsed = parse_line(text.rstrip("\n").encode())
        if not isinstance(parsed, ParsedLine):
            continue
        sums = buckets[(parsed.epoch - parsed.epoch % 300, parsed.method, parsed.path)]
        sums[0] += parsed.response_bytes
        sums[3] += 1
        sums[parsed.status_slot] += 1
        if parsed.request_bytes is not None:
            sums[1] += parsed.request_bytes
            sums[2] += 1
    return partials_from_buckets(dict(buckets), calendar, 1024)


def rows_as_sums(rows: dict) -> dict:
    """MemorySink rows → the same shape as reference_sums (zero rows dropped)."""
    result = {}
    for row in rows.values():
        bucket = int(datetime.fromisoformat(row["bucket_start"]).timestamp())
        counts = row["status_counts"]
        sums = [
            row["response_bytes"],
            row["request_bytes"] or 0,
            row["request_bytes_known_count"],
            row["total_requests"],
            counts["1xx"],
            counts["2xx"],
            counts["3xx"],
            counts["4xx"],
            counts["5xx"],
            counts["other"],
        ]
        if row["total_requests"]:
            result[(row["granularity"], bucket, row["method"], row["path"])] = sums
    return result


class MemorySink:
    writes_database = False

    def __init__(self) -> None:
        self.rows: dict[tuple, dict] = {}
        self.batches = 0
        self.fail_next = 0

    def write(self, rows: list[dict]) -> int:
        from app.traffic.sinks import SinkError

        if self.fail_next:
            self.fail_next -= 1
            raise SinkError("receiver unavailable (test)")
        self.batches += 1
        for row in rows:
            key = (
                row["domain"],
                row["granularity"],
                row["bucket_start"],
                row["method"],
                row["path"],
            )
            self.rows[key] = row
        return len(rows)

    def for_domain(self, domain: str) -> dict:
        return {k: v for k, v in self.rows.items() if k[0] == domain}
