"""Moving a PostgreSQL search store's history into Elasticsearch (ING-11).

``netmap search migrate --to elasticsearch`` copies the facts (every month's raw
observations and DNS records) and the execution-scope endpoints from the
PostgreSQL store's tables into the configured cluster, through the
Elasticsearch store's own writes (deterministic ids: copying a document twice
is harmless). It is resumable and bounded:

* facts in pages of ``batch_size`` by fact id (the partitions' primary keys, a
  merge of index ranges), then execution endpoints execution by execution in
  pages of ``batch_size`` by id (the primary key, ``(execution_id, id)``);
* each page is read in a short transaction, written to Elasticsearch with no
  database connection held, and only then recorded in ``search_store_migrations``
  (the checkpoint this package owns), so an interrupted run resumes after the
  last page that reached the cluster;
* at the end every execution's counts (observations, endpoints, IPs) are
  compared between the two stores over the whole history; a difference fails
  the command and leaves the migration unfinished, so a re-run checks again.

The current-asset view is not copied: it is built from the execution endpoints by
the projection, which re-queues every succeeded execution when the copy finishes
(``netmap search migrate`` asks it to), so the cluster's current view converges once the
deployment runs on Elasticsearch.

Final-scope rule (ING-11): a final whose execution has receipts
confirmed before the copy finished counts over the full history
(``legacy_full_history``, event ``ScanSummaryLegacyIndexScope``): their facts
came through the migration, not through a write that named its months.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.db import transaction
from app.search.documents import FactDocument
from app.search.port import SearchStore, StorageScope
from app.search.postgres_schema import EXECUTION_TABLE, FACTS_TABLE, id_after_cursor

TARGET = "elasticsearch"
LEGACY = StorageScope(months=(), legacy_full_history=True)

_FACT_FIELDS = (
    "replace(f.id::text, '-', '') AS id, f.kind, f.execution_id, f.task_id, f.owner_id, "
    "f.scanner_id, f.upload_id, f.stream, f.batch_index, f.position, f.observed_at, f.body"
)
# Keyset by the facts' primary key (id, observed_at): each partition's index range.
FACTS_PAGE = (
    f"SELECT {_FACT_FIELDS}, f.id AS key FROM {FACTS_TABLE} f "  # noqa: S608 - module constants
    f"WHERE {id_after_cursor('f.id')} "
    "ORDER BY f.id LIMIT :limit"
)
EXECUTIONS_AFTER = (
    f"SELECT DISTINCT execution_id FROM {EXECUTION_TABLE} "  # noqa: S608 - module constants
    "WHERE execution_id > :after ORDER BY execution_id LIMIT :limit"
)

# Receipts confirmed before the history was copied (ING-11's migrated history).
MIGRATED_RECEIPTS_SQL = """
    EXISTS (
      SELECT 1 FROM search_store_migrations m, scan_upload_receipts r
       WHERE m.target = 'elasticsearch' AND m.finished_at IS NOT NULL
         AND r.execution_id = :e AND r.status = 'confirmed' AND r.observation_count > 0
         AND r.confirmed_at <= m.finished_at
    )
