"""Checkpoints in PostgreSQL (the runner; the CLI when it writes to the database).

Tables (migration ``20261130_0030``): ``traffic_domains`` (a version per domain),
``traffic_files`` (one row per logical log file), ``traffic_file_partials``
(that file's sums per key), ``traffic_dirty_keys`` (keys whose published row is
out of date, stamped with a generation from a sequence) and
``traffic_verified_days``.

A commit is one transaction. It first moves the domain's version from the one
the run loaded to the next (a concurrent commit holds that row's lock, and the
loser matches nothing: ``CheckpointConflict``, nothing written), so two runs
can never both add the same bytes, not even for a file both saw first; each
touched file row is compare-and-set on its own version as well. A file read for
the first time (or re-read whole) has its partial sums ``COPY``ed in; sums read
on top of stored ones are added with set-based ``unnest`` statements. With the
database sink (``DatabasePublish``), the rows of the changed keys of the run's
granularity are computed from all files' partial sums and upserted by
``INSERT … SELECT … ON CONFLICT`` in the same transaction, so they need no
dirty mark; the other touched keys are marked dirty with a fresh generation,
and ``publish_dirty`` later publishes them the same way, one statement per
batch. Clearing a dirty mark after publishing names that generation, so a key
dirtied again meanwhile stays dirty.
Each call is its own short transaction; no connection is held while the rollup
reads files.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from app.dbapi import CursorFactory, copy_text, pyformat
from app.traffic.checkpoints import (
    CheckpointConflict,
    DatabasePublish,
    DomainCommit,
    DomainState,
    FileCheckpoint,
    PendingRow,
)
from app.traffic.partials import PartialKey, Sums
from app.traffic.rollup_sql import ON_CONFLICT_UPDATE, ROLLUP_COLUMNS

CHUNK = 5000
_SUM_COLUMNS = (
    "response_bytes, request_bytes, request_known, total_requests, "
    "status_1xx, status_2xx, status_3xx, status_4xx, status_5xx, status_other"
)


def _epoch(column: str) -> str:
    return f"CAST(extract(epoch FROM {column}) AS bigint)"


PUBLISH_CHUNK = 20000


def _row_params(publish: DatabasePublish, starts: set[int]) -> dict[str, list]:
    """Per-bucket row fields (end, business date, frozen), computed once per bucket."""
    ordered = sorted(starts)
    fields = [publish.bucket_fields(publish.granularity, start) for start in ordered]
    return {
        "mb": ordered,
        "me": [f[0] for f in fields],
        "md": [f[1] for f in fields],
        "mf": [f[2] for f in fields],
        "source": publish.source_server,
        "generated": publish.generated_at,
    }


_SUMMED = """
    COALESCE(sum(p.response_bytes), 0) AS s0, COALESCE(sum(p.request_bytes), 0) AS s1,
    COALESCE(sum(p.request_known), 0) AS s2, COALESCE(sum(p.total_requests), 0) AS s3,
    COALESCE(sum(p.status_1xx), 0) AS s4, COALESCE(sum(p.status_2xx), 0) AS s5,
    COALESCE(sum(p.status_3xx), 0) AS s6, COALESCE(sum(p.status_4xx), 0) AS s7,
    COALESCE(sum(p.status_5xx), 0) AS s8, COALESCE(sum(p.status_other), 0) AS s9
"""
_META = """
    meta AS (
        SELECT * FROM unnest(CAST(:mb AS bigint[]), CAST(:me AS bigint[]),
                             CAST(:md AS date[]), CAST(:mf AS boolean[])) AS m(b, e, d, f)
    )
"""
# The row of a key is the sum of every file's partial sums for it (zeros when pruned).
_UPSERT_SUMMED = f"""
    INSERT INTO traffic_rollups AS t ({ROLLUP_COLUMNS})
    SELECT :domain, :granularity, x.bucket_start, x.method, x.path, to_timestamp(m.e), m.d,
           x.s0, CASE WHEN x.s2 > 0 THEN x.s1 END, x.s2, x.s3, x.s4, x.s5, x.s6, x.s7, x.s8,
           x.s9, :source, to_timestamp(:generated), m.f
      FROM summed x JOIN meta m ON m.b = {_epoch("x.bucket_start")}
    {ON_CONFLICT_UPDATE}
