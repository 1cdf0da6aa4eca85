"""`phase_statements`: what the statements run between two readings of
pg_stat_statements did, per endpoint and per call."""

from __future__ import annotations

from app.bench.statements import phase_statements

# The test's short names for read_statements' keys.
_KEYS = {"read": "read_blocks", "dirtied": "dirtied_blocks", "exec_ms": "total_ms"}


def counters(query: str, calls: float, buffers: float, **more: float) -> dict[str, object]:
    fields = {"rows": 0, "read_blocks": 0, "dirtied_blocks": 0, "total_ms": 0, "wal_records": 0}
    fields.update({_KEYS.get(name, name): value for name, value in more.items()})
    return {"query": query, "calls": calls, "shared_blocks": buffers, **fields}


def test_only_what_ran_between_the_readings_counts_per_endpoint_and_per_call():
    before = {
        1: counters("COPY a", 10, 1000, rows=5000, exec_ms=50),
        2: counters("SELECT idle", 3, 30),
    }
    after = {
        1: counters("COPY a", 30, 7000, rows=15000, read=20, exec_ms=150, wal_records=400),
        2: counters("SELECT idle", 3, 30),  # did not run in the phase: left out
        3: counters("INSERT b", 4, 200, rows=4, exec_ms=2),  # new in the phase: counted whole
    }
    phase = phase_statements(before, after, endpoints=100)
    assert phase["statements"] == 2
    assert phase["buffers_per_endpoint"] == (6000 + 200) / 100
    assert phase["read_per_endpoint"] == 0.2
    assert phase["wal_records_per_endpoint"] == 4.0
    assert phase["exec_ms_per_endpoint"] == (100 + 2) / 100
    copy, insert = phase["top"]  # by buffers touched, most first
    assert copy == {
        "query": "COPY a",
        "calls": 20,
        "rows_per_call": 500.0,
        "buffers_per_call": 300.0,
        "read_per_call": 1.0,
        "exec_ms_per_call": 5.0,
    }
    assert insert["query"] == "INSERT b" and insert["buffers_per_call"] == 50.0


def test_top_keeps_the_costliest_and_cuts_long_queries():
    after = {n: counters("SELECT " + "x" * 200 + str(n), 1, n) for n in range(1, 9)}
    phase = phase_statements({}, after, endpoints=1, top=3, query_chars=20)
    assert [entry["buffers_per_call"] for entry in phase["top"]] == [8.0, 7.0, 6.0]
    assert all(len(entry["query"]) == 20 for entry in phase["top"])


def test_no_counters_to_read_is_no_figure_not_zero():
    assert phase_statements(None, {}, endpoints=10) is None
    assert phase_statements({}, None, endpoints=10) is None
