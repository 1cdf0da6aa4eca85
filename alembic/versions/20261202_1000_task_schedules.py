"""Task schedules: a task's runs started by cron or by interval (issue 33, docs/schedules.md).

Revision ID: 20261202_1000
Revises: 20261202_0960
Create Date: 2026-12-02

Owned by ``app/scan_control``:

* ``scan_task_schedules``: one schedule per task — a cron expression in a time zone or an
  interval in seconds, with ``start_at``, ``end_at``, ``jitter_seconds`` and ``paused``.
  ``next_fire_at`` is the next nominal fire time (NULL once ``end_at`` has passed) and
  ``due_at`` the moment the scheduler acts on it (the fire time plus this slot's jitter);
  an interval counts from ``anchor_at`` (``start_at``, or when the schedule was set).
* ``scan_schedule_slots``: one row per fire time the scheduler handled, ``started`` (with the
  run it started) or ``skipped`` (with the reason). The primary key ``(task_id, fire_at)``
  makes a second run for one fire time impossible: the slot row, the run and the schedule's
  advance commit in one transaction.
"""

from alembic import op

revision = "20261202_1000"
down_revision = "20261202_0960"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE scan_task_schedules (
    task_id        bigint      PRIMARY KEY REFERENCES scan_tasks (id) ON DELETE CASCADE,
    kind           text        NOT NULL CHECK (kind IN ('cron', 'interval')),
    cron           text,
    timezone       text,
    every_seconds  integer     CHECK (every_seconds > 0),
    start_at       timestamptz,
    end_at         timestamptz,
    jitter_seconds integer     NOT NULL DEFAULT 0 CHECK (jitter_seconds >= 0),
    anchor_at      timestamptz,
    paused         boolean     NOT NULL DEFAULT false,
    next_fire_at   timestamptz,
    due_at         timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'cron' AND cron IS NOT NULL AND timezone IS NOT NULL
            AND every_seconds IS NULL)
        OR (kind = 'interval' AND every_seconds IS NOT NULL AND cron IS NULL)),
    CHECK ((next_fire_at IS NULL) = (due_at IS NULL))
);
CREATE INDEX ix_scan_task_schedules_due ON scan_task_schedules (due_at)
    WHERE NOT paused AND due_at IS NOT NULL;

CREATE TABLE scan_schedule_slots (
    task_id     bigint      NOT NULL REFERENCES scan_tasks (id) ON DELETE CASCADE,
    fire_at     timestamptz NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('started', 'skipped')),
    reason      text,
    run_id      bigint      REFERENCES task_runs (id) ON DELETE SET NULL,
    caught_up   integer     NOT NULL DEFAULT 0 CHECK (caught_up >= 0),
    handled_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (task_id, fire_at),
    CHECK (outcome = 'started' OR reason IS NOT NULL)
);
CREATE UNIQUE INDEX uq_scan_schedule_slots_run ON scan_schedule_slots (run_id)
    WHERE run_id IS NOT NULL;
"""

DOWNGRADE = r"""
DROP TABLE scan_schedule_slots;
DROP TABLE scan_task_schedules;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
