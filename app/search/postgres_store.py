"""The PostgreSQL search store (STO-1 default): facts, execution endpoints, current assets.

This adapter IS the store, so it opens its own short transactions with
``app.db.transaction()`` (one per shard). Writes are set-based: every shard is
one ``INSERT … SELECT FROM json_to_recordset(…)`` statement, never one
statement per row. Merges run in ``ON CONFLICT DO UPDATE`` and implement
``app.search.documents.merge_endpoints`` exactly: the oldest (first_seen,
first_execution_id) pair and the newest (last_seen, last_execution_id,
observation_key) group win, compared as rows, ``observation_key`` in "C"
collation. The narrow ``key bigint`` primary key is ``pg_key(id)``; the update
only applies when the stored full id equals the incoming one, so a 64-bit
collision comes back as a failed item (409 ``id_collision``) instead of
merging two endpoints. Rows are sent sorted by key so concurrent writers lock
rows in the same order (no deadlock between two shards).

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
"""

from __future__ import annotations

import ipaddress
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, date, datetime
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine

from app import db
from app.config import Settings
from app.cursors import bad_cursor, decode_cursor, encode_cursor
from app.errors import Unavailable, ValidationError
from app.observability import emit, stage
from app.search.documents import EndpointDocument, FactDocument, merge_all
from app.search.encoding import (
    INVALID_DOCUMENT,
    NUL_PROBLEM,
    dumps,
    endpoint_problem,
    endpoint_source,
    fact_problem,
    fact_source,
    has_nul,
)
from app.search.export_text import ExportTextChunk, read_export_text
from app.search.ids import current_asset_id, normalise_ip, pg_key
from app.search.port import (
    ASSET_STATUS_FILTERS,
    AssetPage,
    AssetQuery,
    AssetStatusUpdate,
    BulkItemResult,
    BulkResult,
    ExecutionCounts,
    FinalRequestPlan,
    OperationTooLarge,
    PagePublishResult,
    ResultsPage,
    StorageScope,
    StoreRefused,
    StoreUnavailable,
)

FACTS_TABLE = "search_facts"
EXECUTION_TABLE = "search_execution_endpoints"
ASSET_TABLES = {"global": "search_assets_global", "user": "search_assets_user"}
# Exact per-execution counters maintained by the write statements (migration 0060).
FACT_COUNTS_TABLE = "search_execution_fact_counts"
EXECUTION_IPS_TABLE = "search_execution_ips"
ENDPOINT_COUNTS_TABLE = "search_execution_endpoint_counts"
_MONTH_OF_OBSERVED_AT = "(date_trunc('month', observed_at AT TIME ZONE 'UTC'))::date"
# Fields joined by a unit separator (\x1f), which _like_pattern strips from queries, so a
# search never matches across two fields.
TEXT_EXPRESSION = (
    "(coalesce(banner, '') || E'\\x1f' || coalesce(product, '') || E'\\x1f' "
    "|| coalesce(hostname, ''))"
)
_DEADLOCK_RETRIES = 3
_RETRYABLE_SQLSTATES = {"40P01", "40001"}  # deadlock, serialization failure
# statement_timeout (query_canceled) and lock_timeout: answered as 503s, always logged.
_TIMEOUT_SQLSTATES = {"57014", "55P03"}

ENDPOINT_COLUMNS = (
    "key",
    "id",
    "ip",
    "port",
    "transport",
    "first_seen",
    "first_execution_id",
    "last_seen",
    "last_execution_id",
    "observation_key",
    "state",
    "service",
    "product",
    "version",
    "banner",
    "hostname",
    "tags",
    "details",
)
_COLUMN_TYPES = {
    "key": "bigint",
    "id": "uuid",
    "ip": "inet",
    "port": "integer",
    "transport": "text",
    "first_seen": "timestamptz",
    "first_execution_id": "bigint",
    "last_seen": "timestamptz",
    "last_execution_id": "bigint",
    "observation_key": 'text COLLATE "C"',
    "state": "text",
    "service": "text",
    "product": "text",
    "version": "text",
    "banner": "text",
    "hostname": "text",
    "tags": "text[]",
    "details": "jsonb",
    "owner_id": "bigint",
    "execution_id": "bigint",
    "task_id": "bigint",
}
_TABLE_COLUMNS = {
    EXECUTION_TABLE: (*ENDPOINT_COLUMNS, "owner_id", "execution_id", "task_id"),
    ASSET_TABLES["global"]: ENDPOINT_COLUMNS,
    ASSET_TABLES["user"]: (*ENDPOINT_COLUMNS, "owner_id"),
}
_NEWEST_GROUP = (
    "last_execution_id",
    "observation_key",
    "state",
    "service",
    "product",
    "version",
    "banner",
    "hostname",
    "tags",
    "details",
)


