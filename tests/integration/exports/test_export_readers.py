"""Export text read by several database connections at once keeps its order (EXP-7).

``database_text_pages`` cuts each execution's endpoints into keyset ranges whose
bounds come from the index and has ``readers`` threads write ranges at the same
time; the export must be the same bytes as one reader's, and as the generic
encoder's, whatever the chunk size, and a range holding a value the database
cannot write exactly still falls back to Python for that range only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from app.exports.build import database_text_pages, endpoint_pages
from app.exports.formats import encode_pages
from app.search.postgres_store import PostgresStore
from tests.support.search_documents import execution_endpoint

BIG, MIXED = 9301, 9302
ROWS = 47  # not a multiple of any chunk size below


@pytest.fixture
def store(settings, engine) -> Iterator[PostgresStore]:
    store = PostgresStore(settings)
    store.ensure_schema()
    docs = [
        execution_endpoint(
            BIG, f"198.51.100.{n}", 80 + n, task_id=7, banner=f"b, {n}", tags=["x"], details={}
        )
        for n in range(ROWS)
    ]
    # One float in details: the chunk holding it is encoded in Python (export_text).
    mixed = [
        execution_endpoint(MIXED, f"203.0.113.{n}", 443, task_id=7, details={"n": n})
        for n in range(ROWS)
    ]
    mixed[20] = execution_endpoint(MIXED, "203.0.113.20", 443, task_id=7, details={"f": 1.5})
    store.write_execution_endpoints(docs + mixed).raise_for_failures()
    yield store
    store.close()


def _text(pages) -> tuple[bytes, bytes, int]:
    pages = list(pages)
    return (
        b"".join(p.csv for p in pages),
        b"".join(p.jsonl for p in pages),
        sum(p.rows for p in pages),
    )


def _readers_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("export-text")]


@pytest.mark.parametrize("chunk_rows", [1, 5, 16, 1000])
@pytest.mark.parametrize("readers", [2, 3])
def test_parallel_readers_write_the_same_bytes_as_one_reader_and_python(store, chunk_rows, readers):
    executions = (BIG, MIXED)
    generic = _text(encode_pages(endpoint_pages(store, executions, page_size=7)))
    one = _text(database_text_pages(store, executions, chunk_rows=chunk_rows, csv=True, jsonl=True))
    many = _text(
        database_text_pages(
            store, executions, chunk_rows=chunk_rows, csv=True, jsonl=True, readers=readers
        )
    )
    assert many == one == generic
    assert generic[2] == 2 * ROWS
    assert not _readers_alive()


def test_chunks_keep_their_size_across_ranges(store):
    pages = list(
        database_text_pages(store, (BIG,), chunk_rows=10, csv=True, jsonl=False, readers=2)
    )
    assert [p.rows for p in pages] == [10, 10, 10, 10, 7]


def test_range_bounds_come_from_the_index_in_order(store):
    bounds = store.read_execution_export_bounds(BIG, after_id=None, chunk_rows=10, chunks=16)
    docs = store.read_execution_endpoints(BIG, after_id=None, limit=ROWS)
    assert bounds == [docs[9].id, docs[19].id, docs[29].id, docs[39].id]
    later = store.read_execution_export_bounds(BIG, after_id=bounds[1], chunk_rows=10, chunks=1)
    assert later == [bounds[2]]


def test_a_caller_that_stops_early_leaves_no_reader_and_no_connection(store, engine):
    pages = database_text_pages(store, (BIG, MIXED), chunk_rows=3, csv=True, jsonl=True, readers=2)
    assert next(pages).rows == 3
    pages.close()
    assert not _readers_alive()
    assert engine.pool.checkedout() == 0
