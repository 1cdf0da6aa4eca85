"""Search-filtered rules evaluated after the analysis commits (Elasticsearch store).

The analysis's transaction evaluates a change set's rules without a search filter and
records the execution in ``alert_searched_pending`` (``app.alerts.evaluate``). Here, with
no database transaction open while the store is asked (docs/architecture.md, short
transactions), ``evaluate_pending`` does the rest in three steps:

1. one short transaction reads the pending row, the owner's search-filtered rules (each
   search's text as it is now) and the change set's endpoints;
2. the search store says which changed endpoints' current assets each rule's search
   finds (``AssetMatches``, in bounded batches), a ``gone`` change's asset read as
   ``status:gone`` and the others' as ``status:open``, as the in-database test does;
3. one short transaction locks the run, deletes the pending row and, only if it was
   still there, creates those rules' messages with the analysis's own statement
   (``evaluate.enqueue_searched``: the run's ``each`` cap and digests as for any change
   set), then the run's digests if the run is over and nothing else of it is awaited.

The analysis worker calls it right after the commit (``follow_up``); the
``alert-searched-changes`` job (``evaluate_due``) finishes what a crash or a store outage
left pending. Deleting the row under the run's lock is what makes it happen once:
whoever comes second finds no row and creates nothing.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime

import sqlalchemy as sa

from app.alerts import pending_searches
from app.alerts.evaluate import (
    ChangeSet,
    SearchedRule,
    enqueue_searched,
    parsed_search,
    searched_rules,
    searches_after_commit,
    status_after_change,
)
from app.alerts.run_digests import emit_run_digests, run_is_done
from app.analysis.changes import CHANGE_SET_SQL
from app.analysis.queue import AnalysisClaim
from app.config import AlertSettings
from app.db import transaction
from app.observability import emit
from app.scan_control.run_status import lock_run
from app.search.port import AssetMatches, Endpoint, SearchStore, StoreRefused, asset_matches

# Pending executions looked at per tick of the recovery job; the rest wait for the next.
EXECUTIONS_PER_TICK = 100

_CHANGED_ENDPOINTS = sa.text(
    f"SELECT x.id, x.kind, host(x.ip) AS ip, x.port, x.transport FROM ({CHANGE_SET_SQL}) x "  # noqa: S608 - a module constant
    "ORDER BY x.id"
)


def _matches(
    store: AssetMatches, owner_id: int, rules: list[SearchedRule], changes: list
) -> list[tuple[int, int]]:
    """(rule id, change id) for each change whose asset the rule's search finds; asks the
    store, so no transaction may be open."""
    now = datetime.now(UTC)
    pairs: list[tuple[int, int]] = []
    for rule in rules:
        usable, node = parsed_search(rule, now)
        if not usable:
            continue
        # Only the changes of the rule's kinds, split by the status their assets take.
        wanted: dict[str, dict[Endpoint, list[int]]] = defaultdict(lambda: defaultdict(list))
        for change in changes:
            if change.kind in rule.kinds:
                endpoint = (change.ip, change.port, change.transport)
                wanted[status_after_change(change.kind)][endpoint].append(change.id)
        try:
            for status, ids_of in wanted.items():
                found = store.matching_endpoints(
                    owner_id, node, status=status, endpoints=list(ids_of)
                )
                pairs.extend((rule.id, change_id) for e in found for change_id in ids_of[e])
        except StoreRefused as exc:
            # The store refuses this search for what it says: asking again cannot help.
            emit("AlertRuleSearchSkipped", rule_id=rule.id, reason="refused", error=str(exc))
    return pairs


def evaluate_pending(
    settings: AlertSettings,
    store: SearchStore,
    execution_id: int,
    *,
    check: Callable[[], None] | None = None,
) -> int:
    """The search-filtered rules' messages for one pending execution; returns how many
    messages were created (0 when nothing was pending or another process did it).
    ``check`` (a lease's) is called before the writing transaction. A store outage
    raises and leaves the execution pending."""
    matcher = asset_matches(store)
    if matcher is None:
        return 0
    with transaction() as conn:
        pending = pending_searches.read(conn, execution_id)
        if pending is None:
            return 0
        rules = searched_rules(conn, pending.owner_id, as_of=pending.created_at)
        changes = conn.execute(_CHANGED_ENDPOINTS, {"execution_id": execution_id}).all()
    pairs = _matches(matcher, pending.owner_id, rules, changes)
    if check is not None:
        check()
    with transaction() as conn:
        run = lock_run(conn, pending.run_id)
        if not pending_searches.take(conn, execution_id) or run is None:
            return 0
        change_set = ChangeSet(pending.owner_id, execution_id, pending.task_id, pending.run_id)
        created = sum(enqueue_searched(conn, settings, change_set, pairs).values())
        if run_is_done(conn, run):
            created += emit_run_digests(conn, settings, run)
    return created


def follow_up(
    settings: AlertSettings, store: SearchStore
) -> Callable[[AnalysisClaim], None] | None:
    """The analysis worker's step after a change set commits: its search-filtered rules
    evaluated at once, when the store needs this pass (None: it does not). A failure is
    reported and left to the ``alert-searched-changes`` job; the analysis goes on."""
    if not searches_after_commit(store):
        return None

    def after(claim: AnalysisClaim) -> None:
        if claim.run_id is None:
            return  # no run, no alerts (``evaluate.change_set_hook``)
        try:
            evaluate_pending(settings, store, claim.execution_id)
        except Exception as exc:  # noqa: BLE001 - the recovery job retries; the analysis is done
            emit(
                "AlertSearchDeferred",
                level=logging.WARNING,
                execution_id=claim.execution_id,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )

    return after


def evaluate_due(
    settings: AlertSettings, store: SearchStore, *, check: Callable[[], None] | None = None
) -> int:
    """One tick of the ``alert-searched-changes`` job: the executions still pending
    (the worker crashed after the commit, or the store was out). Returns the messages
    created."""
    if not searches_after_commit(store):
        return 0
    with transaction() as conn:
        due = pending_searches.due(conn, limit=EXECUTIONS_PER_TICK)
    created = 0
    for execution_id in due:
        if check is not None:
            check()
        try:
            created += evaluate_pending(settings, store, execution_id, check=check)
        except Exception as exc:  # noqa: BLE001 - one execution's failure must not hold the others
            if check is not None:
                check()  # a lost lease ends the tick: that is no failure of this execution
            emit(
                "AlertSearchFailed",
                level=logging.ERROR,
                execution_id=execution_id,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
    return created
