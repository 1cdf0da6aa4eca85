"""A run's digests: one message per rule, run and channel, created when the run is over.

Every change set of a run adds to its rules' rows of ``alert_run_digests`` (in the
analysis's transaction, ``app.alerts.evaluate``). The digest messages are created from
those rows once nothing more can come: the run has ended (succeeded, partial, failed or
cancelled), none of its executions still has a change set to commit and none has
search-filtered rules still to evaluate (``alert_searched_pending``, Elasticsearch store:
``app.alerts.searched_changes``). Three places get there:

* the analysis of the run's last change set (``evaluate.change_set_hook``), in its own
  transaction: the usual case, so a digest leaves with the change set that completes it;
* the evaluation of the run's last pending search-filtered rules
  (``searched_changes.evaluate_pending``), in its own transaction;
* the ``alert-run-digests`` periodic job (``send_finished_run_digests``) for runs that
  end without a last analysis: the last execution failed or was cancelled after the
  others had been analysed, or the run was cancelled.

Both hold the run's row lock (``scan_control.run_status.lock_run``) while they decide,
mark the rows ``emitted_at`` with a guarded ``UPDATE`` (a second decider finds nothing
left to mark) and insert messages whose ids derive from rule, run and channel, which the
partial unique index ``uq_alert_deliveries_run_digest`` also keeps single: however the
runners race, a rule's run has one digest per channel.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.alerts import pending_searches
from app.alerts.links import console_link
from app.analysis.queue import run_awaits_analysis
from app.config import AlertSettings, Settings
from app.db import transaction
from app.observability import emit
from app.scan_control.run_status import FINISHED_RUN_STATUSES, RunState, lock_run, task_name

# Runs looked at per tick of the periodic job; the rest wait for the next tick.
RUNS_PER_TICK = 200

_EMIT = sa.text(
    """
    WITH due AS (
        UPDATE alert_run_digests
           SET emitted_at = now(), updated_at = now()
         WHERE run_id = :run_id AND emitted_at IS NULL
        RETURNING *
    )
    INSERT INTO alert_deliveries (id, rule_id, channel_id, owner_id, task_id, run_id,
                                  message_kind, event_type, payload)
    SELECT 'msg_' || md5(concat_ws(':', 'run_digest', d.rule_id, d.run_id, c.id)),
           r.id, c.id, r.owner_id, :task_id, d.run_id, 'digest', 'netmap.digest',
           jsonb_build_object(
               'rule', jsonb_build_object('id', r.id, 'name', r.name),
               'task_id', :task_id, 'task_name', CAST(:task_name AS text),
               'run_id', d.run_id,
               'run_number', CAST(:run_number AS integer),
               'run_status', CAST(:run_status AS text),
               'change_sets', d.executions,
               'folded', d.folded, 'total', d.total,
               'counts', jsonb_build_object('new', d.new, 'changed', d.changed,
                                            'gone', d.gone, 'reappeared', d.reappeared),
               'changes', d.changes,
               'more', d.total - jsonb_array_length(d.changes),
               'link', CAST(:link AS text))
      FROM due d
      -- A rule disabled before its run ended sends nothing more for it.
      JOIN alert_rules r ON r.id = d.rule_id AND r.enabled
      JOIN alert_channels c ON c.id = ANY(r.channel_ids) AND c.owner_id = r.owner_id
     -- An ``each`` rule's row holds only what its singles left over: often nothing.
     WHERE d.total > 0
    ON CONFLICT DO NOTHING
    RETURNING id
    """
)

# Runs that have ended with digests still unsent (few: normally the last analysis sent
# them); the statuses are scan_control's.
_DUE_RUNS = sa.text(
    """
    SELECT d.run_id
      FROM alert_run_digests d
      JOIN task_runs x ON x.id = d.run_id AND x.status = ANY(:finished)
     WHERE d.emitted_at IS NULL
     GROUP BY d.run_id
     ORDER BY d.run_id
     LIMIT :limit
    """
)


def run_changes_link(settings: AlertSettings, task_id: int, run_id: int) -> str:
    """Where a person reads the run's changes (the console's task changes page, that run)."""
    return console_link(settings, f"/tasks/{task_id}/changes?run={run_id}")


def run_is_done(conn: Connection, run: RunState, *, besides: int | None = None) -> bool:
    """Whether the run's digests may go now: it has ended, none of its executions (but
    ``besides``, the one whose change set the caller is committing) still awaits
    analysis, and none has search-filtered rules still to evaluate."""
    return (
        run.finished
        and not run_awaits_analysis(conn, run.id, besides=besides)
        and not pending_searches.run_awaits(conn, run.id)
    )


def emit_run_digests(conn: Connection, settings: AlertSettings, run: RunState) -> int:
    """Create the run's digest messages on ``conn``, whose transaction holds the run's
    lock and has checked that the run is over; returns how many were created."""
    made = conn.execute(
        _EMIT,
        {
            "run_id": run.id,
            "run_number": run.number,
            "run_status": run.status,
            "task_id": run.task_id,
            "task_name": task_name(conn, run.task_id),
            "link": run_changes_link(settings, run.task_id, run.id),
        },
    ).all()
    if made:
        emit("AlertRunDigestsCreated", run_id=run.id, task_id=run.task_id, messages=len(made))
    return len(made)


def _emit_if_over(settings: AlertSettings, run_id: int) -> int:
    """One run, in one short transaction: its digests, if it is over and nothing of it
    awaits analysis or a search-filtered rules' pass. A run an analysis holds now is
    skipped: that analysis decides."""
    with transaction() as conn:
        run = lock_run(conn, run_id, skip_locked=True)
        if run is None or not run_is_done(conn, run):
            return 0
        return emit_run_digests(conn, settings, run)


def send_finished_run_digests(settings: Settings) -> int:
    """One tick of the ``alert-run-digests`` job: the digests of runs that ended without
    a last analysis sending them. Returns the messages created."""
    with transaction() as conn:
        over = list(
            conn.execute(
                _DUE_RUNS, {"finished": list(FINISHED_RUN_STATUSES), "limit": RUNS_PER_TICK}
            ).scalars()
        )
    created = 0
    for run_id in over:
        try:
            created += _emit_if_over(settings.alerts, run_id)
        except Exception as exc:  # noqa: BLE001 - one run's failure must not hold the others
            emit(
                "AlertRunDigestFailed",
                level=logging.ERROR,
                run_id=run_id,
                error=f"{type(exc).__name__}: {exc}"[:300],
            )
    return created