"""  # noqa: S608 - table names and column lists are module constants; values are bound
_PUBLISH_KEYS = pyformat(
    f"""
    WITH {_META},
    batch AS (
        SELECT to_timestamp(u.b) AS bucket_start, u.m AS method, u.p AS path
          FROM unnest(CAST(:b AS bigint[]), CAST(:m AS text[]), CAST(:p AS text[])) AS u(b, m, p)
    ),
    summed AS (
        SELECT b.bucket_start, b.method, b.path, s.*
          FROM batch b CROSS JOIN LATERAL (
              SELECT {_SUMMED} FROM traffic_file_partials p
               WHERE p.domain = :domain AND p.granularity = :granularity
                 AND p.bucket_start = b.bucket_start AND p.method = b.method AND p.path = b.path
          ) s
    )
    {_UPSERT_SUMMED}
    """  # noqa: S608 - table names and column lists are module constants; values are bound
)
_PUBLISH_DIRTY = f"""
    WITH {_META},
    batch AS (
        SELECT d.bucket_start, d.method, d.path, d.generation
          FROM traffic_dirty_keys d
         WHERE d.domain = :domain AND d.granularity = :granularity
           AND d.bucket_start < to_timestamp(:until)
           AND d.bucket_start IN (SELECT to_timestamp(b) FROM meta) {{keyset}}
         ORDER BY d.bucket_start, d.method, d.path
         LIMIT :limit
    ),
    summed AS (
        SELECT b.bucket_start, b.method, b.path, s.*
          FROM batch b CROSS JOIN LATERAL (
              SELECT {_SUMMED} FROM traffic_file_partials p
               WHERE p.domain = :domain AND p.granularity = :granularity
                 AND p.bucket_start = b.bucket_start AND p.method = b.method AND p.path = b.path
          ) s
    ),
    upserted AS ({_UPSERT_SUMMED} RETURNING 1),
    cleared AS (
        DELETE FROM traffic_dirty_keys d USING batch b
         WHERE d.domain = :domain AND d.granularity = :granularity
           AND d.bucket_start = b.bucket_start AND d.method = b.method AND d.path = b.path
           AND d.generation = b.generation
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM batch) AS n, (SELECT count(*) FROM upserted) AS written,
           {_epoch("l.bucket_start")} AS bucket, l.method, l.path
      FROM (SELECT * FROM batch ORDER BY bucket_start DESC, method DESC, path DESC LIMIT 1) l
"""  # noqa: S608 - table names and column lists are module constants; values are bound


class _Result:
    """What a statement returned, read the few ways this store needs (rows are tuples)."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: Any):
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def all(self) -> list[tuple]:
        return self._cursor.fetchall()

    def one_or_none(self) -> tuple | None:
        return self._cursor.fetchone()

    def scalar(self) -> Any:
        row = self._cursor.fetchone()
        return None if row is None else row[0]

    def scalars(self) -> list[Any]:
        return [row[0] for row in self._cursor.fetchall()]


def _execute(cur: Any, sql: str, params: dict[str, Any] | None = None) -> _Result:
    cur.execute(sql, params)
    return _Result(cur)


def _engine_cursor() -> Any:
    # Imported when used: the five-minute command passes its own cursor factory and must
    # not pay for importing SQLAlchemy (PRF-3).
    from app.db import engine_cursor

    return engine_cursor()