def merge_on_conflict() -> str:
    """``ON CONFLICT … DO UPDATE`` of merge_endpoints for a table aliased ``t``.

    Every merge statement (shards here, server-side projection pages in
    ``postgres_pages``) uses this one text, so the rule cannot drift between them.
    """
    older = (
        "(excluded.first_seen, excluded.first_execution_id) < (t.first_seen, t.first_execution_id)"
    )
    newer = (
        "(excluded.last_seen, excluded.last_execution_id, excluded.observation_key) "
        "> (t.last_seen, t.last_execution_id, t.observation_key)"
    )
    newest_sets = ",\n        ".join(
        f"{c} = CASE WHEN {newer} THEN excluded.{c} ELSE t.{c} END" for c in _NEWEST_GROUP
    )
    return f"""
        ON CONFLICT (key) DO UPDATE SET
        first_seen = LEAST(t.first_seen, excluded.first_seen),
        first_execution_id = CASE WHEN {older}
            THEN excluded.first_execution_id ELSE t.first_execution_id END,
        last_seen = GREATEST(t.last_seen, excluded.last_seen),
        {newest_sets}
        WHERE t.id = excluded.id
    """


def _merge_statement(table: str) -> str:
    """One set-based merge of a shard into ``table`` (the SQL form of merge_endpoints)."""
    columns = _TABLE_COLUMNS[table]
    record = ", ".join(f"{c} {_COLUMN_TYPES[c]}" for c in columns)
    names = ", ".join(columns)
    merge = f"""
        INSERT INTO {table} AS t ({names})
        SELECT {names}
        FROM json_to_recordset(CAST(:rows AS json)) AS r({record})
        {merge_on_conflict()}
    """  # noqa: S608 - table and column names are module constants; values are bound
    if table != EXECUTION_TABLE:
        return merge + "RETURNING key, (xmax = 0) AS created"
    # Execution endpoints also keep the execution's exact counters (ING-2): only rows
    # this statement created count, and an address counts once per execution because
    # the primary key of search_execution_ips decides which writer saw it first. Rows
    # are locked in (execution, ip) order so concurrent shards cannot deadlock.
    return f"""
        WITH merged AS (
            {merge}
            RETURNING key, (xmax = 0) AS created, execution_id, ip
        ), new_ips AS (
            INSERT INTO {EXECUTION_IPS_TABLE} (execution_id, ip)
            SELECT DISTINCT execution_id, ip FROM merged WHERE created ORDER BY 1, 2
            ON CONFLICT DO NOTHING
            RETURNING execution_id
        ), counted AS (
            INSERT INTO {ENDPOINT_COUNTS_TABLE} AS c (execution_id, endpoints, ips)
            SELECT e.execution_id, e.n, coalesce(i.n, 0)
              FROM (SELECT execution_id, count(*) AS n FROM merged WHERE created
                     GROUP BY execution_id) e
              LEFT JOIN (SELECT execution_id, count(*) AS n FROM new_ips
                          GROUP BY execution_id) i USING (execution_id)
             ORDER BY 1
            ON CONFLICT (execution_id) DO UPDATE
               SET endpoints = c.endpoints + excluded.endpoints, ips = c.ips + excluded.ips
        )
        SELECT key, created FROM merged
    """  # noqa: S608 - table and column names are module constants; values are bound


_FACT_COLUMNS = (
    "id",
    "observed_at",
    "kind",
    "execution_id",
    "task_id",
    "owner_id",
    "scanner_id",
    "upload_id",
    "stream",
    "batch_index",
    "position",
    "body",
)
_FACT_TYPES = {
    "id": "uuid",
    "observed_at": "timestamptz",
    "kind": "text",
    "execution_id": "bigint",
    "task_id": "bigint",
    "owner_id": "bigint",
    "scanner_id": "bigint",
    "upload_id": "text",
    "stream": "text",
    "batch_index": "integer",
    "position": "integer",
    "body": "jsonb",
}


