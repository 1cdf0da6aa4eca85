"""The PostgreSQL search store (STO-1 default): facts, execution endpoints, current assets.

This adapter IS the store, so it opens its own short transactions with
``app.db.transaction()`` (one per shard). Writes are set-based: every shard is
one ``INSERT … SELECT FROM json_to_recordset(…)`` statement, never one
statement per row. Merges run in ``ON CONFLICT DO UPDATE`` and implement
``app.search.documents.merge_endpoints`` exactly: the oldest (first_seen,
first_execution_id) pair and the newest (last_seen, last_execution_id,
observation_key) group win, compared as rows, ``observation_key`` in "C"
collation. The narrow ``key bigint`` is ``pg_key(id)``; each table's primary
key leads with what a run's new rows share (the execution, or the owner and
address) and ends with ``key`` (the views) or the full ``id`` (execution
endpoints; ``postgres_schema.PRIMARY_KEYS``), so inserts land side by side
rather than on random leaves. The update only applies when the stored full id
equals the incoming one, so a 64-bit collision comes back as a failed item (409
``id_collision``) instead of merging two endpoints. Rows are
sent sorted by key so concurrent writers lock rows in the same order (no deadlock
between two shards).

Facts live in ``search_facts`` partitioned by month of ``observed_at``;
partitions are created on demand under a transaction advisory lock, so
concurrent writers of a new month never race on the DDL. Store writes use
``SET LOCAL synchronous_commit = off``: projection writes are replayable from
the outbox, and ingest confirms its receipt in a later synchronous commit, which
flushes the WAL of every earlier commit, so nothing confirmed can be lost.
``refresh`` is a no-op and counts are exact: the write statements keep
per-execution counters (facts per month and kind, endpoints, distinct IPs) in
the same transaction as the rows, counting first inserts only, so a final reads
a few counter rows whatever the execution's size.

Statements and the schema check are in ``postgres_schema``; the writes in
``postgres_writes``; projection pages, counts, results and asset search in
``postgres_queries``; the one-statement projection page in ``postgres_pages``.
This module maps the ``SearchStore`` port onto them and owns the plumbing they
share: ``_run``, one short transaction with deadlock retries and the mapping of
PostgreSQL failures onto the port's errors.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, date, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine

from app import db
from app.config import Settings
from app.errors import Unavailable
from app.observability import emit
from app.search.aggregates import ExecutionAggregates
from app.search.documents import EndpointDocument, FactDocument
from app.search.export_text import ExportTextChunk, read_export_bounds, read_export_text
from app.search.port import (
    AssetAggregates,
    AssetFacets,
    AssetPage,
    AssetPurgeBatch,
    AssetQuery,
    AssetStatusUpdate,
    BatchKey,
    BulkResult,
    Capability,
    ExecutionCounts,
    FinalRequestPlan,
    PagePublishResult,
    ResultsPage,
    SearchTimedOut,
    StorageScope,
    StoreRefused,
    StoreUnavailable,
)
from app.search.postgres_aggregates import execution_aggregates
from app.search.postgres_language import asset_match, tests_each_row
from app.search.postgres_pages import ServerPages
from app.search.postgres_purge import purge_execution_data_batch, purge_task_assets_batch
from app.search.postgres_queries import PostgresQueries
from app.search.postgres_removals import PostgresRemovals
from app.search.postgres_retention import drop_month, fact_partitions, months_to_keep_from
from app.search.postgres_schema import (
    ASSET_TABLES,
    EXECUTION_SIGHTINGS_PAGE_SQL,
    EXECUTION_SIGHTINGS_SQL,
    check_tables,
    create_partitions,
    partition_name,
)
from app.search.postgres_text_share import common_texts
from app.search.postgres_warming import warm_value_keys
from app.search.postgres_writes import PostgresWrites
from app.search.query_language import free_texts

_DEADLOCK_RETRIES = 3
_RETRYABLE_SQLSTATES = {"40P01", "40001"}  # deadlock, serialization failure
# statement_timeout (query_canceled) and lock_timeout: answered as 503s, always logged.
_TIMEOUT_SQLSTATES = {"57014", "55P03"}
_QUERY_CANCELED = "57014"


class PostgresStore:
    """``SearchStore`` on the application's PostgreSQL database."""

    name = "postgres"
    # Every optional ability (app/search/port.py) but ``ASSET_MATCHES``: its assets are
    # tested inside the caller's statement instead (``ASSET_CONDITIONS_IN_DATABASE``).
    capabilities = frozenset(Capability) - {Capability.ASSET_MATCHES}

    def __init__(self, settings: Settings, *, engine: Engine | None = None):
        self._settings = settings
        self._engine = engine
        self._known_partitions: set[str] = set()
        self._partition_lock = threading.Lock()
        self._writes = PostgresWrites(
            self._run,
            batch_size=settings.elasticsearch.bulk_batch_size,
            ensure_partitions=self.ensure_partitions,
        )
        self._queries = PostgresQueries(self._run)
        self._removals = PostgresRemovals(self._run)
        self._server_pages: ServerPages | None = None

    # -- plumbing --------------------------------------------------------------

    def _transaction(self) -> Any:
        return db.transaction(engine=self._engine)

    def _run(
        self,
        work: Callable[[Connection], Any],
        *,
        relaxed_commit: bool = False,
        statement: str | None = None,
        time_limit_ms: int | None = None,
    ) -> Any:
        """Run ``work`` in one short transaction; retry deadlocks; map outages.

        ``time_limit_ms`` bounds the transaction's statements for a search a person waits
        for (``AssetQuery.time_limit_ms``); a statement stopped by it is a
        ``SearchTimedOut``, logged as a warning: the search's cost, not an outage.

        A timeout (statement or lock timeout, or no pooled connection in time) becomes
        a 503 like any outage, but is first logged as an error event naming the
        statement (``statement``, else the calling method) and carrying the request's
        span (request id): a 503 nobody can find in the logs cannot be investigated.
        """
        if statement is None:
            statement = sys._getframe(1).f_code.co_name  # the store method that called
        for attempt in range(_DEADLOCK_RETRIES + 1):
            try:
                with self._transaction() as conn:
                    if relaxed_commit:
                        conn.execute(sa.text("SET LOCAL synchronous_commit = off"))
                    if time_limit_ms is not None:
                        # SET takes no bound parameter; the value is a checked integer.
                        limit = max(1, int(time_limit_ms))
                        conn.execute(sa.text(f"SET LOCAL statement_timeout = {limit}"))
                    return work(conn)
            except Unavailable as exc:  # PoolTimeout included
                emit(
                    "SearchStoreTimeout",
                    level=logging.ERROR,
                    statement=statement,
                    error=type(exc).__name__,
                    code=getattr(exc, "code", None),
                )
                raise StoreUnavailable(
                    f"PostgreSQL search store unavailable: {exc.message}",
                    retry_after=exc.retry_after,
                ) from exc
            except sa_exc.DBAPIError as exc:
                sqlstate = getattr(exc.orig, "pgcode", None)
                if sqlstate in _RETRYABLE_SQLSTATES and attempt < _DEADLOCK_RETRIES:
                    emit(
                        "SearchStoreRetry",
                        level=logging.WARNING,
                        sqlstate=sqlstate,
                        detail=str(exc.orig),
                    )
                    continue
                if sqlstate == _QUERY_CANCELED and time_limit_ms is not None:
                    emit(
                        "SearchTimedOut",
                        level=logging.WARNING,
                        statement=statement,
                        limit_ms=time_limit_ms,
                    )
                    raise SearchTimedOut(time_limit_ms) from exc
                if sqlstate in _TIMEOUT_SQLSTATES:
                    emit(
                        "SearchStoreTimeout",
                        level=logging.ERROR,
                        statement=statement,
                        error=type(exc.orig).__name__,
                        sqlstate=sqlstate,
                    )
                if exc.connection_invalidated or isinstance(exc, sa_exc.OperationalError):
                    raise StoreUnavailable(
                        f"PostgreSQL search store unavailable: {type(exc.orig).__name__}"
                    ) from exc
                if isinstance(exc, sa_exc.DataError | sa_exc.IntegrityError):
                    # The rows themselves are refused (class 22/23): the same write fails
                    # again, so this is no outage to retry (only the class name is kept:
                    # the statement's parameters are observation content).
                    raise StoreRefused(
                        f"PostgreSQL search store refused the rows: {type(exc.orig).__name__} "
                        f"(SQLSTATE {sqlstate})"
                    ) from exc
                raise
        raise AssertionError("unreachable")

    # -- schema ---------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Check the tables exist (Alembic creates them) and learn existing partitions."""
        partitions = self._run(check_tables)
        with self._partition_lock:
            self._known_partitions.update(partitions)

    def ensure_partitions(self, months: Sequence[str]) -> None:
        """Create the monthly fact partitions that do not exist yet (safe under concurrency)."""
        wanted = sorted({partition_name(m): m for m in set(months)}.items())
        # A month past the retention may have been dropped by another process since this
        # one learnt it: such (rare) writes check the catalogue instead of the cache.
        kept_from = self._retention_start()
        with self._partition_lock:
            missing = [
                (name, m)
                for name, m in wanted
                if name not in self._known_partitions or (kept_from and m < kept_from)
            ]
        if not missing:
            return
        self._run(lambda conn: create_partitions(conn, missing))
        with self._partition_lock:
            self._known_partitions.update(name for name, _ in missing)

    def _retention_start(self) -> str | None:
        """``YYYY.MM`` of the oldest month the retention keeps (None: facts kept forever)."""
        months = self._settings.search.facts_retention_months
        if not months:
            return None
        start = months_to_keep_from(datetime.now(UTC), months)
        return f"{start.year:04d}.{start.month:02d}"

    def drop_fact_months_before(self, kept_from: date) -> list[str]:
        """Drop every fact month before ``kept_from`` (one short transaction per month)."""
        dropped = []
        for name, month in self._run(fact_partitions):
            if month >= kept_from:
                break
            self._run(lambda conn, name=name, month=month: drop_month(conn, name, month))
            with self._partition_lock:
                self._known_partitions.discard(name)
            dropped.append(name)
        return dropped

    # -- writes ---------------------------------------------------------------

    def write_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        return self._writes.write_facts(facts)

    def write_execution_endpoints(self, docs: Sequence[EndpointDocument]) -> BulkResult:
        return self._writes.write_execution_endpoints(docs)

    def publish_current(
        self,
        docs: Sequence[EndpointDocument],
        *,
        max_operations: int,
        max_bytes: int,
        cancel: threading.Event | None = None,
    ) -> BulkResult:
        return self._writes.publish_current(
            docs, max_operations=max_operations, max_bytes=max_bytes, cancel=cancel
        )

    def publish_execution_page(
        self,
        execution_id: int,
        *,
        after_id: str | None,
        limit: int,
        max_bytes: int,
        cancel: threading.Event | None = None,
    ) -> PagePublishResult | None:
        """Read a keyset page of the execution's endpoints and merge its current assets, in
        one server-side statement (``postgres_pages``); ``None``: use the generic path.

        The port's optional ``ServerSidePages`` capability."""
        return self.server_pages().publish(
            execution_id, after_id=after_id, limit=limit, max_bytes=max_bytes, cancel=cancel
        )

    def server_pages(self) -> ServerPages:
        if self._server_pages is None:
            self._server_pages = ServerPages(
                self._run, concurrency=self._settings.elasticsearch.bulk_max_concurrency
            )
        return self._server_pages

    def apply_asset_status(self, updates: Sequence[AssetStatusUpdate]) -> BulkResult:
        return self._writes.apply_asset_status(updates)

    # -- reads ----------------------------------------------------------------

    def read_execution_endpoints(
        self, execution_id: int, *, after_id: str | None, limit: int
    ) -> list[EndpointDocument]:
        return self._queries.read_execution_endpoints(execution_id, after_id=after_id, limit=limit)

    def read_execution_export_text(
        self,
        execution_id: int,
        *,
        after_id: str | None,
        limit: int | None,
        csv: bool,
        jsonl: bool,
        upto_id: str | None = None,
    ) -> ExportTextChunk:
        """The next keyset chunk as CSV and JSON-lines text written by PostgreSQL (EXP-7)."""
        return self._run(
            lambda conn: read_export_text(
                conn,
                execution_id,
                after_id=after_id,
                limit=limit,
                csv=csv,
                jsonl=jsonl,
                upto_id=upto_id,
            )
        )

    def read_execution_export_bounds(
        self, execution_id: int, *, after_id: str | None, chunk_rows: int, chunks: int
    ) -> list[str]:
        """Keyset bounds of the next ``chunks`` full export chunks (EXP-7)."""
        return self._run(
            lambda conn: read_export_bounds(
                conn, execution_id, after_id=after_id, chunk_rows=chunk_rows, chunks=chunks
            )
        )

    def final_request_plan(self, scope: StorageScope) -> FinalRequestPlan:
        # PostgreSQL needs no refresh; the count is one statement (none for an empty execution).
        return FinalRequestPlan(
            refresh_requests=0, count_requests=0 if scope.empty else 1, max_request_line_bytes=0
        )

    def refresh(self, scope: StorageScope) -> None:
        """Committed rows are visible at once."""

    def refresh_current(self) -> None:
        """Committed rows are visible at once."""

    def count(self, scope: StorageScope, execution_id: int) -> ExecutionCounts:
        return self._queries.count(scope, execution_id)

    # -- removals (facts of batches never confirmed) ---------------------------------
    # One table holds every month, so the scope is not needed to find them.

    def batch_facts(
        self, scope: StorageScope, execution_id: int, batches: Sequence[BatchKey]
    ) -> list[FactDocument]:
        return self._removals.batch_facts(execution_id, batches)

    def endpoint_facts(
        self, scope: StorageScope, execution_id: int, endpoints: Collection[tuple[str, int, str]]
    ) -> list[FactDocument]:
        return self._removals.endpoint_facts(execution_id, endpoints)

    def delete_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        return self._removals.delete_facts(facts)

    def delete_execution_endpoints(self, execution_id: int, ids: Sequence[str]) -> BulkResult:
        return self._removals.delete_execution_endpoints(execution_id, ids)

    def execution_results(
        self,
        task_id: int,
        *,
        cursor: str | None,
        limit: int,
        execution_ids: Sequence[int] | None = None,
    ) -> ResultsPage:
        return self._queries.execution_results(
            task_id, cursor=cursor, limit=limit, execution_ids=execution_ids
        )

    def search_assets(self, query: AssetQuery) -> AssetPage:
        return self._queries.search_assets(query)

    def asset_facets(self, query: AssetQuery, *, size: int, sample: int) -> AssetFacets:
        return self._queries.asset_facets(query, size=size, sample=sample)

    def execution_aggregates(self, execution_id: int, *, top: int) -> ExecutionAggregates:
        return self._run(lambda conn: execution_aggregates(conn, execution_id, top=top))

    def asset_aggregates(self, query: AssetQuery, *, top: int) -> AssetAggregates:
        return self._queries.asset_aggregates(query, top=top)

    def asset_match_sql(
        self,
        node: object,
        *,
        endpoint: str,
        status: str,
        rows: int | None = None,
        conn: Connection | None = None,
    ) -> tuple[str, dict[str, Any]]:
        common: frozenset[str] = frozenset()
        if conn is not None and not tests_each_row(rows):
            # Beyond the per-change spelling, common words are told apart as the Assets
            # page's search tells them (the view's statistics), read in the caller's
            # transaction.
            common = common_texts(conn, ASSET_TABLES["user"], free_texts(node))  # type: ignore[arg-type]
        return asset_match(node, endpoint=endpoint, status=status, rows=rows, common_texts=common)  # type: ignore[arg-type]

    def count_current_assets(self, *, owner_id: int | None, cap: int) -> int:
        return self._queries.count_current_assets(owner_id=owner_id, cap=cap)

    def purge_task_assets(
        self,
        task_ids: Sequence[int],
        *,
        excluded_task_ids: Sequence[int],
        after_key: int | None,
        limit: int,
    ) -> AssetPurgeBatch:
        return self._run(
            lambda conn: purge_task_assets_batch(
                conn,
                task_ids,
                excluded_task_ids=excluded_task_ids,
                after_key=after_key,
                limit=limit,
            )
        )

    def purge_execution_data(self, execution_ids: Sequence[int], *, limit: int) -> dict[str, int]:
        return self._run(lambda conn: purge_execution_data_batch(conn, execution_ids, limit=limit))

    def execution_sightings_sql(self) -> str:
        return EXECUTION_SIGHTINGS_SQL

    def warm_value_keys(self) -> dict[str, int] | None:
        return self._run(warm_value_keys)

    def execution_sightings_page_sql(self) -> str:
        return EXECUTION_SIGHTINGS_PAGE_SQL

    def close(self) -> None:
        """The engine belongs to the process (app.db); only our page threads to stop."""
        if self._server_pages is not None:
            self._server_pages.close()
