"""Export text written by PostgreSQL is byte for byte the generic encoder's (EXP-7).

The same export is built twice from the same stored endpoints: once with the
documents encoded in Python (the path every search store has) and once with
PostgreSQL writing the CSV and JSON text (``app.search.export_text``). Values are
chosen to hit every quoting and escaping rule; chunks the database must leave to
Python (floats in details, IPv4-embedding IPv6 addresses) are mixed in, and the
plain chunks are checked to really be the database's own text.
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from app.exports.build import database_text_pages, endpoint_pages, export_chunks
from app.exports.formats import FORMULA_STARTS, encode_pages
from app.exports.records import ExportClaim
from app.leases import LeaseGuard, LeaseLost
from app.search.export_text import read_export_text
from app.search.postgres_store import PostgresStore
from tests.support.search_documents import BASE_TIME, execution_endpoint

PLAIN_EXECUTION, MIXED_EXECUTION = 9101, 9102

NASTY_TEXT = [
    "plain",
    "",
    None,
    "comma, inside",
    'a "quoted" word',
    "line\nbreak",
    "carriage\rreturn",
    "crlf\r\nend",
    "tab\there",
    "back\\slash \\n not a newline",
    "control \x01\x1f\x7f chars",
    "unicode é ü 漢字 😀",
    "\\.",
    " leading and trailing ",
    "semi;colon",
    "#hash",
    "\u2028 line separator",
    'all of them: ,"\n\r\\\t',
    # Formula starts (CSV injection): neutralised alike by both encoders.
    '=HYPERLINK("http://x","y")',
    "+1+2",
    "-2+3",
    "@SUM(A1:A2)",
    "\tstarts with a tab",
    "\rstarts with CR",
    "'already quoted",
]

NASTY_DETAILS = [
    {},
    {"address_family": "ipv4"},
    {"tls": {"subject": "CN=a, O=b: c", "san": ["a.example", "b.example"]}},
    {"http": {"status": 200, "title": 'He said "hi",\n', "headers": {"X-A": "1: 2"}}},
    {"flag": True, "off": False, "none": None, "big": 12345678901234567890, "neg": -5},
    {"empty_object": {}, "empty_list": [], "nested": [[1, 2], {"k": [3]}]},
    {"zz": 1, "a": 2, "long key": 3, "b": {"y": 1, "x": 2}},
    {'quote"key': "v", "back\\slash": "\\", "ctl": "\x02", "uni": "é😀"},
    {"dots outside? no": "1.5 in a string", "ip": "192.0.2.1"},
    {"n": None, "s": 'null, : "x": y', "list": [None, "a, b"]},
]

# Values PostgreSQL would print differently from Python: these chunks go the generic way.
NOT_EXACT = [
    {"ip": "192.0.2.200", "details": {"score": 0.5}},
    {"ip": "192.0.2.201", "details": {"tiny": 1e-05, "nested": [{"f": 2.0}]}},
    {"ip": "::ffff:192.0.2.1", "details": {}},
    {"ip": "::192.0.2.2", "details": {}},
]


def _plain_endpoints(execution_id: int) -> list:
    docs = []
    for n, text in enumerate(NASTY_TEXT):
        ip = f"2001:db8:0:0:1:0:0:{n + 1:x}" if n % 3 == 0 else f"192.0.2.{n + 1}"
        docs.append(
            execution_endpoint(
                execution_id,
                ip,
                (n * 7919) % 65536,
                "udp" if n % 4 == 0 else "tcp",
                task_id=77,
                # Fractions of every length: .5 is printed ".5" by PostgreSQL, ".500000" by Python.
                first_seen=BASE_TIME + timedelta(microseconds=(n * 123457, 500000, 120)[n % 3]),
                last_seen=BASE_TIME + timedelta(hours=n, microseconds=(n % 2) * 10),
                state="open" if n % 2 else None,
                service=text,
                product=NASTY_TEXT[(n + 1) % len(NASTY_TEXT)],
                version=NASTY_TEXT[(n + 2) % len(NASTY_TEXT)],
                banner=NASTY_TEXT[(n + 3) % len(NASTY_TEXT)],
                hostname=NASTY_TEXT[(n + 4) % len(NASTY_TEXT)],
                tags=[t for t in NASTY_TEXT[n % 5 : n % 5 + 3] if t is not None],
                details=NASTY_DETAILS[n % len(NASTY_DETAILS)],
            )
        )
    return docs


def _mixed_endpoints(execution_id: int) -> list:
    docs = _plain_endpoints(execution_id)
    for n, extra in enumerate(NOT_EXACT):
        docs.append(
            execution_endpoint(
                execution_id, extra["ip"], 1000 + n, task_id=77, details=extra["details"]
            )
        )
    return docs


@pytest.fixture
def pg_store(settings, engine) -> Iterator[PostgresStore]:
    store = PostgresStore(settings)
    store.ensure_schema()
    store.write_execution_endpoints(_plain_endpoints(PLAIN_EXECUTION)).raise_for_failures()
    store.write_execution_endpoints(_mixed_endpoints(MIXED_EXECUTION)).raise_for_failures()
    yield store
    store.close()


def _claim(fmt: str, execution_ids: tuple[int, ...]) -> ExportClaim:
    return ExportClaim(
        id=5,
        task_id=77,
        task_name='text, "quoted" é',
        format=fmt,
        execution_ids=execution_ids,
        object_key=f"exports/5/x.{fmt}",
        claim_token=uuid.uuid4(),
        attempts=1,
        lease_seconds=60,
    )


def _build(store, claim: ExportClaim, *, database_text: bool, page_size: int) -> tuple[bytes, int]:
    stats: dict = {}
    data = b"".join(
        export_chunks(
            claim,
            store,
            page_size=page_size,
            guard=None,
            stats=stats,
            database_text=database_text,
        )
    )
    return data, stats["rows"]


def _members(archive: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        assert z.testzip() is None
        return {name: z.read(name) for name in z.namelist()}


@pytest.mark.parametrize("page_size", [1, 3, 1000])
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "zip"])
def test_database_text_is_byte_identical_to_the_generic_encoder(pg_store, fmt, page_size):
    claim = _claim(fmt, (PLAIN_EXECUTION, MIXED_EXECUTION))
    generic, generic_rows = _build(pg_store, claim, database_text=False, page_size=page_size)
    database, database_rows = _build(pg_store, claim, database_text=True, page_size=page_size)
    expected_rows = len(NASTY_TEXT) * 2 + len(NOT_EXACT)
    assert generic_rows == database_rows == expected_rows
    if fmt != "zip":
        assert database == generic
        return
    generic_members, database_members = _members(generic), _members(database)
    assert list(database_members) == ["endpoints.csv", "endpoints.jsonl", "manifest.json"]
    for name in generic_members:
        assert database_members[name] == generic_members[name], name
    manifest = json.loads(database_members["manifest.json"])
    assert manifest["members"]["endpoints.csv"]["rows"] == expected_rows
    assert manifest["members"]["endpoints.jsonl"]["rows"] == expected_rows


def test_plain_chunks_are_written_by_the_database_not_the_fallback(pg_store):
    """Equality above must not come from every chunk falling back to Python."""
    chunk = pg_store.read_execution_export_text(
        PLAIN_EXECUTION, after_id=None, limit=1000, csv=True, jsonl=True
    )
    assert chunk.exact and chunk.rows == len(NASTY_TEXT)
    docs = pg_store.read_execution_endpoints(PLAIN_EXECUTION, after_id=None, limit=1000)
    [python] = list(encode_pages([docs]))
    assert chunk.csv == python.csv
    assert chunk.jsonl == python.jsonl
    assert chunk.last_id == docs[-1].id
    for line in chunk.jsonl.splitlines():
        json.loads(line)  # every line is JSON on its own


@pytest.mark.parametrize("extra", NOT_EXACT, ids=lambda e: e["ip"])
def test_values_python_prints_differently_send_the_chunk_to_the_generic_encoder(
    settings, engine, extra
):
    store = PostgresStore(settings)
    try:
        execution_id = 9200
        doc = execution_endpoint(execution_id, extra["ip"], 1, task_id=77, details=extra["details"])
        store.write_execution_endpoints([doc]).raise_for_failures()
        chunk = store.read_execution_export_text(
            execution_id, after_id=None, limit=10, csv=True, jsonl=True
        )
        assert (chunk.rows, chunk.exact) == (1, False)
        pages = list(
            database_text_pages(store, (execution_id,), chunk_rows=10, csv=True, jsonl=True)
        )
        generic = list(encode_pages(endpoint_pages(store, (execution_id,), page_size=10)))
        assert pages == generic
    finally:
        store.close()


def test_no_connection_is_held_while_a_chunk_goes_to_the_object_store(pg_store, engine):
    """docs/architecture.md, rule: short transactions: each chunk's statement is done and its
    connection back in the pool before the chunk is handed on. The next chunk is read
    meanwhile (prefetch), so a slow consumer must see every connection returned soon."""
    claim = _claim("csv", (PLAIN_EXECUTION, MIXED_EXECUTION))
    handed_on = 0
    for _chunk in export_chunks(
        claim, pg_store, page_size=1, guard=None, stats={}, database_text=True
    ):
        deadline = time.monotonic() + 10
        while engine.pool.checkedout() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.pool.checkedout() == 0
        handed_on += 1
    # The header, then one chunk of at most 10 rows at a time: 25 = 10 + 10 + 5,
    # 29 = 10 + 10 + 9.
    assert handed_on == 1 + 3 + 3


def test_a_lost_lease_in_the_prefetching_reader_stops_the_build(pg_store, engine):
    guard = LeaseGuard(60, claimed_at=time.monotonic(), runner_cancel=threading.Event())
    chunks = export_chunks(
        _claim("csv", (PLAIN_EXECUTION, MIXED_EXECUTION)),  # 5 chunks: at most 2 read ahead
        pg_store,
        page_size=1,
        guard=guard,
        stats={},
        database_text=True,
    )
    assert next(chunks).startswith(b"task_id,")
    assert next(chunks)  # the first chunk of 10 rows
    guard.lose("lease_lost", "test")
    with pytest.raises(LeaseLost):
        list(chunks)
    assert not [t for t in threading.enumerate() if t.name.startswith("export-text-")]
    assert engine.pool.checkedout() == 0


def test_a_date_style_other_than_iso_sends_every_chunk_to_the_generic_encoder(pg_store, engine):
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL DateStyle = 'SQL, DMY'"))
        chunk = read_export_text(conn, PLAIN_EXECUTION, after_id=None, limit=1000)
        assert (chunk.rows, chunk.exact) == (len(NASTY_TEXT), False)
        conn.execute(sa.text("SET LOCAL DateStyle = 'ISO, DMY'"))
        assert read_export_text(conn, PLAIN_EXECUTION, after_id=None, limit=1000).exact


FORMULAS = ['=HYPERLINK("http://x","y")', "+1+2", "-2+3", "@SUM(A1:A2)", "\tx", "\rx"]
# A CR inside a value: unquoted, spreadsheets and Python's reader ended the row there and
# the rest began a new row whose first cell was a live formula.
CR_INSIDE = ["x\r=cmd|' /C calc'!A0", "\r=cmd|' /C calc'!A0"]


@pytest.mark.parametrize("database_text", [False, True], ids=["generic", "database"])
def test_formula_cells_are_neutralised_in_csv_and_exact_in_jsonl(settings, engine, database_text):
    import csv

    store = PostgresStore(settings)
    store.ensure_schema()
    try:
        texts = FORMULAS + CR_INSIDE
        docs = [
            execution_endpoint(9301, f"192.0.2.{n + 1}", 80, task_id=77, banner=text, service=text)
            for n, text in enumerate(texts)
        ]
        store.write_execution_endpoints(docs).raise_for_failures()
        claim = _claim("csv", (9301,))
        data, _rows = _build(store, claim, database_text=database_text, page_size=1000)
        rows = list(csv.DictReader(io.StringIO(data.decode(), newline="")))
        assert len(rows) == len(texts)  # no value starts a row of its own
        expected = sorted(("'" + t) if t.startswith(FORMULA_STARTS) else t for t in texts)
        assert sorted(r["banner"] for r in rows) == expected
        assert sorted(r["service"] for r in rows) == expected
        assert all(r["ip"].startswith("192.0.2.") for r in rows)
        claim = _claim("jsonl", (9301,))
        data, _rows = _build(store, claim, database_text=database_text, page_size=1000)
        lines = [json.loads(line) for line in data.decode().splitlines()]
        assert sorted(line["banner"] for line in lines) == sorted(texts)
    finally:
        store.close()