def _fact_statements() -> tuple[str, str, str, str]:
    """A fact shard's statements, run in this order in one transaction.

    1. ``insert``: the new facts (``ON CONFLICT DO NOTHING``: a racing writer of the
       same id waits for the first one and then inserts nothing). When every fact of
       the shard was new (the normal batch) the same statement adds them to the
       counters and the shard is done.
    Otherwise (a retry, or a rewrite):
    2. ``lock``: the stored facts the shard would change, locked in id order and
       returned with their counted identity (execution, month, kind). A replay of
       the same content finds nothing, so a retry rewrites nothing.
    3. ``overwrite``: those facts, and only those (a fact another writer changed since
       the lock must not move without its count), take the new content, like an
       Elasticsearch index operation would overwrite a document. Never inserts.
    4. ``count``: +1 per fact the insert created, and the moves of overwritten facts
       whose kind (or execution) changed.

    Row locks are taken as new facts → stored facts → counters, each in sorted
    order, so concurrent shards cannot deadlock. (System columns such as xmax cannot
    be returned from a partitioned table, hence "insert, else overwrite" is split.)
    """
    names = ", ".join(_FACT_COLUMNS)
    record = ", ".join(f"{c} {_FACT_TYPES[c]}" for c in _FACT_COLUMNS)
    add_counts = f"""
        INSERT INTO {FACT_COUNTS_TABLE} AS c (execution_id, month, kind, facts)
        SELECT execution_id, month, kind, sum(delta)
          FROM {{deltas}} GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (execution_id, month, kind) DO UPDATE SET facts = c.facts + excluded.facts
    """  # noqa: S608 - table and column names are module constants; values are bound
    # The normal batch: every fact new, so count them in the same statement.
    all_new = (
        f"(SELECT execution_id, {_MONTH_OF_OBSERVED_AT} AS month, kind, 1 AS delta "  # noqa: S608 - table and column names are module constants; values are bound
        "FROM inserted WHERE (SELECT count(*) FROM inserted) = (SELECT count(*) FROM r)) d"
    )
    insert = f"""
        WITH r AS MATERIALIZED (
            SELECT * FROM json_to_recordset(CAST(:rows AS json)) AS r({record})
        ), inserted AS (
            INSERT INTO {FACTS_TABLE} ({names})
            SELECT {names} FROM r
            ON CONFLICT (id, observed_at) DO NOTHING
            RETURNING id, execution_id, kind, observed_at
        ), counted AS ({add_counts.format(deltas=all_new)})
        SELECT id, execution_id, kind, observed_at FROM inserted
    """  # noqa: S608 - table and column names are module constants; values are bound
    stored = ", ".join(f"f.{c}" for c in _FACT_COLUMNS[2:])
    incoming = ", ".join(f"r.{c}" for c in _FACT_COLUMNS[2:])
    differs = (
        "f.id = r.id AND f.observed_at = r.observed_at "
        f"AND ({stored}) IS DISTINCT FROM ({incoming})"
    )
    lock = f"""
        SELECT f.id, f.observed_at,
               {_MONTH_OF_OBSERVED_AT.replace("observed_at", "f.observed_at")} AS month,
               f.execution_id, f.kind, r.execution_id AS new_execution_id, r.kind AS new_kind
          FROM {FACTS_TABLE} AS f, json_to_recordset(CAST(:rows AS json)) AS r({record})
         WHERE {differs}
         ORDER BY f.id, f.observed_at
           FOR UPDATE OF f
    """  # noqa: S608 - table and column names are module constants; values are bound
    updates = ", ".join(f"{c} = r.{c}" for c in _FACT_COLUMNS[2:])
    overwrite = f"""
        UPDATE {FACTS_TABLE} AS f SET {updates}
          FROM json_to_recordset(CAST(:rows AS json)) AS r({record})
         WHERE {differs}
           AND (f.id, f.observed_at) IN (
               SELECT * FROM unnest(CAST(:locked_ids AS uuid[]), CAST(:locked_at AS timestamptz[])))
    """  # noqa: S608 - table and column names are module constants; values are bound
    count = add_counts.format(
        deltas="json_to_recordset(CAST(:deltas AS json)) "
        "AS d(execution_id bigint, month date, kind text, delta bigint)"
    )
    return insert, lock, overwrite, count


_SELECT_ENDPOINT = """
    replace(t.id::text, '-', '') AS id, host(t.ip) AS ip, t.port, t.transport,
    t.first_seen, t.first_execution_id, t.last_seen, t.last_execution_id, t.observation_key,
    t.state, t.service, t.product, t.version, t.banner, t.hostname, t.tags, t.details
"""


_SELECT_STATUS = "t.status, t.gone_since, t.gone_execution_id"

# An execution's endpoints as the change analysis compares them (ANA-2): the banner
# only as a hash, so a change of banner is detected without carrying the text along.
EXECUTION_SIGHTINGS_SQL = f"""
    SELECT ip, port, transport, state, service, product, version,
           md5(banner) AS banner_hash
      FROM {EXECUTION_TABLE}
     WHERE execution_id = :execution_id
"""  # noqa: S608 - fragments are module constants; values are bound

_STATUS_RECORD = (
    "key bigint, id uuid, status text, gone_since timestamptz, gone_execution_id bigint"
)


def partition_name(month: str) -> str:
    """``2026.11`` → ``search_facts_y2026m11``."""
    year, mon = month.split(".")
    return f"{FACTS_TABLE}_y{int(year):04d}m{int(mon):02d}"


def _month_bounds(month: str) -> tuple[datetime, datetime]:
    year, mon = (int(part) for part in month.split("."))
    start = datetime(year, mon, 1, tzinfo=UTC)
    end = datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=UTC)
    return start, end


def _month_start(moment: datetime) -> date:
    """The counters' month key of a fact (UTC, like the monthly partitions)."""
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def _count_delta(execution_id: int, month: date, kind: str, delta: int) -> dict[str, Any]:
    return {"execution_id": execution_id, "month": month.isoformat(), "kind": kind, "delta": delta}


