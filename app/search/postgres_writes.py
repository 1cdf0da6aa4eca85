"""Set-based writes of the PostgreSQL search store: facts, endpoint merges, asset status.

Every shard is one statement (texts in ``postgres_schema``), run in its own short
transaction by the adapter's ``run`` (``PostgresStore._run``: deadlock retries,
outages mapped to ``StoreUnavailable``/``StoreRefused``). Rows are sent sorted by
their key so concurrent writers lock rows in the same order (no deadlock between
two shards). Items come back one by one in a ``BulkResult``, in input order, like
the Elasticsearch adapter's bulk answers: 201 created, 200 merged or rewritten,
400 ``invalid_document``, 409 ``id_collision`` (two ids sharing a 64-bit key are
never merged), 404 ``document_missing`` for a status update of an unknown asset.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import date
from functools import partial
from operator import itemgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from app import db
from app.dbapi import copy_text
from app.observability import emit
from app.search.documents import EndpointDocument, FactDocument, merge_all, month_of
from app.search.encoding import (
    INVALID_DOCUMENT,
    NUL_PROBLEM,
    dumps,
    endpoint_problem,
    endpoint_source,
    fact_problem,
    fact_source,
    has_nul,
    utc_text,
)
from app.search.ids import current_asset_id, normalise_ip, pg_key
from app.search.port import (
    AssetStatusUpdate,
    BulkItemResult,
    BulkResult,
    OperationTooLarge,
    StoreUnavailable,
)
from app.search.postgres_schema import (
    ASSET_TABLES,
    EXECUTION_TABLE,
    FACT_COLUMNS,
    FACTS_TABLE,
    PRIMARY_KEYS,
    SHARD_FACT_TEXTS,
    TABLE_COLUMNS,
    execution_copy_counts_statement,
    fact_statements,
    merge_statement,
    month_start,
    partition_name,
    status_statement,
)

# ``PostgresStore._run``: ``run(work, *, relaxed_commit=False)`` runs ``work(conn)`` in one
# short transaction and returns its result.
Run = Callable[..., Any]


class PostgresWrites:
    """The write half of ``PostgresStore`` (``run`` is its ``_run``).

    ``ensure_partitions`` is the store's (it keeps the cache of known partitions).
    """

    def __init__(
        self, run: Run, *, batch_size: int, ensure_partitions: Callable[[Sequence[str]], None]
    ):
        self._run = run
        self._batch_size = batch_size
        self._ensure_partitions = ensure_partitions
        self._merge_sql = {table: sa.text(merge_statement(table)) for table in TABLE_COLUMNS}
        self._fact_texts_sql = sa.text(SHARD_FACT_TEXTS)
        self._status_sql = {
            table: sa.text(status_statement(table)) for table in ASSET_TABLES.values()
        }
        (
            self._fact_insert_sql,
            self._fact_lock_sql,
            self._fact_overwrite_sql,
            self._fact_count_sql,
        ) = (sa.text(sql) for sql in fact_statements())
        self._fact_copy_sql = f"COPY {FACTS_TABLE} ({', '.join(FACT_COLUMNS)}) FROM STDIN"
        self._execution_copy_sql = (
            f"COPY {EXECUTION_TABLE} ({', '.join(TABLE_COLUMNS[EXECUTION_TABLE])}) FROM STDIN"
        )
        self._execution_copy_counts_sql = sa.text(execution_copy_counts_statement())

    def write_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        if not facts:
            return BulkResult()
        refused: dict[int, str] = {}  # by object: another version of the id may still go
        valid: dict[str, tuple[FactDocument, str]] = {}
        for doc in facts:
            problem = fact_problem(doc)
            if problem is None:
                line = fact_copy_line(doc)
                if line is not None:
                    valid[doc.id] = (doc, line)  # the last version of an id wins, like index ops
                    continue
                problem = NUL_PROBLEM
            refused[id(doc)] = problem
        # A batch's facts share a few timestamps: each is named once.
        moments = {doc.observed_at for doc, _line in valid.values()}
        self._ensure_partitions(sorted({month_of(moment) for moment in moments}))
        created: set[str] = set()
        requests = 0
        request_bytes = 0
        # By id, which is unique here, so also by (id, observed_at): the key's lock order.
        ordered = [pair for _id, pair in sorted(valid.items())]
        for shard in shards(ordered, self._batch_size):
            data = "".join([line for _doc, line in shard]).encode("utf-8")
            requests += 1
            request_bytes += len(data)
            write = partial(self._write_fact_shard, [doc for doc, _line in shard], data)
            created.update(self._run(write, relaxed_commit=True))
        partitions: dict[Any, str] = {}
        items = []
        for doc in facts:
            problem = refused.get(id(doc)) if refused else None
            if problem is not None:
                items.append(BulkItemResult(doc.id, FACTS_TABLE, 400, INVALID_DOCUMENT, problem))
                continue
            partition = partitions.get(doc.observed_at)
            if partition is None:
                partition = partitions[doc.observed_at] = partition_name(month_of(doc.observed_at))
            items.append(BulkItemResult(doc.id, partition, 201 if doc.id in created else 200))
        return BulkResult(
            items=tuple(items), requests=requests, request_bytes=request_bytes, attempts=requests
        )

    def _write_fact_shard(
        self, docs: list[FactDocument], data: bytes, conn: Connection
    ) -> set[str]:
        """Write one shard of distinct facts (``data``: their COPY lines) with exact
        counters; returns the ids it created.

        The usual shard is all new (a batch's first delivery): COPY loads it, which costs
        PostgreSQL about half of what the same rows cost through ``json_to_recordset``
        (no JSON document to take apart, each body parsed once), and the counters get
        the shard's counts. COPY cannot skip rows that exist, so a shard holding one
        stored fact (a retry, a rewrite, a racing writer) fails with a unique violation;
        the savepoint undoes it and the shard takes the statements that compare each
        fact with the stored one (``_merge_fact_shard``), in the same transaction."""
        if not _copied_all_new(conn, self._fact_copy_sql, data):
            payload = "[" + ",".join(fact_row(doc) for doc in docs) + "]"
            return self._merge_fact_shard(payload, [doc.id for doc in docs], conn)
        counts: Counter[tuple[int, date, str]] = Counter()
        # Counted by timestamp first: a shard's facts share a few, and each month once.
        for (execution_id, moment, kind), n in Counter(
            (doc.execution_id, doc.observed_at, doc.kind) for doc in docs
        ).items():
            counts[execution_id, month_start(moment), kind] += n
        deltas = [count_delta(e, month, kind, n) for (e, month, kind), n in sorted(counts.items())]
        conn.execute(self._fact_count_sql, {"deltas": json.dumps(deltas)})
        return {doc.id for doc in docs}

    def _merge_fact_shard(self, payload: str, ids: list[str], conn: Connection) -> set[str]:
        """Write one shard (``payload``: its JSON array of the distinct facts ``ids``) with
        exact counters; returns the ids it created. ``fact_statements`` says why so."""
        params = {"rows": payload}
        inserted = conn.execute(self._fact_insert_sql, params).all()
        if len(inserted) == len(ids):
            return set(ids)  # all new: already counted by the insert
        created = {str(r.id).replace("-", "") for r in inserted}
        deltas = [
            count_delta(r.execution_id, month_start(r.observed_at), r.kind, 1) for r in inserted
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
                deltas.append(count_delta(row.execution_id, row.month, row.kind, -1))
                deltas.append(count_delta(row.new_execution_id, row.month, row.new_kind, 1))
        if deltas:
            conn.execute(self._fact_count_sql, {"deltas": json.dumps(deltas)})
        return created

    def write_execution_endpoints(self, docs: Sequence[EndpointDocument]) -> BulkResult:
        wrong = [d.id for d in docs if d.scope != "execution"]
        if wrong:
            raise ValueError(f"write_execution_endpoints got non-execution documents: {wrong[:3]}")
        return self.merge(docs, max_operations=self._batch_size, max_bytes=None, cancel=None)

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
        return self.merge(docs, max_operations=max_operations, max_bytes=max_bytes, cancel=cancel)

    def _table_of(self, doc: EndpointDocument) -> str:
        return EXECUTION_TABLE if doc.scope == "execution" else ASSET_TABLES[doc.scope]

    def merge(
        self,
        docs: Sequence[EndpointDocument],
        *,
        max_operations: int,
        max_bytes: int | None,
        cancel: threading.Event | None,
    ) -> BulkResult:
        """Merge ``docs`` into their tables, shard by shard.

        Execution endpoints (a scan sees each once, so their shards are usually all new)
        are encoded as COPY lines and loaded by ``_copy_execution_shard``, which falls
        back to the merge statement for a shard holding a stored row; current assets are
        encoded as JSON rows for the merge statement."""
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
                key = keys.get(doc.id)
                if key is None:
                    key = keys[doc.id] = pg_key(doc.id)
                encoded_text = _encode(doc, key)
                if encoded_text is None or has_nul(encoded_text):
                    problem = NUL_PROBLEM
                else:
                    encoded[id(doc)] = encoded_text
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
            text = encoded.get(id(doc)) or _encode(doc, key)
            assert text is not None  # a merged version of checked documents
            if max_bytes is not None:
                size = len(text.encode("utf-8"))
                if size > max_bytes:
                    raise OperationTooLarge(doc.id, size, max_bytes)
            by_table.setdefault(self._table_of(doc), []).append((key, doc, text))

        requests = 0
        request_bytes = 0
        for table, rows in by_table.items():
            rows.sort(key=itemgetter(0))  # lock order: concurrent shards never deadlock
            unique: list[tuple[int, EndpointDocument, str]] = []
            held: set[tuple[Any, ...]] = set()
            for row in rows:
                primary_key = _primary_key(table, *row[:2])
                if primary_key in held:
                    # Two different ids, one primary key (the same address and 64-bit key),
                    # same batch: keep the first, fail the other.
                    outcome[row[1].id] = id_collision(row[1].id, table)
                else:
                    held.add(primary_key)
                    unique.append(row)
            sharded = (
                shards(unique, max_operations)
                if max_bytes is None
                else byte_shards(unique, max_operations, max_bytes)
            )
            for shard in sharded:
                if cancel is not None and cancel.is_set():
                    raise StoreUnavailable("publish cancelled")
                requests += 1
                statement = self._merge_sql[table]
                if table == EXECUTION_TABLE:
                    data = "".join(text for _key, _doc, text in shard).encode("utf-8")
                    request_bytes += len(data)
                    write = partial(self._copy_execution_shard, shard, data, statement)
                else:
                    payload = "[" + ",".join(text for _key, _doc, text in shard) + "]"
                    request_bytes += len(payload.encode("utf-8"))
                    # Its new text fact values first, committed on their own
                    # (``register_fact_texts``).
                    self._run(
                        partial(_register_fact_texts, payload, self._fact_texts_sql),
                        relaxed_commit=True,
                        statement="register_fact_texts",
                    )
                    write = partial(_merge_shard, payload, statement)
                written = dict(self._run(write, relaxed_commit=True))
                for key, doc, _text in shard:
                    if doc.id in written:
                        outcome[doc.id] = BulkItemResult(
                            doc.id, table, 201 if written[doc.id] else 200
                        )
                    else:
                        outcome[doc.id] = id_collision(doc.id, table)
                        emit("SearchStoreIdCollision", level=logging.ERROR, table=table, key=key)
        items = tuple(rejected.get(id(doc)) or outcome[doc.id] for doc in docs)
        return BulkResult(
            items=items, requests=requests, request_bytes=request_bytes, attempts=requests
        )

    def _copy_execution_shard(
        self,
        shard: Sequence[tuple[int, EndpointDocument, str]],
        data: bytes,
        statement: sa.TextClause,
        conn: Connection,
    ) -> list[tuple[str, bool]]:
        """Load a shard of execution endpoints (``data``: their COPY lines) with COPY and
        count them; returns (id, created) per row written.

        A scan sees each endpoint once, so a shard is usually all new, and COPY costs
        PostgreSQL much less than the merge statement's ``json_to_recordset``. A shard
        holding one stored row (a retry, a second sighting, a racing
        writer) fails with a unique violation, is undone to the savepoint and goes
        through the merge statement, which decides row by row, in the same transaction."""
        if not _copied_all_new(conn, self._execution_copy_sql, data):
            payload = "[" + ",".join(endpoint_row(doc, key) for key, doc, _text in shard) + "]"
            return _merge_shard(payload, statement, conn)
        endpoints: Counter[tuple[int, int]] = Counter()
        ips: dict[tuple[int, int], set[str]] = {}
        for _key, doc, _text in shard:
            group = (doc.execution_id, doc.task_id)
            endpoints[group] += 1
            ips.setdefault(group, set()).add(doc.ip)
        rows = [
            {"execution_id": e, "task_id": t, "endpoints": n, "ips": ",".join(sorted(ips[e, t]))}
            for (e, t), n in sorted(endpoints.items())
        ]
        conn.execute(self._execution_copy_counts_sql, {"groups": dumps(rows)})
        return [(doc.id, True) for _key, doc, _text in shard]

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
            statement = self._status_sql[table]
            rows.sort(key=lambda r: r[0])  # lock order, as for merges
            for shard in shards(rows, self._batch_size):
                payload = dumps(
                    [
                        {
                            "owner_id": u.owner_id,
                            "ip": normalise_ip(u.ip),
                            "key": key,
                            "id": document_id,
                            "status": u.status,
                            "gone_since": u.gone_since.isoformat() if u.gone_since else None,
                            "gone_execution_id": u.gone_execution_id,
                        }
                        for key, document_id, u in shard
                    ]
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


def count_delta(execution_id: int, month: date, kind: str, delta: int) -> dict[str, Any]:
    return {"execution_id": execution_id, "month": month.isoformat(), "kind": kind, "delta": delta}


def shards(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def fact_row(doc: FactDocument) -> str:
    """A fact as a ``json_to_recordset`` row of the fact statements."""
    row = fact_source(doc)
    row["id"] = doc.id
    return dumps(row)


_NULL = "\\N"


def fact_copy_line(doc: FactDocument) -> str | None:
    """A fact as a line of ``COPY`` text in ``FACT_COLUMNS`` order, or None when it holds
    a NUL, which PostgreSQL text and jsonb refuse. The values are ``fact_source``'s."""
    body = dumps(doc.body if type(doc.body) is dict else dict(doc.body))
    if has_nul(body) or "\x00" in doc.upload_id or "\x00" in doc.stream:
        return None
    scanner = _NULL if doc.scanner_id is None else doc.scanner_id
    return (
        f"{doc.id}\t{utc_text(doc.observed_at)}\t{copy_text(doc.kind)}\t{doc.execution_id}\t"
        f"{doc.task_id}\t{doc.owner_id}\t{scanner}\t{copy_text(doc.upload_id)}\t"
        f"{copy_text(doc.stream)}\t{doc.batch_index}\t{doc.position}\t{copy_text(body)}\n"
    )


def _copied_all_new(conn: Connection, statement: str, data: bytes) -> bool:
    """COPY ``data`` inside a savepoint: True when it loaded every row; False, with nothing
    written, when a row's key was stored already (a unique violation; the savepoint is
    rolled back and the transaction goes on). Any other failure is raised."""
    try:
        with conn.begin_nested():
            db.copy_in(conn, statement, data)
    except sa_exc.IntegrityError as exc:
        if getattr(exc.orig, "pgcode", None) != db.UNIQUE_VIOLATION:
            raise
        return False
    return True


def _register_fact_texts(payload: str, statement: sa.TextClause, conn: Connection) -> None:
    conn.execute(statement, {"rows": payload})


def _merge_shard(payload: str, statement: sa.TextClause, conn: Connection) -> list[Any]:
    """Run a merge statement over ``payload`` (a JSON array of rows): (id, created) rows."""
    return [tuple(row) for row in conn.execute(statement, {"rows": payload}).all()]


# What COPY text must escape (backslash, tab, line breaks): found with one search.
_COPY_SPECIAL = re.compile(r"[\\\t\n\r]")


def _text_array(values: Sequence[str]) -> str:
    """A PostgreSQL array literal of texts (each element quoted, ``\\`` and ``"`` escaped)."""
    if not values:
        return "{}"
    scanned = "".join(values)  # the values alone: the separators hold quotes themselves
    if "\\" in scanned or '"' in scanned:
        values = [v.replace("\\", "\\\\").replace('"', '\\"') for v in values]
    return '{"' + '","'.join(values) + '"}'


def execution_copy_line(doc: EndpointDocument, key: int) -> str | None:
    """An execution endpoint as a line of ``COPY`` text in the execution table's column
    order, or None when a value holds a NUL. The values are ``endpoint_source``'s.

    The texts are escaped for COPY only when one of them needs it (most hold no
    backslash, tab or line break): one scan of them all instead of a call per field."""
    details = dumps(doc.details if type(doc.details) is dict else dict(doc.details))
    if has_nul(details):
        return None
    texts = [
        doc.ip,
        doc.transport,
        doc.observation_key,
        doc.state,
        doc.service,
        doc.product,
        doc.version,
        doc.banner,
        doc.hostname,
        _text_array(doc.tags),
        details,
    ]
    scanned = "".join(filter(None, texts))
    if "\x00" in scanned:
        return None
    if _COPY_SPECIAL.search(scanned) is None:
        texts = [_NULL if t is None else t for t in texts]
    else:
        texts = [_NULL if t is None else copy_text(t) for t in texts]
    ip, transport, key_text, state, service, product, version, banner, hostname, tags, details = (
        texts
    )
    return (
        f"{key}\t{doc.id}\t{ip}\t{doc.port}\t{transport}\t{utc_text(doc.first_seen)}\t"
        f"{doc.first_execution_id}\t{utc_text(doc.last_seen)}\t{doc.last_execution_id}\t"
        f"{key_text}\t{state}\t{service}\t{product}\t{version}\t{banner}\t{hostname}\t"
        f"{tags}\t{details}\t{_NULL if doc.owner_id is None else doc.owner_id}\t"
        f"{doc.execution_id}\t{doc.task_id}\t{_observed_copy(doc)}\n"
    )


def _observed_copy(doc: EndpointDocument) -> str:
    """``observed`` as COPY text: null when empty (a fresh document's), else JSON."""
    if not doc.observed:
        return _NULL
    return dumps({name: utc_text(seen) for name, seen in doc.observed.items()})


def _encode(doc: EndpointDocument, key: int) -> str | None:
    """A document as its table's write takes it (see ``PostgresWrites.merge``)."""
    return execution_copy_line(doc, key) if doc.scope == "execution" else endpoint_row(doc, key)


def endpoint_row(doc: EndpointDocument, key: int) -> str:
    row = endpoint_source(doc)
    row["key"] = key
    row["id"] = doc.id
    return dumps(row)


def _primary_key(table: str, key: int, doc: EndpointDocument) -> tuple[Any, ...]:
    """The values of ``table``'s primary key (``PRIMARY_KEYS``) that ``doc`` is written at."""
    return tuple(key if column == "key" else getattr(doc, column) for column in PRIMARY_KEYS[table])


def id_collision(document_id: str, table: str) -> BulkItemResult:
    """The failed item of a document whose 64-bit key another id already holds."""
    return BulkItemResult(
        document_id,
        table,
        409,
        "id_collision",
        "another document with the same 64-bit key exists; not merged",
    )


def byte_shards(
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
