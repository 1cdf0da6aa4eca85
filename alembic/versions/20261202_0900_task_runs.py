"""Task runs: a task's executions come in runs, started again and again (issue 33).

Revision ID: 20261202_0900
Revises: 20261202_0810
Create Date: 2026-12-02

Owned by ``app/scan_control``:

* ``task_runs``: one pass over a task's targets and ports (``number`` 1, 2, … per task),
  with its status (``queued`` | ``running`` | ``succeeded`` | ``partial`` | ``failed`` |
  ``cancelled``) and what started it (``manual`` | ``schedule`` | ``import``). At most one
  run of a task is active (queued or running): a partial unique index says so, so two
  concurrent starts cannot both succeed.
* ``scan_executions.run_id``: the run an execution belongs to. Existing executions become
  run 1 of their task, its status derived from theirs. An execution inserted without a
  run (fixtures, benchmarks seeding scratch databases) joins its task's newest run, or a
  new run 1 (trigger ``scan_executions_default_run``).
* ``scan_executions.status`` and ``scan_tasks.status`` gain ``cancelled``.
* ``scan_tasks.scan`` (false: an import-only task, nothing is queued) and
  ``scan_tasks.deleted_at`` (a deleted task is hidden at once; its purge removes it).
* ``task_purges``: the background purge of a deleted task, leased (``claim_token``,
  ``lease_expires_at``) and resumable (``phase``, ``cursor``); kept after the task is
  gone to report its status.
* An index for the purge: the search store's execution endpoints by endpoint (is it
  some other task's evidence too?).
"""

from alembic import op

revision = "20261202_0900"
down_revision = "20261202_0810"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE task_runs (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id        bigint      NOT NULL REFERENCES scan_tasks (id) ON DELETE CASCADE,
    number         integer     NOT NULL CHECK (number >= 1),
    status         text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'succeeded', 'partial', 'failed', 'cancelled')),
    trigger        text        NOT NULL
        CHECK (trigger IN ('manual', 'schedule', 'import')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    started_at     timestamptz,
    finished_at    timestamptz,
    cancelled_by   bigint,
    CONSTRAINT uq_task_runs_number UNIQUE (task_id, number)
);
CREATE UNIQUE INDEX uq_task_runs_one_active ON task_runs (task_id)
    WHERE status IN ('queued', 'running');
CREATE INDEX ix_task_runs_finished ON task_runs (task_id, finished_at DESC, id DESC)
    WHERE finished_at IS NOT NULL;

ALTER TABLE scan_tasks
    ADD COLUMN scan       boolean     NOT NULL DEFAULT true,
    ADD COLUMN deleted_at timestamptz;
ALTER TABLE scan_tasks DROP CONSTRAINT scan_tasks_status_check;
ALTER TABLE scan_tasks ADD CONSTRAINT scan_tasks_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'partially_failed', 'failed',
                      'cancelled'));

ALTER TABLE scan_executions DROP CONSTRAINT scan_executions_status_check;
ALTER TABLE scan_executions ADD CONSTRAINT scan_executions_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled'));
ALTER TABLE scan_executions ADD COLUMN run_id bigint REFERENCES task_runs (id) ON DELETE CASCADE;

-- Existing executions become run 1 of their task.
INSERT INTO task_runs (task_id, number, status, trigger, created_at, started_at, finished_at)
SELECT t.id, 1,
       CASE WHEN s.statuses IS NULL OR s.statuses <@ ARRAY['queued'] THEN
                CASE WHEN s.statuses IS NULL THEN 'succeeded' ELSE 'queued' END
            WHEN s.statuses && ARRAY['queued', 'running'] THEN 'running'
            WHEN s.statuses <@ ARRAY['succeeded'] THEN 'succeeded'
            WHEN s.statuses <@ ARRAY['failed'] THEN 'failed'
            ELSE 'partial' END,
       'manual', t.created_at, s.started_at,
       CASE WHEN s.statuses IS NULL THEN t.created_at
            WHEN s.statuses && ARRAY['queued', 'running'] THEN NULL
            ELSE coalesce(s.finished_at, t.finished_at, t.updated_at) END
  FROM scan_tasks t
  LEFT JOIN LATERAL (
      SELECT array_agg(DISTINCT e.status) AS statuses, min(e.started_at) AS started_at,
             max(e.finished_at) AS finished_at
        FROM scan_executions e WHERE e.task_id = t.id
      HAVING count(*) > 0
  ) s ON true;
UPDATE scan_executions e SET run_id = r.id FROM task_runs r WHERE r.task_id = e.task_id;
ALTER TABLE scan_executions ALTER COLUMN run_id SET NOT NULL;
CREATE INDEX ix_scan_executions_run ON scan_executions (run_id, id);

CREATE FUNCTION scan_executions_default_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.run_id IS NULL THEN
        SELECT id INTO NEW.run_id FROM task_runs
         WHERE task_id = NEW.task_id ORDER BY number DESC LIMIT 1;
        IF NEW.run_id IS NULL THEN
            INSERT INTO task_runs (task_id, number, status, trigger)
            VALUES (NEW.task_id, 1, 'queued', 'manual')
            RETURNING id INTO NEW.run_id;
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER scan_executions_default_run BEFORE INSERT ON scan_executions
    FOR EACH ROW EXECUTE FUNCTION scan_executions_default_run();

CREATE TABLE task_purges (
    task_id          bigint      PRIMARY KEY,
    owner_id         bigint      NOT NULL,
    status           text        NOT NULL DEFAULT 'queued'
        CHECK (status IN ('queued', 'running', 'done')),
    phase            text        NOT NULL DEFAULT 'assets',
    claim_token      uuid,
    lease_expires_at timestamptz,
    attempts         integer     NOT NULL DEFAULT 0,
    available_at     timestamptz NOT NULL DEFAULT now(),
    cursor           bigint,
    removed          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE INDEX ix_task_purges_claimable ON task_purges (available_at)
    WHERE status <> 'done';

-- The purge asks "did any other task see this endpoint?" per endpoint of the task.
CREATE INDEX ix_search_execution_endpoints_endpoint
    ON search_execution_endpoints (ip_order, port, transport);
"""

DOWNGRADE = r"""
DROP INDEX ix_search_execution_endpoints_endpoint;
DROP TABLE task_purges;
DELETE FROM scan_tasks WHERE deleted_at IS NOT NULL;
DROP TRIGGER scan_executions_default_run ON scan_executions;
DROP FUNCTION scan_executions_default_run();
DELETE FROM scan_executions e USING task_runs r WHERE r.id = e.run_id AND r.number > 1;
ALTER TABLE scan_executions DROP COLUMN run_id;
UPDATE scan_executions SET status = 'failed' WHERE status = 'cancelled';
ALTER TABLE scan_executions DROP CONSTRAINT scan_executions_status_check;
ALTER TABLE scan_executions ADD CONSTRAINT scan_executions_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'failed'));
UPDATE scan_tasks SET status = 'failed' WHERE status = 'cancelled';
ALTER TABLE scan_tasks DROP CONSTRAINT scan_tasks_status_check;
ALTER TABLE scan_tasks ADD CONSTRAINT scan_tasks_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'partially_failed', 'failed'));
ALTER TABLE scan_tasks DROP COLUMN deleted_at, DROP COLUMN scan;
DROP TABLE task_runs;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