class PostgresCheckpointStore:
    """Checkpoints in PostgreSQL, through any ``app.dbapi`` cursor factory: by default the
    installed engine's transactions (the runner), or a command's own psycopg2 connection
    (``netmap traffic rollup``, which then never imports SQLAlchemy)."""

    # Checkpoints live next to traffic_rollups: rows can be computed and written in SQL.
    publishes_in_database = True

    def __init__(self, cursors: CursorFactory | None = None):
        self._cursors = cursors or _engine_cursor

    def load(self, domain: str) -> DomainState:
        with self._cursors() as cur:
            files = _execute(
                cur,
                pyformat(
                    f"""
                    SELECT id, domain, device, inode, fingerprint_length, fingerprint,
                           offset_bytes, lines, compressed, path, version,
                           vanished_at IS NOT NULL AS vanished,
                           {_epoch("newest_bucket")} AS newest_bucket
                      FROM traffic_files WHERE domain = :domain ORDER BY first_seen_at, id
                    """  # noqa: S608 - constant column lists and fixed fragments; values are bound
                ),
                {"domain": domain},
            ).all()
            version = _execute(
                cur,
                pyformat("SELECT version FROM traffic_domains WHERE domain = :domain"),
                {"domain": domain},
            ).scalar()
            days = _execute(
                cur,
                pyformat(
                    "SELECT business_date, extract(epoch FROM verified_at) AS at "
                    "FROM traffic_verified_days WHERE domain = :domain"
                ),
                {"domain": domain},
            ).all()
        return DomainState(
            domain=domain,
            files=[
                FileCheckpoint(
                    id=file_id,
                    domain=file_domain,
                    device=int(device),
                    inode=int(inode),
                    fingerprint_length=fingerprint_length,
                    fingerprint=fingerprint,
                    offset=offset,
                    lines=lines,
                    compressed=compressed,
                    path=path,
                    version=file_version,
                    vanished=vanished,
                    newest_bucket=newest_bucket,
                )
                for (
                    file_id,
                    file_domain,
                    device,
                    inode,
                    fingerprint_length,
                    fingerprint,
                    offset,
                    lines,
                    compressed,
                    path,
                    file_version,
                    vanished,
                    newest_bucket,
                ) in files
            ],
            verified_days={day: float(at) for day, at in days},
            version=version or 0,
        )

    def files_holding_day(self, domain: str, day_start: int) -> set[str]:
        with self._cursors() as cur:
            rows = _execute(
                cur,
                pyformat(
                    """
                    SELECT DISTINCT file_id FROM traffic_file_partials
                     WHERE domain = :domain AND granularity = 'day'
                       AND bucket_start = to_timestamp(:day)
                    """
                ),
                {"domain": domain, "day": day_start},
            ).scalars()
            return set(rows)

    # -- commit ----------------------------------------------------------------------
    def commit(self, commit: DomainCommit, now: float) -> None:
        with self._cursors() as cur:
            self._claim_domain_version(cur, commit)
            generation = _execute(
                cur, pyformat("SELECT nextval('traffic_dirty_generation')")
            ).scalar()
            dirty: set[PartialKey] = set()
            for change in commit.changes:
                self._save_checkpoint(cur, change.checkpoint, now)
                # A file read for the first time, or re-read whole, has no partial sums
                # stored (any old ones are deleted below): they are copied in, not merged.
                fresh = change.replace or change.checkpoint.version == 0
                if change.replace:
                    removed = _execute(
                        cur,
                        pyformat(
                            f"""
                            DELETE FROM traffic_file_partials WHERE file_id = :id
                            RETURNING granularity, {_epoch("bucket_start")} AS bucket, method,
                                      path, {_SUM_COLUMNS}
                            """  # noqa: S608 - constant column lists and fixed fragments; values are bound
                        ),
                        {"id": change.checkpoint.id},
                    ).all()
                    old = {(r[0], r[1], r[2], r[3]): [int(v) for v in r[4:]] for r in removed}
                    new = change.deltas
                    # A re-read that found the same sums republishes nothing.
                    dirty.update(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
                else:
                    dirty.update(change.deltas)
                if change.deltas and fresh:
                    self._copy_partials(cur, commit.domain, change.checkpoint.id, change.deltas)
                elif change.deltas:
                    self._add_partials(cur, commit.domain, change.checkpoint.id, change.deltas)
            for checkpoint in commit.vanished:
                updated = _execute(
                    cur,
                    pyformat(
                        """
                        UPDATE traffic_files SET vanished_at = to_timestamp(:now),
                               version = version + 1
                         WHERE id = :id AND version = :version
                        """
                    ),
                    {"id": checkpoint.id, "version": checkpoint.version, "now": now},
                ).rowcount
                if updated != 1:
                    raise CheckpointConflict(f"checkpoint {checkpoint.id} changed meanwhile")
            if commit.publish is not None and not commit.republish:
                # Same transaction as the sums: these rows need no dirty mark at all. (A
                # forced rebuild marks its whole window dirty and publishes it after.)
                publish = commit.publish
                now_keys = [
                    k for k in dirty if k[0] == publish.granularity and k[1] < publish.until
                ]
                dirty.difference_update(now_keys)
                publishing = time.perf_counter()
                commit.published = self._publish_keys(cur, commit.domain, now_keys, publish)
                commit.published_seconds = time.perf_counter() - publishing
            self._mark_dirty(cur, commit.domain, dirty, generation)
            for granularity, start, end in commit.republish:
                _execute(
                    cur,
                    pyformat(
                        """
                        INSERT INTO traffic_dirty_keys
                               (domain, granularity, bucket_start, method, path, generation)
                        SELECT DISTINCT domain, granularity, bucket_start, method, path, :generation
                          FROM traffic_file_partials
                         WHERE domain = :domain AND granularity = :granularity
                           AND bucket_start >= to_timestamp(:start)
                           AND bucket_start < to_timestamp(:end)
                        ON CONFLICT (domain, granularity, bucket_start, method, path)
                        DO UPDATE SET generation = EXCLUDED.generation
                        """
                    ),
                    {
                        "domain": commit.domain,
                        "granularity": granularity,
                        "start": start,
                        "end": end,
                        "generation": generation,
                    },
                )
            for day, at in commit.verified_days.items():
                _execute(
                    cur,
                    pyformat(
                        """
                        INSERT INTO traffic_verified_days (domain, business_date, verified_at)
                        VALUES (:domain, :day, to_timestamp(:at))
                        ON CONFLICT (domain, business_date)
                        DO UPDATE SET verified_at = EXCLUDED.verified_at
                        """
                    ),
                    {"domain": commit.domain, "day": day, "at": at},
                )

    def _claim_domain_version(self, cur: Any, commit: DomainCommit) -> None:
        # A concurrent commit holds the row lock until it ends; this statement then
        # sees the new version and matches nothing.
        if commit.expected_version == 0:
            claimed = _execute(
                cur,
                pyformat(
                    "INSERT INTO traffic_domains (domain, version) VALUES (:domain, 1) "
                    "ON CONFLICT (domain) DO NOTHING"
                ),
                {"domain": commit.domain},
            ).rowcount
        else:
            claimed = _execute(
                cur,
                pyformat(
                    "UPDATE traffic_domains SET version = version + 1, updated_at = now() "
                    "WHERE domain = :domain AND version = :version"
                ),
                {"domain": commit.domain, "version": commit.expected_version},
            ).rowcount
        if claimed != 1:
            raise CheckpointConflict(f"another run committed {commit.domain} meanwhile")

    def _save_checkpoint(self, cur: Any, ck: FileCheckpoint, now: float) -> None:
        values = {
            "id": ck.id,
            "domain": ck.domain,
            "device": ck.device,
            "inode": ck.inode,
            "fingerprint_length": ck.fingerprint_length,
            "fingerprint": ck.fingerprint,
            "offset": ck.offset,
            "lines": ck.lines,
            "compressed": ck.compressed,
            "path": ck.path,
            "newest": ck.newest_bucket,
            "version": ck.version,
            "now": now,
        }
        if ck.version == 0:
            _execute(
                cur,
                pyformat(
                    """
                    INSERT INTO traffic_files
                        (id, domain, device, inode, fingerprint_length, fingerprint, offset_bytes,
                         lines, compressed, path, newest_bucket, version, first_seen_at,
                         last_read_at)
                    VALUES (:id, :domain, :device, :inode, :fingerprint_length, :fingerprint,
                            :offset, :lines, :compressed, :path, to_timestamp(:newest), 1,
                            to_timestamp(:now), to_timestamp(:now))
                    """
                ),
                values,
            )
            return
        updated = _execute(
            cur,
            pyformat(
                """
                UPDATE traffic_files
                   SET device = :device, inode = :inode, fingerprint_length = :fingerprint_length,
                       fingerprint = :fingerprint, offset_bytes = :offset, lines = :lines,
                       compressed = :compressed, path = :path,
                       newest_bucket = to_timestamp(:newest), vanished_at = NULL,
                       last_read_at = to_timestamp(:now), version = version + 1
                 WHERE id = :id AND version = :version
                """
            ),
            values,
        ).rowcount
        if updated != 1:
            raise CheckpointConflict(f"checkpoint {ck.id} changed meanwhile")

    def _add_partials(
        self, cur: Any, domain: str, file_id: str, deltas: dict[PartialKey, Sums]
    ) -> None:
        items = list(deltas.items())
        statement = pyformat(
            f"""
            INSERT INTO traffic_file_partials AS p
                   (domain, granularity, bucket_start, method, path, file_id, {_SUM_COLUMNS})
            SELECT :domain, u.g, to_timestamp(u.b), u.m, u.p, :file_id,
                   u.s0, u.s1, u.s2, u.s3, u.s4, u.s5, u.s6, u.s7, u.s8, u.s9
              FROM unnest(CAST(:g AS text[]), CAST(:b AS bigint[]), CAST(:m AS text[]),
                          CAST(:p AS text[]), CAST(:s0 AS bigint[]), CAST(:s1 AS bigint[]),
                          CAST(:s2 AS bigint[]), CAST(:s3 AS bigint[]), CAST(:s4 AS bigint[]),
                          CAST(:s5 AS bigint[]), CAST(:s6 AS bigint[]), CAST(:s7 AS bigint[]),
                          CAST(:s8 AS bigint[]), CAST(:s9 AS bigint[]))
                   AS u(g, b, m, p, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9)
            ON CONFLICT (domain, granularity, bucket_start, method, path, file_id) DO UPDATE SET
                response_bytes = p.response_bytes + EXCLUDED.response_bytes,
                request_bytes = p.request_bytes + EXCLUDED.request_bytes,
                request_known = p.request_known + EXCLUDED.request_known,
                total_requests = p.total_requests + EXCLUDED.total_requests,
                status_1xx = p.status_1xx + EXCLUDED.status_1xx,
                status_2xx = p.status_2xx + EXCLUDED.status_2xx,
                status_3xx = p.status_3xx + EXCLUDED.status_3xx,
                status_4xx = p.status_4xx + EXCLUDED.status_4xx,
                status_5xx = p.status_5xx + EXCLUDED.status_5xx,
                status_other = p.status_other + EXCLUDED.status_other
            """  # noqa: S608 - constant column lists and fixed fragments; values are bound
        )
        for offset in range(0, len(items), CHUNK):
            chunk = items[offset : offset + CHUNK]
            params: dict[str, object] = {
                "domain": domain,
                "file_id": file_id,
                "g": [k[0] for k, _ in chunk],
                "b": [k[1] for k, _ in chunk],
                "m": [k[2] for k, _ in chunk],
                "p": [k[3] for k, _ in chunk],
            }
            for index in range(10):
                params[f"s{index}"] = [sums[index] for _, sums in chunk]
            cur.execute(statement, params)

    def _copy_partials(
        self, cur: Any, domain: str, file_id: str, deltas: dict[PartialKey, Sums]
    ) -> None:
        """``COPY`` a file's sums into ``traffic_file_partials``: one statement, no merging."""
        stamps: dict[int, str] = {}
        buffer = io.StringIO()
        write = buffer.write
        prefix = f"{copy_text(domain)}\t"
        suffix = f"\t{copy_text(file_id)}\t"
        for (granularity, bucket, method, path), sums in deltas.items():
            stamp = stamps.get(bucket)
            if stamp is None:
                stamp = stamps[bucket] = datetime.fromtimestamp(bucket, UTC).isoformat()
            write(
                f"{prefix}{granularity}\t{stamp}\t{copy_text(method)}\t{copy_text(path)}"
                f"{suffix}{sums[0]}\t{sums[1]}\t{sums[2]}\t{sums[3]}\t{sums[4]}\t{sums[5]}"
                f"\t{sums[6]}\t{sums[7]}\t{sums[8]}\t{sums[9]}\n"
            )
        buffer.seek(0)
        cur.copy_expert(
            "COPY traffic_file_partials (domain, granularity, bucket_start, method, path,"
            f" file_id, {_SUM_COLUMNS}) FROM STDIN",
            buffer,
        )

    def _publish_keys(
        self, cur: Any, domain: str, keys: list[PartialKey], publish: DatabasePublish
    ) -> int:
        """Rows of ``keys`` (one granularity) from all files' partial sums, upserted."""
        published = 0
        keys.sort()
        for offset in range(0, len(keys), PUBLISH_CHUNK):
            chunk = keys[offset : offset + PUBLISH_CHUNK]
            params = {
                "domain": domain,
                "granularity": publish.granularity,
                "b": [k[1] for k in chunk],
                "m": [k[2] for k in chunk],
                "p": [k[3] for k in chunk],
                **_row_params(publish, {k[1] for k in chunk}),
            }
            cur.execute(_PUBLISH_KEYS, params)
            published += len(chunk)
        return published

    def publish_dirty(
        self, domain: str, publish: DatabasePublish, batch_size: int
    ) -> Iterator[int]:
        """Publish dirty rows of one granularity inside the database, a batch per statement.

        Yields the number of rows of each batch. A mark is cleared in the statement that
        wrote its row, and only if no newer commit dirtied the key again meanwhile.
        """
        with self._cursors() as cur:
            starts = _execute(
                cur,
                pyformat(
                    f"""
                    SELECT DISTINCT {_epoch("bucket_start")} FROM traffic_dirty_keys
                     WHERE domain = :domain AND granularity = :granularity
                       AND bucket_start < to_timestamp(:until)
                    """  # noqa: S608 - table names and column lists are module constants; values are bound
                ),
                {"domain": domain, "granularity": publish.granularity, "until": publish.until},
            ).scalars()
            fields = _row_params(publish, set(starts))
        if not fields["mb"]:
            return
        after: tuple[int, str, str] | None = None
        while True:
            params: dict[str, object] = {
                "domain": domain,
                "granularity": publish.granularity,
                "until": publish.until,
                "limit": batch_size,
                **fields,
            }
            keyset = ""
            if after is not None:
                keyset = "AND (d.bucket_start, d.method, d.path) > (to_timestamp(:ab), :am, :ap)"
                params.update(ab=after[0], am=after[1], ap=after[2])
            with self._cursors() as cur:
                result = _execute(
                    cur, pyformat(_PUBLISH_DIRTY.replace("{keyset}", keyset)), params
                ).one_or_none()
            if result is None:
                return
            count, _written, *after_key = result
            yield count
            after = tuple(after_key)
            if count < batch_size:
                return

    def _mark_dirty(self, cur: Any, domain: str, keys: set[PartialKey], generation: int) -> None:
        items = sorted(keys)
        for offset in range(0, len(items), CHUNK):
            chunk = items[offset : offset + CHUNK]
            _execute(
                cur,
                pyformat(
                    """
                    INSERT INTO traffic_dirty_keys
                           (domain, granularity, bucket_start, method, path, generation)
                    SELECT :domain, u.g, to_timestamp(u.b), u.m, u.p, :generation
                      FROM unnest(CAST(:g AS text[]), CAST(:b AS bigint[]), CAST(:m AS text[]),
                                  CAST(:p AS text[])) AS u(g, b, m, p)
                    ON CONFLICT (domain, granularity, bucket_start, method, path)
                    DO UPDATE SET generation = EXCLUDED.generation
                    """
                ),
                {
                    "domain": domain,
                    "generation": generation,
                    "g": [k[0] for k in chunk],
                    "b": [k[1] for k in chunk],
                    "m": [k[2] for k in chunk],
                    "p": [k[3] for k in chunk],
                },
            )

    # -- publishing ------------------------------------------------------------------
    def pending(
        self, domain: str, granularity: str, until: int, batch_size: int
    ) -> Iterator[list[PendingRow]]:
        after: tuple[int, str, str] | None = None
        while True:
            params: dict[str, object] = {
                "domain": domain,
                "granularity": granularity,
                "until": until,
                "limit": batch_size,
            }
            keyset = ""
            if after is not None:
                keyset = "AND (d.bucket_start, d.method, d.path) > (to_timestamp(:ab), :am, :ap)"
                params.update(ab=after[0], am=after[1], ap=after[2])
            with self._cursors() as cur:
                rows = _execute(
                    cur,
                    pyformat(
                        f"""
                        WITH batch AS (
                            SELECT d.domain, d.granularity, d.bucket_start, d.method, d.path,
                                   d.generation
                              FROM traffic_dirty_keys d
                             WHERE d.domain = :domain AND d.granularity = :granularity
                               AND d.bucket_start < to_timestamp(:until) {keyset}
                             ORDER BY d.bucket_start, d.method, d.path
                             LIMIT :limit
                        )
                        SELECT {_epoch("b.bucket_start")} AS bucket, b.method, b.path,
                               b.generation, s.*
                          FROM batch b
                          CROSS JOIN LATERAL (
                              SELECT COALESCE(sum(p.response_bytes), 0) AS s0,
                                     COALESCE(sum(p.request_bytes), 0) AS s1,
                                     COALESCE(sum(p.request_known), 0) AS s2,
                                     COALESCE(sum(p.total_requests), 0) AS s3,
                                     COALESCE(sum(p.status_1xx), 0) AS s4,
                                     COALESCE(sum(p.status_2xx), 0) AS s5,
                                     COALESCE(sum(p.status_3xx), 0) AS s6,
                                     COALESCE(sum(p.status_4xx), 0) AS s7,
                                     COALESCE(sum(p.status_5xx), 0) AS s8,
                                     COALESCE(sum(p.status_other), 0) AS s9
                                FROM traffic_file_partials p
                               WHERE p.domain = b.domain AND p.granularity = b.granularity
                                 AND p.bucket_start = b.bucket_start AND p.method = b.method
                                 AND p.path = b.path
                          ) s
                         ORDER BY b.bucket_start, b.method, b.path
                        """  # noqa: S608 - constant column lists and fixed fragments; values are bound
                    ),
                    params,
                ).all()
            if not rows:
                return
            yield [
                PendingRow(
                    key=(granularity, r[0], r[1], r[2]),
                    sums=tuple(int(value) for value in r[4:14]),
                    token=r[3],
                )
                for r in rows
            ]
            last = rows[-1]
            after = (last[0], last[1], last[2])
            if len(rows) < batch_size:
                return

    def mark_published(self, domain: str, granularity: str, rows: list[PendingRow]) -> None:
        if not rows:
            return
        with self._cursors() as cur:
            _execute(
                cur,
                pyformat(
                    """
                    DELETE FROM traffic_dirty_keys d
                     USING unnest(CAST(:b AS bigint[]), CAST(:m AS text[]), CAST(:p AS text[]),
                                  CAST(:gen AS bigint[])) AS u(b, m, p, gen)
                     WHERE d.domain = :domain AND d.granularity = :granularity
                       AND d.bucket_start = to_timestamp(u.b) AND d.method = u.m
                       AND d.path = u.p AND d.generation = u.gen
                    """
                ),
                {
                    "domain": domain,
                    "granularity": granularity,
                    "b": [r.key[1] for r in rows],
                    "m": [r.key[2] for r in rows],
                    "p": [r.key[3] for r in rows],
                    "gen": [r.token for r in rows],
                },
            )

    # -- housekeeping ----------------------------------------------------------------
    def prune(self, domain: str, cutoff: float) -> None:
        """Forget files that vanished before ``cutoff`` and revalidations older than it.

        Published rows stay. A dirty mark is dropped only when no partial sum is left
        for its key: publishing it would send zeros, not the traffic that happened.
        """
        params = {"domain": domain, "cutoff": cutoff}
        with self._cursors() as cur:
            gone = _execute(
                cur,
                pyformat(
                    f"""
                    DELETE FROM traffic_file_partials p USING traffic_files f
                     WHERE p.file_id = f.id AND f.domain = :domain AND p.domain = :domain
                       AND f.vanished_at < to_timestamp(:cutoff)
                    RETURNING p.granularity, {_epoch("p.bucket_start")} AS bucket, p.method, p.path
                    """  # noqa: S608 - constant column lists and fixed fragments; values are bound
                ),
                params,
            ).all()
            _execute(
                cur,
                pyformat(
                    "DELETE FROM traffic_files "
                    "WHERE domain = :domain AND vanished_at < to_timestamp(:cutoff)"
                ),
                params,
            )
            keys = sorted({tuple(r) for r in gone})
            for offset in range(0, len(keys), CHUNK):
                chunk = keys[offset : offset + CHUNK]
                _execute(
                    cur,
                    pyformat(
                        """
                        DELETE FROM traffic_dirty_keys d
                         USING unnest(CAST(:g AS text[]), CAST(:b AS bigint[]),
                                      CAST(:m AS text[]), CAST(:p AS text[])) AS u(g, b, m, p)
                         WHERE d.domain = :domain AND d.granularity = u.g
                           AND d.bucket_start = to_timestamp(u.b) AND d.method = u.m
                           AND d.path = u.p
                           AND NOT EXISTS (
                               SELECT 1 FROM traffic_file_partials q
                                WHERE q.domain = d.domain AND q.granularity = d.granularity
                                  AND q.bucket_start = d.bucket_start AND q.method = d.method
                                  AND q.path = d.path)
                        """
                    ),
                    {
                        "domain": domain,
                        "g": [k[0] for k in chunk],
                        "b": [k[1] for k in chunk],
                        "m": [k[2] for k in chunk],
                        "p": [k[3] for k in chunk],
                    },
                )
            _execute(
                cur,
                pyformat(
                    "DELETE FROM traffic_verified_days WHERE domain = :domain "
                    "AND verified_at < to_timestamp(:cutoff)"
                ),
                params,
            )

    def close(self) -> None:
        return None
