"""Rule evaluation: a committed change set becomes alert messages in one statement.

``change_set_hook`` runs inside the change analysis's transaction (``app.analysis.changes
.analyse``), so the change set and its messages commit together or not at all. It locks
the execution's run first (``scan_control.run_status.lock_run``): the analyses of one
run's change sets take their turns, so the run's counters below never race. The
evaluation is set-based: the change set (``CHANGE_SET_SQL``) is joined with the owner's
enabled rules (and global ones) and their channels, filtered in SQL, numbered per rule,
and inserted as ``alert_deliveries`` rows; no change passes through Python.

Messages per run (a task's pass over its targets; docs/alerts.md), rule and channel:

* ``each``: one message per change, the first ``[alerts] max_messages_per_run`` of the
  whole run; the rest are folded into the run's digest;
* ``digest``: one message for the run with the counts by kind, the first ``[alerts]
  digest_changes`` changes and a link to the run's changes.

Digest contents are added up per rule and run in ``alert_run_digests`` by every change
set of the run; the digest messages are created when the run's last change set commits
(``app.alerts.run_digests``).

A rule's search filter (``filter.search`` / ``filter.query``) is tested here when the
search store can test assets inside this statement (PostgreSQL). Elsewhere
(Elasticsearch) no transaction may wait on the store: this statement evaluates the other
rules (``rules_of``) and records the execution in ``alert_searched_pending``;
``app.alerts.searched_changes`` asks the store once the analysis has committed and
creates those rules' messages with the same statement, and the run's digests wait for it.

Every single message gets its id here (``msg_`` and 32 hex digits; a digest's id is
derived from rule, run and channel in ``run_digests``): the id every delivery attempt
sends, so receivers can drop duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.alerts import pending_searches
from app.alerts.run_digests import emit_run_digests, run_changes_link, run_is_done
from app.analysis.changes import (
    ANALYSIS_FIELDS,
    CHANGE_KINDS,
    CHANGE_SET_SQL,
    ChangeCounts,
    ChangeSetHook,
    field_changed_sql,
)
from app.analysis.queue import AnalysisClaim
from app.config import AlertSettings
from app.errors import ValidationError
from app.observability import emit
from app.saved_searches import records as saved_queries
from app.scan_control.run_status import lock_run, task_name
from app.search.port import SearchStore, asset_conditions_in_database, asset_matches
from app.search.query_language import parse_query

# A rule's ``fields`` speak of documents' fields; the change set keeps the banner's hash.
_COLUMN_OF_FIELD = {("banner" if c == "banner_hash" else c): c for c in ANALYSIS_FIELDS}


def _values(side: str, alias: str = "x") -> str:
    pairs = ", ".join(f"'{c}', {alias}.{side}_{c}" for c in ANALYSIS_FIELDS)
    return f"jsonb_build_object({pairs})"


def _changed_fields(alias: str = "x") -> str:
    items = ", ".join(
        f"CASE WHEN {field_changed_sql(c, f'{alias}.old_{c}', f'{alias}.new_{c}')} THEN '{f}' END"
        for f, c in _COLUMN_OF_FIELD.items()
    )
    return f"array_remove(ARRAY[{items}]::text[], NULL)"


def _fields_test() -> str:
    return " OR ".join(
        f"('{f}' = ANY(r.fields) AND {field_changed_sql(c, f'x.old_{c}', f'x.new_{c}')})"
        for f, c in _COLUMN_OF_FIELD.items()
    )


def _matches() -> str:
    """SQL: change ``x`` matches rule ``r`` (kind, filter, fields of a ``changed``).

    A rule on ``changed`` also hears of a ``reappeared`` endpoint whose values differ from
    those it had before it went (in one of the rule's ``fields``, or any): a certificate
    replaced while its port was down is a changed certificate to whoever watches them."""
    return f"""(x.kind = ANY(r.on_kinds)
                AND (x.kind <> 'changed' OR cardinality(r.fields) = 0 OR {_fields_test()})
                OR x.kind = 'reappeared' AND 'changed' = ANY(r.on_kinds)
                   AND (cardinality(r.fields) = 0 AND cardinality({_changed_fields()}) > 0
                        OR {_fields_test()}))
           AND (cardinality(r.cidrs) = 0 OR x.ip <<= ANY(r.cidrs))
           AND (cardinality(r.ports) = 0 OR x.port = ANY(r.ports))
           AND (cardinality(r.services) = 0
                OR coalesce(x.new_service, x.old_service) = ANY(r.services))
           AND (cardinality(r.products) = 0
                OR coalesce(x.new_product, x.old_product) = ANY(r.products))
           AND (cardinality(r.task_ids) = 0 OR x.task_id = ANY(r.task_ids))
           AND (NOT r.searched
                OR EXISTS (SELECT 1 FROM searched q
                            WHERE q.rule_id = r.id AND q.change_id = x.id))"""  # noqa: S608 - constants


def enqueue_sql() -> str:
    per_kind = ", ".join(f"count(*) FILTER (WHERE x.kind = '{k}') AS {k}" for k in CHANGE_KINDS)
    # What the run's digest takes from this change set, per kind: the rule's matches
    # minus the single messages sent now.
    digested = ", ".join(
        f"t.{k} - (SELECT count(*) FROM firsts s WHERE s.rule_id = r.id "  # noqa: S608 - constants
        f"AND s.n <= r.singles AND s.kind = '{k}')"
        for k in CHANGE_KINDS
    )
    kinds = ", ".join(CHANGE_KINDS)
    added = ", ".join(f"{k} = a.{k} + EXCLUDED.{k}" for k in CHANGE_KINDS)
    old_values, new_values = _values("old", "f"), _values("new", "f")
    changed_fields = _changed_fields("f")
    # Per rule, not per channel: the change set is compared with each rule once. Counts
    # come from one grouped pass; the changes a message lists are each rule's first ones
    # by id (a top-N per rule), so only those are turned into JSON. The change set is
    # not materialised: each top-N reads the (execution_id, id) index in order and stops
    # after its N matches (measured: 0.47 against 1.44 CPU seconds for 100k changes).
    # The run's digest row (``alert_run_digests``) says how many single messages the rule
    # has left in the run and how many changes its digest still lists; the caller holds
    # the run's lock, so no other change set of the run moves them meanwhile.
    return f"""
    WITH x AS NOT MATERIALIZED ({CHANGE_SET_SQL}),
    -- The changes each search-filtered rule's search found (``search_matches``).
    searched AS MATERIALIZED (
        SELECT * FROM unnest(CAST(:searched_rules AS bigint[]),
                             CAST(:searched_changes AS bigint[])) AS q(rule_id, change_id)
    ),
    rules AS MATERIALIZED (
        SELECT r.id, r.owner_id, r.name, r.mode, r.on_kinds, r.fields, r.cidrs, r.ports,
               r.services, r.products, r.task_ids, r.channel_ids,
               (r.search_id IS NOT NULL OR r.query IS NOT NULL) AS searched,
               CASE WHEN r.mode = 'each'
                    THEN greatest(0, :cap - coalesce(a.singles_sent, 0)) ELSE 0 END AS singles,
               greatest(0, :digest_changes - coalesce(jsonb_array_length(a.changes), 0))
               AS listable
          FROM alert_rules r
          LEFT JOIN alert_run_digests a ON a.rule_id = r.id AND a.run_id = :run_id
         WHERE r.enabled AND (r.owner_id = :owner_id OR r.is_global)
           -- ``RULES_OF``: which rules this pass evaluates (search-filtered ones may be
           -- evaluated in a pass of their own, after the analysis, ``searched_changes``).
           AND (:rules_of = 'all'
                OR (r.search_id IS NOT NULL OR r.query IS NOT NULL) = (:rules_of = 'searched'))
    ),
    totals AS MATERIALIZED (
        SELECT r.id AS rule_id, count(*) AS total, {per_kind}
          FROM rules r JOIN x ON {_matches()}
         GROUP BY r.id
    ),
    firsts AS MATERIALIZED (
        SELECT r.id AS rule_id, f.n, f.kind,
               jsonb_build_object(
                   'change_id', f.id, 'kind', f.kind, 'ip', host(f.ip), 'port', f.port,
                   'transport', f.transport, 'task_id', f.task_id,
                   'execution_id', f.execution_id, 'finished_at', f.finished_at,
                   'old', CASE WHEN f.kind = 'new' THEN NULL ELSE {old_values} END,
                   'new', CASE WHEN f.kind = 'gone' THEN NULL ELSE {new_values} END,
                   'changed_fields', CASE WHEN f.kind IN ('changed', 'reappeared')
                                          THEN to_jsonb({changed_fields}) END
               ) AS change
          FROM rules r
          CROSS JOIN LATERAL (
              SELECT x.*, row_number() OVER (ORDER BY x.id) AS n
                FROM (SELECT x.* FROM x WHERE {_matches()}
                       ORDER BY x.id LIMIT r.singles + r.listable) AS x
          ) AS f
    ),
    singles AS (
        INSERT INTO alert_deliveries (id, rule_id, channel_id, owner_id, execution_id, task_id,
                                      run_id, message_kind, event_type, payload)
        SELECT 'msg_' || replace(CAST(gen_random_uuid() AS text), '-', ''), r.id, c.id,
               r.owner_id, :execution_id, :task_id, :run_id, 'each', 'netmap.change.' || f.kind,
               jsonb_build_object('rule', jsonb_build_object('id', r.id, 'name', r.name),
                                  'task_name', CAST(:task_name AS text),
                                  'change', f.change, 'link', :link)
          FROM rules r
          JOIN firsts f ON f.rule_id = r.id AND f.n <= r.singles
          JOIN alert_channels c ON c.id = ANY(r.channel_ids) AND c.owner_id = r.owner_id
        RETURNING 1
    ),
    -- A digest rule's changes, and an ``each`` rule's beyond the run's cap (folded), are
    -- added to the run's digest, which is sent when the run ends (app.alerts.run_digests).
    accumulated AS (
        INSERT INTO alert_run_digests AS a (rule_id, run_id, folded,
                                            singles_sent, total, {kinds}, changes,
                                            executions)
        SELECT r.id, :run_id, r.mode = 'each',
               least(r.singles, t.total), t.total - least(r.singles, t.total), {digested},
               d.changes, 1
          FROM rules r
          JOIN totals t ON t.rule_id = r.id
          CROSS JOIN LATERAL (
              SELECT coalesce(jsonb_agg(f.change ORDER BY f.n), '[]') AS changes
                FROM firsts f WHERE f.rule_id = r.id AND f.n > r.singles
          ) AS d
        ON CONFLICT (rule_id, run_id) DO UPDATE
           SET folded = EXCLUDED.folded, singles_sent = a.singles_sent + EXCLUDED.singles_sent,
               total = a.total + EXCLUDED.total, {added}, changes = a.changes || EXCLUDED.changes,
               executions = a.executions + 1, updated_at = now()
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM singles) AS singles,
           (SELECT count(*) FROM accumulated) AS accumulated
    """  # noqa: S608 - fragments are module constants; values are bound


_ENQUEUE = sa.text(enqueue_sql())


def change_set_hook(settings: AlertSettings, store: SearchStore) -> ChangeSetHook:
    """The analysis's ``on_change_set``: in the transaction that commits an execution's
    change set, its messages, and the run's digests once it was the run's last one.
    ``store`` is the search store, which tests the rules' search filters."""

    def hook(conn: Connection, claim: AnalysisClaim, counts: ChangeCounts) -> dict[str, int]:
        if claim.run_id is None:
            return {}
        change_set = ChangeSet(claim.owner_id, claim.execution_id, claim.task_id, claim.run_id)
        return alerts_for_change_set(conn, settings, change_set, changes=counts.total, store=store)

    return hook


@dataclass(frozen=True)
class ChangeSet:
    """Whose change set, of which execution, task and run."""

    owner_id: int
    execution_id: int
    task_id: int
    run_id: int


def alerts_for_change_set(
    conn: Connection,
    settings: AlertSettings,
    change_set: ChangeSet,
    *,
    changes: int,
    store: SearchStore | None = None,
) -> dict[str, int]:
    """On ``conn`` (the transaction committing the execution's change set of ``changes``
    rows): lock the run, create the change set's messages, and the run's digests if it
    was the run's last change set and no search-filtered rules of the run are still to be
    evaluated (``pending_searches``). Returns the messages created by kind."""
    run = lock_run(conn, change_set.run_id)
    if run is None:
        return {}
    created = (
        enqueue_alerts(conn, settings, change_set, changes=changes, store=store) if changes else {}
    )
    if run_is_done(conn, run, besides=change_set.execution_id):
        digests = emit_run_digests(conn, settings, run)
        if digests:
            created["digest"] = digests
    return created


# The enabled search-filtered rules a change set of ``:owner_id`` is compared with.
_SEARCHED_RULES_WHERE = """
     WHERE r.enabled AND (r.owner_id = :owner_id OR r.is_global)
       AND (r.search_id IS NOT NULL OR r.query IS NOT NULL)
       AND r.on_kinds && CAST(:kinds AS text[])  -- change rules, not condition ones
       AND r.created_at <= coalesce(CAST(:as_of AS timestamptz), 'infinity')
"""
_SEARCHED_RULES = sa.text(
    f"SELECT r.id, r.search_id, r.query, r.on_kinds FROM alert_rules r{_SEARCHED_RULES_WHERE}"  # noqa: S608 - a module constant
    " ORDER BY r.id"
)
_ANY_SEARCHED_RULE = sa.text(
    f"SELECT EXISTS (SELECT 1 FROM alert_rules r{_SEARCHED_RULES_WHERE})"  # noqa: S608 - a module constant
)
# What a search's ``status:`` reads for a change: the asset's status once the change is
# published (the analysis publishes it after this transaction), so ``status:gone`` finds
# gone changes. A rule's search has no default status: a rule on ``gone`` filtered by
# ``port:22`` hears of a gone SSH port. ``status_after_change`` says the same in Python.
_STATUS_AFTER_CHANGE = "CASE WHEN x.kind = 'gone' THEN 'gone' ELSE 'open' END"


def status_after_change(kind: str) -> str:
    """``_STATUS_AFTER_CHANGE`` for one change kind."""
    return "gone" if kind == "gone" else "open"


@dataclass(frozen=True)
class SearchedRule:
    """An enabled search-filtered rule: its change kinds and its search's text now (None:
    its saved search is gone)."""

    id: int
    kinds: tuple[str, ...]
    text: str | None


def searched_rules(
    conn: Connection, owner_id: int, *, as_of: datetime | None = None
) -> list[SearchedRule]:
    """The enabled search-filtered rules a change set of ``owner_id`` is compared with,
    each with its search's text as it is now (a saved search is read, not copied);
    ``as_of``: only the rules created by then (a change set evaluated after its commit
    is not news to a rule made after it)."""
    rows = conn.execute(
        _SEARCHED_RULES, {"owner_id": owner_id, "kinds": list(CHANGE_KINDS), "as_of": as_of}
    )
    rows = rows.all()
    saved = saved_queries.queries_of(conn, [r.search_id for r in rows if r.search_id])
    return [
        SearchedRule(
            r.id,
            tuple(r.on_kinds),
            r.query if r.query is not None else saved.get(r.search_id),
        )
        for r in rows
    ]


def parsed_search(rule: SearchedRule, now: datetime) -> tuple[bool, object | None]:
    """(usable, parsed tree) of a rule's search; an unusable one (saved search gone, text
    no longer readable) is skipped with an ``AlertRuleSearchSkipped`` event. A tree of
    None (an empty saved search) finds every asset."""
    if rule.text is None:
        emit("AlertRuleSearchSkipped", rule_id=rule.id, reason="search")
        return False, None
    try:
        return True, parse_query(rule.text, now=now).node
    except ValidationError:
        emit("AlertRuleSearchSkipped", rule_id=rule.id, reason="unreadable")
        return False, None


def search_matches(
    conn: Connection,
    store: SearchStore | None,
    *,
    owner_id: int,
    execution_id: int,
    changes: int,
) -> list[tuple[int, int]]:
    """(rule id, change id) for each change (of the ``changes`` the execution's change set
    holds) a search-filtered rule's search finds, inside the analysis's transaction.

    The search language is tested by the search store itself, against the current asset
    of each changed endpoint (``asset_match_sql``: the PostgreSQL store's own translation
    of the language, inside this transaction), so a rule's search finds what the same
    search finds on the Assets page. Durations (``cert.expires:<30d``) count from now. A
    saved search is read as it is now. A store that can test assets only outside this
    transaction (Elasticsearch) has its own pass (``searched_changes``); one that can do
    neither is refused such rules when they are written, and one found anyway (the store
    was switched) matches nothing and says so in an event.
    """
    rules = searched_rules(conn, owner_id)
    if not rules:
        return []
    in_database = asset_conditions_in_database(store) if store is not None else None
    now = datetime.now(UTC)
    pairs: list[tuple[int, int]] = []
    for rule in rules:
        if in_database is None:
            emit(
                "AlertRuleSearchSkipped",
                rule_id=rule.id,
                reason="store" if rule.text is not None else "search",
            )
            continue
        usable, node = parsed_search(rule, now)
        if not usable:
            continue
        params: dict[str, Any] = {"owner_id": owner_id, "execution_id": execution_id}
        condition = "TRUE"  # an empty saved search finds every asset
        if node is not None:
            condition, found = in_database.asset_match_sql(
                # The store spells a small change set as a test of each change's own
                # asset (docs/alerts.md, "What a search filter costs").
                node,
                endpoint="x",
                status=_STATUS_AFTER_CHANGE,
                rows=changes,
                conn=conn,
            )
            params.update(found)
        ids = conn.execute(
            sa.text(f"SELECT x.id FROM ({CHANGE_SET_SQL}) x WHERE {condition}"),  # noqa: S608 - the change set is a constant; the condition is the store's, its values bound
            params,
        ).scalars()
        pairs.extend((rule.id, change_id) for change_id in ids)
    return pairs


def searches_after_commit(store: SearchStore | None) -> bool:
    """Whether the search-filtered rules are evaluated after the analysis commits: the
    store can test assets, but not inside the analysis's statement (Elasticsearch)."""
    return (
        store is not None
        and asset_conditions_in_database(store) is None
        and asset_matches(store) is not None
    )


def enqueue_alerts(
    conn: Connection,
    settings: AlertSettings,
    change_set: ChangeSet,
    *,
    changes: int,
    store: SearchStore | None = None,
) -> dict[str, int]:
    """Create the change set's single messages (``changes``: its rows) and add the rest to
    the run's digests, on ``conn`` (the analysis's transaction, holding the run's lock).
    ``store`` tests the
    rules' search filters: here (PostgreSQL), or after the commit (Elasticsearch: the
    rules without a search are evaluated here and the execution is recorded as pending
    for the others, ``searched_changes``); without one, such rules match nothing."""
    if not searches_after_commit(store):
        searched = search_matches(
            conn,
            store,
            owner_id=change_set.owner_id,
            execution_id=change_set.execution_id,
            changes=changes,
        )
        return _enqueue(conn, settings, change_set, searched, rules_of="all")
    created = _enqueue(conn, settings, change_set, [], rules_of="unsearched")
    # Whether any rule would be asked, not the rules themselves: their searches are read
    # by the pass after the commit.
    any_rule = conn.execute(
        _ANY_SEARCHED_RULE,
        {"owner_id": change_set.owner_id, "kinds": list(CHANGE_KINDS), "as_of": None},
    ).scalar()
    if any_rule:
        pending_searches.record(
            conn,
            execution_id=change_set.execution_id,
            run_id=change_set.run_id,
            owner_id=change_set.owner_id,
        )
    return created


def enqueue_searched(
    conn: Connection,
    settings: AlertSettings,
    change_set: ChangeSet,
    searched: list[tuple[int, int]],
) -> dict[str, int]:
    """The search-filtered rules' pass over a change set evaluated after its analysis
    (``searched_changes``): ``searched`` holds the (rule, change) pairs the store found;
    the caller holds the run's lock, like the analysis's transaction does."""
    return _enqueue(conn, settings, change_set, searched, rules_of="searched")


def _enqueue(
    conn: Connection,
    settings: AlertSettings,
    change_set: ChangeSet,
    searched: list[tuple[int, int]],
    *,
    rules_of: str,
) -> dict[str, int]:
    row = conn.execute(
        _ENQUEUE,
        {
            "searched_rules": [rule_id for rule_id, _ in searched],
            "searched_changes": [change_id for _, change_id in searched],
            "rules_of": rules_of,
            "owner_id": change_set.owner_id,
            "execution_id": change_set.execution_id,
            "task_id": change_set.task_id,
            "task_name": task_name(conn, change_set.task_id),
            "run_id": change_set.run_id,
            "cap": settings.max_messages_per_run,
            "digest_changes": settings.digest_changes,
            "link": run_changes_link(settings, change_set.task_id, change_set.run_id),
        },
    ).one()
    created = {"each": int(row.singles)} if row.singles else {}
    if row.singles or row.accumulated:
        emit(
            "AlertMessagesCreated",
            execution_id=change_set.execution_id,
            run_id=change_set.run_id,
            each=int(row.singles),
            digests_added_to=int(row.accumulated),
        )
    return created