def _shards(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class PostgresStore:
    """``SearchStore`` on the application's PostgreSQL database."""

    name = "postgres"

    def __init__(self, settings: Settings, *, engine: Engine | None = None):
        self._settings = settings
        self._engine = engine
        self._batch_size = settings.elasticsearch.bulk_batch_size
        self._known_partitions: set[str] = set()
        self._partition_lock = threading.Lock()
        self._merge_sql = {table: sa.text(_merge_statement(table)) for table in _TABLE_COLUMNS}
        (
            self._fact_insert_sql,
            self._fact_lock_sql,
            self._fact_overwrite_sql,
            self._fact_count_sql,
        ) = (sa.text(sql) for sql in _fact_statements())
        self._server_pages: Any = None

    # -- plumbing --------------------------------------------------------------

    def _transaction(self) -> Any:
        return db.transaction(engine=self._engine)

    def _run(
        self,
        work: Callable[[Connection], Any],
        *,
        relaxed_commit: bool = False,
        statement: str | None = None,
    ) -> Any:
        """Run ``work`` in one short transaction; retry deadlocks; map outages.

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

        def check(conn: Connection) -> list[str]:
            tables = (
                FACTS_TABLE,
                EXECUTION_TABLE,
                *ASSET_TABLES.values(),
                FACT_COUNTS_TABLE,
                EXECUTION_IPS_TABLE,
                ENDPOINT_COUNTS_TABLE,
            )
            missing = [
                t
                for t in tables
                if conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": t}).scalar() is None
            ]
            if missing:
                raise StoreUnavailable(
                    "search store tables are missing (run `netmap db upgrade`): "
                    + ", ".join(missing)
                )
            return list(
                conn.execute(
                    sa.text(
                        "SELECT c.relname FROM pg_inherits i "
                        "JOIN pg_class c ON c.oid = i.inhrelid "
                        "WHERE i.inhparent = CAST(:parent AS regclass)"
                    ),
                    {"parent": FACTS_TABLE},
                ).scalars()
            )

        partitions = self._run(check)
        with self._partition_lock:
            self._known_partitions.update(partitions)

    def ensure_partitions(self, months: Sequence[str]) -> None:
        """Create the monthly fact partitions that do not exist yet (safe under concurrency)."""
        wanted = sorted({partition_name(m): m for m in months}.items())
        with self._partition_lock:
            missing = [(name, m) for name, m in wanted if name not in self._known_partitions]
        if not missing:
            return

        def create(conn: Connection) -> None:
            # One lock for all partition DDL: a second writer waits, then sees the table.
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('netmap:search_facts'))"))
            for name, month in missing:
                exists = conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": name}).scalar()
                if exists is not None:
                    continue
                start, end = _month_bounds(month)
                # Names and bounds come from our own month arithmetic, never from input text.
                conn.execute(
                    sa.text(
                        f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {FACTS_TABLE} "
                        f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
                    )
                )
                emit("SearchFactPartitionCreated", partition=name)

        self._run(create)
        with self._partition_lock:
            self._known_partitions.update(name for name, _ in missing)

    # -- writes ---------------------------------------------------------------

    def write_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        if not facts:
            return BulkResult()
        problems: dict[int, str | None] = {}
        valid: dict[str, tuple[FactDocument, str]] = {}
        for doc in facts:
            problem = fact_problem(doc)
            if problem is None:
                row = fact_source(doc)
                row["id"] = doc.id
                text = dumps(row)
                if has_nul(text):
                    problem = NUL_PROBLEM
                else:
                    valid[doc.id] = (doc, text)  # the last version of an id wins, like index ops
            problems[id(doc)] = problem
        self.ensure_partitions([doc.month for doc, _text in valid.values()])
        created: set[str] = set()
        requests = 0
        request_bytes = 0
        ordered = sorted(valid.values(), key=lambda pair: (pair[0].id, pair[0].observed_at))
        for shard in _shards(ordered, self._batch_size):
            payload = "[" + ",".join(text for _doc, text in shard) + "]"
            requests += 1
            request_bytes += len(payload.encode("utf-8"))
            write = partial(self._write_fact_shard, payload, len(shard))
            created.update(self._run(write, relaxed_commit=True))
        items = []
        for doc in facts:
            problem = problems[id(doc)]
            index = partition_name(doc.month) if problem is None else FACTS_TABLE
            if problem is not None:
                items.append(BulkItemResult(doc.id, index, 400, INVALID_DOCUMENT, problem))
            else:
                items.append(BulkItemResult(doc.id, index, 201 if doc.id in created else 200))
        return BulkResult(
            items=tuple(items), requests=requests, request_bytes=request_bytes, attempts=requests
        )

    def _write_fact_shard(self, payload: str, size: int, conn: Connection) -> set[str]:
        """Write one shard (``payload``: its JSON array of ``size`` distinct facts) with
        exact counters; returns the ids it created. ``_fact_statements`` says why so."""
        params = {"rows": payload}
        inserted = conn.execute(self._fact_insert_sql, params).all()
        created = {str(r.id).replace("-", "") for r in inserted}
        if len(inserted) == size:
            return created  # all new: already counted by the insert
        deltas = [
            _count_delta(r.execution_id, _month_start(r.observed_at), r.kind, 1) for r in inserted
        ]
        changed = conn.execute(self._fact_lock_sql, params).all()
        if changed:
            locked = {
                "locked_ids": [row.id for row in changed],
                "locked_at": [row.observed_at for row in changed],
            }
            conn.execute(self._fact_overwrite_sql, {**params, **locked})
        for row in changed:
            if (row.execution_id, row.kind) != (row.new_execution_id, row.new_kind):
                deltas.append(_count_delta(row.execution_id, row.month, row.kind, -1))
                deltas.append(_count_delta(row.new_execution_id, row.month, row.new_kind, 1))
        if deltas:
            conn.execute(self._fact_count_sql, {"deltas": json.dumps(deltas)})
        return created

    def write_execution_endpoints(self, docs: Sequence[EndpointDocument]) -> BulkResult:
        wrong = [d.id for d in docs if d.scope != "execution"]
        if wrong:
            raise ValueError(f"write_execution_endpoints got non-execution documents: {wrong[:3]}")
        return self._merge(docs, max_operations=self._batch_size, max_bytes=None, cancel=None)

    def publish_current(
        self,
        docs: Sequence[EndpointDocument],
        *,
        max_operations: int,
        max_bytes: int,
        cancel: threading.Event | None = None,
    ) -> BulkResult:
        wrong = [d.id for d in docs if d.scope not in ASSET_TABLES]
        if wrong:
            raise ValueError(f"publish_current got non-current-asset documents: {wrong[:3]}")
        return self._merge(docs, max_operations=max_operations, max_bytes=max_bytes, cancel=cancel)

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
        one server-side statement (``postgres_pages``); ``None``: use the generic path."""
        return self.server_pages().publish(
            execution_id, after_id=after_id, limit=limit, max_bytes=max_bytes, cancel=cancel
        )

    def server_pages(self) -> Any:
        if self._server_pages is None:
            from app.search.postgres_pages import ServerPages

            self._server_pages = ServerPages(
                self._run, concurrency=self._settings.elasticsearch.bulk_max_concurrency
            )
        return self._server_pages

    def _table_of(self, doc: EndpointDocument) -> str:
        return EXECUTION_TABLE if doc.scope == "execution" else ASSET_TABLES[doc.scope]

    def _merge(
        self,
        docs: Sequence[EndpointDocument],
        *,
        max_operations: int,
        max_bytes: int | None,
        cancel: threading.Event | None,
    ) -> BulkResult:
        if not docs:
            return BulkResult()
        outcome: dict[str, BulkItemResult] = {}
        rejected: dict[int, BulkItemResult] = {}  # by object: other versions of the id still go
        encoded: dict[int, str] = {}
        keys: dict[str, int] = {}
        valid: list[EndpointDocument] = []
        for doc in docs:
            problem = endpoint_problem(doc)
            if problem is None:
                encoded[id(doc)] = text = _endpoint_row(
                    doc, keys.setdefault(doc.id, pg_key(doc.id))
                )
                if has_nul(text):
                    problem = NUL_PROBLEM
            if problem is None:
                valid.append(doc)
            else:
                rejected[id(doc)] = BulkItemResult(
                    doc.id, self._table_of(doc), 400, INVALID_DOCUMENT, problem
                )
        # One row per id per statement (ON CONFLICT cannot touch a row twice): merge first.
        by_table: dict[str, list[tuple[int, EndpointDocument, str]]] = {}
        for doc in merge_all(valid):
            # merge_all hands back the very object when an id came once (the usual case).
            key = keys[doc.id]
            text = encoded.get(id(doc)) or _endpoint_row(doc, key)
            if max_bytes is not None:
                size = len(text.encode("utf-8"))
                if size > max_bytes:
                    raise OperationTooLarge(doc.id, size, max_bytes)
            by_table.setdefault(self._table_of(doc), []).append((key, doc, text))

        requests = 0
        request_bytes = 0
        for table, rows in by_table.items():
            rows.sort(key=lambda r: r[0])  # lock order: concurrent shards never deadlock
            unique: list[tuple[int, EndpointDocument, str]] = []
            for row in rows:
                if unique and unique[-1][0] == row[0]:
                    # Two different ids, one 64-bit key, same batch: keep the first, fail the other.
                    outcome[row[1].id] = id_collision(row[1].id, table)
                else:
                    unique.append(row)
            for shard in _byte_shards(unique, max_operations, max_bytes):
                if cancel is not None and cancel.is_set():
                    raise StoreUnavailable("publish cancelled")
                payload = "[" + ",".join(text for _key, _doc, text in shard) + "]"
                requests += 1
                request_bytes += len(payload.encode("utf-8"))
                statement = self._merge_sql[table]
                returned = self._run(
                    lambda conn, p=payload, s=statement: conn.execute(s, {"rows": p}).all(),
                    relaxed_commit=True,
                )
                written = {r.key: r.created for r in returned}
                for key, doc, _text in shard:
                    if key in written:
                        outcome[doc.id] = BulkItemResult(
                            doc.id, table, 201 if written[key] else 200
                        )
                    else:
                        outcome[doc.id] = id_collision(doc.id, table)
                        emit("SearchStoreIdCollision", level=logging.ERROR, table=table, key=key)
        items = tuple(rejected.get(id(doc)) or outcome[doc.id] for doc in docs)
        return BulkResult(
            items=items, requests=requests, request_bytes=request_bytes, attempts=requests
        )

    # -- reads ----------------------------------------------------------------

    def read_execution_endpoints(
        self, execution_id: int, *, after_id: str | None, limit: int
    ) -> list[EndpointDocument]:
        sql = sa.text(
            f"SELECT {_SELECT_ENDPOINT}, t.owner_id, t.execution_id, t.task_id "  # noqa: S608 - table and column names are module constants; values are bound
            f"FROM {EXECUTION_TABLE} t WHERE t.execution_id = :execution_id "
            "AND (CAST(:after AS uuid) IS NULL OR t.id > CAST(:after AS uuid)) "
            "ORDER BY t.id LIMIT :limit"
        )
        params = {"execution_id": execution_id, "after": after_id, "limit": limit}
        rows = self._run(lambda conn: conn.execute(sql, params).all())
        return [_endpoint_from_row(row, "execution") for row in rows]

    def read_execution_export_text(
        self, execution_id: int, *, after_id: str | None, limit: int, csv: bool, jsonl: bool
    ) -> ExportTextChunk:
        """The next keyset chunk as CSV and JSON-lines text written by PostgreSQL (EXP-7)."""
        return self._run(
            lambda conn: read_export_text(
                conn, execution_id, after_id=after_id, limit=limit, csv=csv, jsonl=jsonl
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
        """Exact counts read from the counters the writes keep (O(months), not O(rows)).

        Facts are summed over the scope's months, like the Elasticsearch count request
        over the scope's monthly indices; a legacy scope counts every month.
        """
        if scope.empty:
            return ExecutionCounts(observations=0, endpoints=0, ips=0)
        params: dict[str, Any] = {"execution_id": execution_id, "months": None}
        if not scope.legacy_full_history:
            params["months"] = [_month_bounds(m)[0].date() for m in sorted(set(scope.months))]
        sql = sa.text(
            f"""
            SELECT f.observations, f.dns_records,
                   coalesce(e.endpoints, 0) AS endpoints, coalesce(e.ips, 0) AS ips
              FROM (SELECT coalesce(sum(facts) FILTER (WHERE kind = 'observation'), 0)
                             AS observations,
                           coalesce(sum(facts) FILTER (WHERE kind = 'dns_record'), 0)
                             AS dns_records
                      FROM {FACT_COUNTS_TABLE}
                     WHERE execution_id = :execution_id
                       AND (CAST(:months AS date[]) IS NULL
                            OR month = ANY(CAST(:months AS date[])))) f
              LEFT JOIN {ENDPOINT_COUNTS_TABLE} e ON e.execution_id = :execution_id
            """  # noqa: S608 - table and column names are module constants; values are bound
        )
        with stage("count_execution_observation_chunk"):
            row = self._run(lambda conn: conn.execute(sql, params).one())
        return ExecutionCounts(
            observations=int(row.observations),
            endpoints=int(row.endpoints),
            ips=int(row.ips),
            dns_records=int(row.dns_records),
        )

    def execution_results(self, task_id: int, *, cursor: str | None, limit: int) -> ResultsPage:
        position = decode_cursor("results", cursor)
        after = _cursor_ip(position, "after") if position else None

        def page(conn: Connection) -> tuple[list[Any], int | None, int]:
            total_endpoints = None
            if position is None:
                totals = conn.execute(
                    sa.text(
                        f"SELECT count(*) AS endpoints, count(DISTINCT ip) AS ips "  # noqa: S608 - table and column names are module constants; values are bound
                        f"FROM {EXECUTION_TABLE} WHERE task_id = :task_id"
                    ),
                    {"task_id": task_id},
                ).one()
                total_endpoints, total_ips = totals.endpoints, totals.ips
            else:
                total_ips = _cursor_int(position, "ips")
            rows = conn.execute(
                sa.text(
                    f"""
                    WITH page_ips AS (
                        SELECT DISTINCT ip_order FROM {EXECUTION_TABLE}
                        WHERE task_id = :task_id
                          AND (CAST(:after AS inet) IS NULL OR ip_order > CAST(:after AS inet))
                        ORDER BY ip_order LIMIT :limit
                    )
                    SELECT {_SELECT_ENDPOINT}, t.owner_id, t.execution_id, t.task_id,
                           host(t.ip_order) AS ip_order
                    FROM {EXECUTION_TABLE} t
                    WHERE t.task_id = :task_id AND t.ip_order IN (SELECT ip_order FROM page_ips)
                    ORDER BY t.ip_order, t.port, t.transport, t.execution_id
                    """  # noqa: S608 - table and column names are module constants; values are bound
                ),
                {"task_id": task_id, "after": after, "limit": limit + 1},
            ).all()
            return rows, total_endpoints, total_ips

        rows, total_endpoints, total_ips = self._run(page)
        ips_in_page: list[str] = []
        for row in rows:
            if not ips_in_page or ips_in_page[-1] != row.ip_order:
                ips_in_page.append(row.ip_order)
        next_cursor = None
        if len(ips_in_page) > limit:
            # We fetched one IP more than the page holds, only to learn that another page exists.
            last = ips_in_page[limit - 1]
            rows = [r for r in rows if r.ip_order != ips_in_page[limit]]
            next_cursor = encode_cursor("results", {"after": last, "ips": total_ips})
        return ResultsPage(
            items=[_endpoint_from_row(r, "execution") for r in rows],
            next_cursor=next_cursor,
            total_endpoints=total_endpoints,
            total_ips=total_ips,
        )

    def search_assets(self, query: AssetQuery) -> AssetPage:
        sql, params = asset_search_statement(query)
        rows = self._run(lambda conn: conn.execute(sa.text(sql), params).all())
        next_cursor = None
        if len(rows) > query.limit:
            rows = rows[: query.limit]
            last = rows[-1]
            next_cursor = encode_cursor(
                "assets", {"ip": last.ip_order, "port": last.port, "transport": last.transport}
            )
        return AssetPage(
            items=[_endpoint_from_row(r, query.scope) for r in rows], next_cursor=next_cursor
        )

    def apply_asset_status(self, updates: Sequence[AssetStatusUpdate]) -> BulkResult:
        """One set-based UPDATE per scope and shard; only the status fields change."""
        by_table: dict[str, list[tuple[int, str, AssetStatusUpdate]]] = {}
        for update in updates:
            document_id = current_asset_id(
                update.scope, update.owner_id, update.ip, update.port, update.transport
            )
            by_table.setdefault(ASSET_TABLES[update.scope], []).append(
                (pg_key(document_id), document_id, update)
            )
        outcome: dict[tuple[str, str], BulkItemResult] = {}
        requests = 0
        for table, rows in by_table.items():
            rows.sort(key=lambda r: r[0])  # lock order, as for merges
            for shard in _shards(rows, self._batch_size):
                payload = dumps(
                    [
                        {
                            "key": key,
                            "id": document_id,
                            "status": u.status,
                            "gone_since": u.gone_since.isoformat() if u.gone_since else None,
                            "gone_execution_id": u.gone_execution_id,
                        }
                        for key, document_id, u in shard
                    ]
                )
                statement = sa.text(
                    f"""
                    UPDATE {table} AS t
                       SET status = r.status, gone_since = r.gone_since,
                           gone_execution_id = r.gone_execution_id
                      FROM json_to_recordset(CAST(:rows AS json)) AS r({_STATUS_RECORD})
                     WHERE t.key = r.key AND t.id = r.id
                    RETURNING t.key
                    """  # noqa: S608 - fragments are module constants; values are bound
                )
                requests += 1
                found = set(
                    self._run(
                        lambda conn, p=payload, st=statement: (
                            conn.execute(st, {"rows": p}).scalars().all()
                        )
                    )
                )
                for key, document_id, _u in shard:
                    status = 200 if key in found else 404
                    outcome[(table, document_id)] = BulkItemResult(
                        document_id,
                        table,
                        status,
                        None if status == 200 else "document_missing",
                        None if status == 200 else "no such current asset",
                    )
        return BulkResult(items=tuple(outcome.values()), requests=requests, attempts=requests)

    def execution_sightings_sql(self) -> str:
        return EXECUTION_SIGHTINGS_SQL

    def count_current_assets(self, *, owner_id: int | None, cap: int) -> int:
        """Open current assets of one owner (or all, ``owner_id`` None), up to ``cap + 1``.

        A bounded count for page views (the console's dashboard): it reads at most
        ``cap + 1`` index entries whatever the size of the set, so the caller shows
        "more than cap" instead of paying for an exact count over millions of rows.
        """
        if owner_id is None:
            sql = (
                f"SELECT count(*) FROM (SELECT 1 FROM {ASSET_TABLES['global']} "  # noqa: S608 - table name is a module constant
                "WHERE status = 'open' LIMIT :cap) s"
            )
            params: dict[str, Any] = {"cap": cap + 1}
        else:
            sql = (
                f"SELECT count(*) FROM (SELECT 1 FROM {ASSET_TABLES['user']} "  # noqa: S608 - table name is a module constant
                "WHERE owner_id = :owner_id AND status = 'open' LIMIT :cap) s"
            )
            params = {"cap": cap + 1, "owner_id": owner_id}
        return int(self._run(lambda conn: conn.execute(sa.text(sql), params).scalar_one()))

    def close(self) -> None:
        """The engine belongs to the process (app.db); only our page threads to stop."""
        if self._server_pages is not None:
            self._server_pages.close()


# -- module helpers -----------------------------------------------------------


def _endpoint_row(doc: EndpointDocument, key: int) -> str:
    row = endpoint_source(doc)
    row["key"] = key
    row["id"] = doc.id
    return dumps(row)


def id_collision(document_id: str, table: str) -> BulkItemResult:
    """The failed item of a document whose 64-bit key another id already holds."""
    return BulkItemResult(
        document_id,
        table,
        409,
        "id_collision",
        "another document with the same 64-bit key exists; not merged",
    )


def _byte_shards(
    rows: Sequence[tuple[int, EndpointDocument, str]], max_operations: int, max_bytes: int | None
) -> Iterator[list[tuple[int, EndpointDocument, str]]]:
    shard: list[tuple[int, EndpointDocument, str]] = []
    size = 2  # the enclosing brackets
    for row in rows:
        row_bytes = 0 if max_bytes is None else len(row[2].encode("utf-8")) + 1
        if shard and (
            len(shard) >= max_operations or (max_bytes is not None and size + row_bytes > max_bytes)
        ):
            yield shard
            shard, size = [], 2
        shard.append(row)
        size += row_bytes
    if shard:
        yield shard


def asset_search_statement(query: AssetQuery) -> tuple[str, dict[str, Any]]:
    """The SQL (and parameters) of one asset-search page; one row more than the page."""
    table = ASSET_TABLES.get(query.scope)
    if table is None:
        raise ValidationError(f"unknown asset scope {query.scope!r}", code="invalid_parameter")
    conditions: list[str] = []
    params: dict[str, Any] = {"limit": query.limit + 1}
    if query.scope == "user":
        if query.owner_id is None:
            raise ValueError("a user-scope asset search needs owner_id")
        conditions.append("t.owner_id = :owner_id")
        params["owner_id"] = query.owner_id
    if query.ip:
        conditions.append("t.ip = CAST(:ip AS inet)")
        params["ip"] = _query_ip(query.ip)
    if query.cidr:
        conditions.append("t.ip <<= CAST(:cidr AS inet)")
        params["cidr"] = _query_cidr(query.cidr)
    if query.port is not None:
        conditions.append("t.port = :port")
        params["port"] = query.port
    if query.transport:
        conditions.append("t.transport = :transport")
        params["transport"] = query.transport.lower()
    if query.service:
        conditions.append("lower(t.service) = lower(:service)")
        params["service"] = query.service
    if query.product:
        conditions.append("lower(t.product) = lower(:product)")
        params["product"] = query.product
    if query.text:
        conditions.append(f"{TEXT_EXPRESSION} ILIKE :text")
        params["text"] = _like_pattern(query.text)
    for name, column, op in (
        ("first_seen_from", "first_seen", ">="),
        ("first_seen_to", "first_seen", "<"),
        ("last_seen_from", "last_seen", ">="),
        ("last_seen_to", "last_seen", "<"),
    ):
        value = getattr(query, name)
        if value is not None:
            conditions.append(f"t.{column} {op} :{name}")
            params[name] = value
    position = decode_cursor("assets", query.cursor)
    if position is not None:
        conditions.append(
            "(t.ip_order, t.port, t.transport) > (CAST(:c_ip AS inet), :c_port, :c_transport)"
        )
        params["c_ip"] = _cursor_ip(position, "ip")
        params["c_port"] = _cursor_int(position, "port")
        params["c_transport"] = _cursor_str(position, "transport")
    if query.status not in ASSET_STATUS_FILTERS:
        raise _invalid("status", "status must be one of " + ", ".join(ASSET_STATUS_FILTERS))
    if query.status != "all":
        conditions.append("t.status = :status")
        params["status"] = query.status
    where = " AND ".join(conditions) or "true"
    owner = ", t.owner_id" if query.scope == "user" else ""
    sql = (
        f"SELECT {_SELECT_ENDPOINT}{owner}, {_SELECT_STATUS}, host(t.ip_order) AS ip_order "  # noqa: S608 - fragments are module constants; values are bound
        f"FROM {table} t "
        f"WHERE {where} ORDER BY t.ip_order, t.port, t.transport LIMIT :limit"
    )
    return sql, params


def _endpoint_from_row(row: Any, scope: str) -> EndpointDocument:
    mapping = row._mapping
    return EndpointDocument(
        id=row.id,
        scope=scope,
        ip=normalise_ip(row.ip),
        port=row.port,
        transport=row.transport,
        first_seen=row.first_seen,
        first_execution_id=row.first_execution_id,
        last_seen=row.last_seen,
        last_execution_id=row.last_execution_id,
        owner_id=mapping.get("owner_id"),
        execution_id=mapping.get("execution_id"),
        task_id=mapping.get("task_id"),
        state=row.state,
        service=row.service,
        product=row.product,
        version=row.version,
        banner=row.banner,
        hostname=row.hostname,
        tags=tuple(row.tags or ()),
        details=row.details or {},
        observation_key=row.observation_key,
        status=mapping.get("status") or "open",
        gone_since=mapping.get("gone_since"),
        gone_execution_id=mapping.get("gone_execution_id"),
    )


def _invalid(parameter: str, message: str) -> ValidationError:
    return ValidationError(message, code="invalid_parameter", details={"parameter": parameter})


def _query_ip(value: str) -> str:
    try:
        return normalise_ip(value)
    except ValueError:
        raise _invalid("ip", f"{value!r} is not an IP address") from None


def _query_cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except ValueError:
        raise _invalid("cidr", f"{value!r} is not a CIDR block") from None


def _like_pattern(text: str) -> str:
    cleaned = "".join(ch for ch in text if ch >= " ")
    escaped = cleaned.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _cursor_ip(position: dict[str, Any], key: str) -> str:
    """The cursor's address in ``ip_order`` form (IPv4 as IPv4-mapped IPv6)."""
    try:
        address = ipaddress.ip_address(position.get(key))  # type: ignore[arg-type]
    except ValueError:
        raise bad_cursor() from None
    if address.version == 4:
        return f"::ffff:{address}"
    return str(address)


def _cursor_int(position: dict[str, Any], key: str) -> int:
    value = position.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_cursor()
    return value


def _cursor_str(position: dict[str, Any], key: str) -> str:
    value = position.get(key)
    if not isinstance(value, str):
        raise bad_cursor()
    return value
