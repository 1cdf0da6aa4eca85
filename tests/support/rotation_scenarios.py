"""Random histories of one log family for the "any run boundaries give the same totals" property.

A history is a list of steps: append lines (sometimes ending in half a line that
the next write completes, as nginx's buffered writes can look), rotate by
rename + create, rotate by copytruncate, gzip the newest rotated file, and run
the rollup (5-minute or day). ``play`` performs them on real files and finally
runs both granularities once more; the property is that the rows received then
equal the sums of every complete line written, folded one line at a time.
Lines straddle a business midnight and are sometimes out of order or malformed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from hypothesis import strategies as st

from app.config import load_settings
from app.traffic.rollup import RollupOptions, RollupRun
from tests.support.nginx_logs import (
    CST,
    LogDir,
    MemorySink,
    nginx_line,
    reference_sums,
    rows_as_sums,
)

DOMAIN = "prop.example.com"
START = datetime(2026, 7, 31, 23, 30, tzinfo=CST)
NOW = datetime(2026, 8, 1, 12, 0, tzinfo=CST).timestamp()
PATHS = ["/", "/a.webp", "/b.webp", "/api/x", "/img/c.png?sig=1"]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 40), st.booleans()),
        st.tuples(st.just("rename"), st.just(0), st.just(False)),
        st.tuples(st.just("copytruncate"), st.just(0), st.just(False)),
        st.tuples(st.just("compress"), st.just(0), st.just(False)),
        st.tuples(st.just("run"), st.sampled_from([0, 1]), st.just(False)),
    ),
    min_size=1,
    max_size=14,
)


@dataclass
class Player:
    logs: LogDir
    sink: MemorySink
    make_store: object  # () -> CheckpointStore
    rng: random.Random
    clock_offset: float = 0.0
    pending_tail: str = ""  # the rest of a half-written line

    def __post_init__(self) -> None:
        settings, _ = load_settings(
            env={},
            overrides={
                "traffic": {
                    "domains": [DOMAIN],
                    "log_dir": str(self.logs.root),
                    "day_cache_hours": 1.0,
                    "batch_size": 7,
                }
            },
        )
        self.settings = settings.traffic
        self.cursor = START
        self.logs.path().touch()  # nginx creates its log before anything is rotated

    def _line(self) -> str:
        self.cursor += timedelta(seconds=self.rng.randint(0, 90))
        when = self.cursor
        if self.rng.random() < 0.1:
            when -= timedelta(minutes=self.rng.randint(5, 45))  # out of order
        if self.rng.random() < 0.04:
            return "malformed line without quotes\n"
        return nginx_line(
            when,
            self.rng.choice(PATHS),
            method=self.rng.choice(["GET", "GET", "POST"]),
            status=self.rng.choice([200, 200, 304, 404, 500]),
            body_bytes=self.rng.randint(0, 5000),
            request_length=self.rng.choice([None, self.rng.randint(1, 900)]),
        )

    def finish_tail(self) -> None:
        if self.pending_tail:
            self.logs.append(self.pending_tail)
            self.pending_tail = ""

    def append(self, count: int, leave_half: bool) -> None:
        text = self.pending_tail
        self.pending_tail = ""
        new = [self._line() for _ in range(count)]
        self.logs.written.extend(new)
        text += "".join(new)
        if leave_half:
            last = self._line()
            self.logs.written.append(last)
            cut = self.rng.randint(1, len(last) - 1)
            text += last[:cut]
            self.pending_tail = last[cut:]
        self.logs.append(text)

    def run(self, granularity: str) -> dict:
        store = self.make_store()
        try:
            runner = RollupRun(
                self.settings, store, self.sink, clock=lambda: NOW + self.clock_offset
            )
            summary = runner.execute(
                RollupOptions(
                    granularity=granularity,
                    start_date=date(2026, 7, 30),
                    end_date=date(2026, 8, 2),
                    source_server="property",
                )
            )
        finally:
            store.close()
        assert summary.ok, summary.as_dict()
        return summary.as_dict()

    def play(self, history) -> None:
        for kind, number, flag in history:
            if kind == "append":
                self.append(number, flag)
            elif kind == "rename":
                self.finish_tail()
                self.logs.rotate_rename()
            elif kind == "copytruncate":
                self.finish_tail()
                self.logs.copytruncate()
            elif kind == "compress":
                if self.logs.path(".1").exists():
                    self.logs.compress(".1")
            else:
                self.clock_offset += 3600  # later runs may revalidate completed days
                self.run("5m" if number == 0 else "day")
        self.finish_tail()
        self.run("5m")
        self.run("day")

    def check(self) -> None:
        expected = reference_sums(self.logs.written)
        received = rows_as_sums(self.sink.rows)
        assert received == {k: v for k, v in expected.items() if v[3]}