"""


def has_migrated_history(conn: Connection, execution_id: int) -> bool:
    """Whether a final must read this execution's whole history: some of its facts
    were stored before the copy finished (with PostgreSQL still the store, a
    full-history count is the same sum over every month)."""
    return bool(
        conn.execute(sa.text(f"SELECT {MIGRATED_RECEIPTS_SQL}"), {"e": execution_id}).scalar()
    )


@dataclass
class MigrationState:
    phase: str
    after_fact_id: str | None
    after_execution_id: int
    facts_copied: int
    endpoints_copied: int
    finished: bool


@dataclass
class MigrationResult:
    facts: int
    endpoints: int
    executions_checked: int
    mismatches: list[dict[str, Any]]
    resumed: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": not self.mismatches,
            "to": TARGET,
            "facts": self.facts,
            "endpoints": self.endpoints,
            "executions_checked": self.executions_checked,
            "mismatches": self.mismatches[:20],
            "resumed": self.resumed,
        }


class MigrationError(Exception):
    pass


def _load(conn: Connection) -> MigrationState:
    conn.execute(
        sa.text("INSERT INTO search_store_migrations (target) VALUES (:t) ON CONFLICT DO NOTHING"),
        {"t": TARGET},
    )
    row = conn.execute(
        sa.text(
            "SELECT phase, after_fact_id, after_execution_id, facts_copied, endpoints_copied, "
            "finished_at FROM search_store_migrations WHERE target = :t"
        ),
        {"t": TARGET},
    ).one()
    return MigrationState(
        phase=row.phase,
        after_fact_id=str(row.after_fact_id) if row.after_fact_id else None,
        after_execution_id=row.after_execution_id,
        facts_copied=row.facts_copied,
        endpoints_copied=row.endpoints_copied,
        finished=row.finished_at is not None,
    )


def _save(state: MigrationState, *, finished: bool = False) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text(
                """
                UPDATE search_store_migrations
                   SET phase = :phase, after_fact_id = CAST(:fact AS uuid),
                       after_execution_id = :execution, facts_copied = :facts,
                       endpoints_copied = :endpoints, updated_at = now(),
                       finished_at = CASE WHEN :finished THEN now() END
                 WHERE target = :t
                """
            ),
            {
                "t": TARGET,
                "phase": state.phase,
                "fact": state.after_fact_id,
                "execution": state.after_execution_id,
                "facts": state.facts_copied,
                "endpoints": state.endpoints_copied,
                "finished": finished,
            },
        )


def migrate_to_elasticsearch(
    source: SearchStore,
    target: SearchStore,
    *,
    batch_size: int,
    restart: bool = False,
    progress: Callable[[str], None] = lambda _m: None,
    when_finished: Callable[[], object] = lambda: None,
) -> MigrationResult:
    """Copy facts and execution endpoints, then check every execution's counts;
    ``when_finished`` runs once they match (the command requeues the projection there:
    the projection owns its outbox, and this package may not import it)."""
    if source.name != "postgres" or target.name != TARGET:
        raise MigrationError("the migration copies a PostgreSQL store into Elasticsearch")
    with transaction() as conn:
        if restart:
            conn.execute(
                sa.text("DELETE FROM search_store_migrations WHERE target = :t"), {"t": TARGET}
            )
        state = _load(conn)
    resumed = state.facts_copied > 0 or state.endpoints_copied > 0 or state.phase != "facts"
    if state.finished:
        state.phase = "done"
    target.ensure_schema()
    if state.phase == "facts":
        _copy_facts(target, state, batch_size, progress)
        state.phase = "endpoints"
        _save(state)
    if state.phase == "endpoints":
        _copy_endpoints(source, target, state, batch_size, progress)
        state.phase = "done"
        _save(state)
    progress("checking counts execution by execution")
    target.refresh(LEGACY)
    checked, mismatches = _check_counts(source, target, batch_size)
    if mismatches:
        progress(f"{len(mismatches)} executions differ: the migration stays unfinished")
        return MigrationResult(
            state.facts_copied, state.endpoints_copied, checked, mismatches, resumed
        )
    _save(state, finished=True)
    when_finished()
    progress(f"done: {state.facts_copied:,} facts, {state.endpoints_copied:,} endpoints")
    return MigrationResult(state.facts_copied, state.endpoints_copied, checked, [], resumed)


def _copy_facts(target, state: MigrationState, batch_size: int, progress) -> None:
    while True:
        with transaction() as conn:
            rows = conn.execute(
                sa.text(FACTS_PAGE), {"after": state.after_fact_id, "limit": batch_size}
            ).all()
        if not rows:
            return
        facts = [
            FactDocument(**{k: v for k, v in row._mapping.items() if k != "key"}) for row in rows
        ]
        target.write_facts(facts).raise_for_failures()  # no connection held
        state.after_fact_id = str(rows[-1].key)
        state.facts_copied += len(rows)
        _save(state)
        progress(f"facts: {state.facts_copied:,} copied")


def _copy_endpoints(source, target, state: MigrationState, batch_size: int, progress) -> None:
    while True:
        with transaction() as conn:
            executions = list(
                conn.execute(
                    sa.text(EXECUTIONS_AFTER),
                    {"after": state.after_execution_id, "limit": batch_size},
                ).scalars()
            )
        if not executions:
            return
        for execution_id in executions:
            after: str | None = None
            copied = 0
            while True:
                page = source.read_execution_endpoints(
                    execution_id, after_id=after, limit=batch_size
                )
                if not page:
                    break
                target.write_execution_endpoints(page).raise_for_failures()
                copied += len(page)
                after = page[-1].id
            # Recorded per execution: a resumed run redoes at most this one execution.
            state.after_execution_id = execution_id
            state.endpoints_copied += copied
            _save(state)
            progress(f"endpoints: execution {execution_id} ({state.endpoints_copied:,} copied)")


def _check_counts(source, target, batch_size: int) -> tuple[int, list[dict[str, Any]]]:
    checked, mismatches, after = 0, [], 0
    while True:
        with transaction() as conn:
            executions = list(
                conn.execute(
                    sa.text(
                        f"SELECT DISTINCT execution_id FROM {FACTS_TABLE} "  # noqa: S608
                        "WHERE execution_id > :after ORDER BY execution_id LIMIT :limit"
                    ),
                    {"after": after, "limit": batch_size},
                ).scalars()
            )
        if not executions:
            return checked, mismatches
        for execution_id in executions:
            was = source.count(LEGACY, execution_id)
            now = target.count(LEGACY, execution_id)
            checked += 1
            if (was.observations, was.endpoints, was.ips) != (
                now.observations,
                now.endpoints,
                now.ips,
            ):
                mismatches.append(
                    {
                        "execution_id": execution_id,
                        "postgres": [was.observations, was.endpoints, was.ips],
                        "elasticsearch": [now.observations, now.endpoints, now.ips],
                    }
                )
        after = executions[-1]
