"""Upload streams: per-(execution, upload, stream) counters kept by triggers (ING-5).

Revision ID: 20261130_0041
Revises: 20261130_0040
Create Date: 2026-11-30

The identity and final checks read only ``scan_upload_stream`` rows of one
execution instead of scanning its receipts. Triggers maintain the rows in the
same transaction as every receipt INSERT and pending→confirmed UPDATE (a
repeated confirm changes nothing, so it counts nothing); receipt identity,
batch index, final flag, checksum and observation count are immutable; a
DELETE marks the stream dirty and the next upload repairs just that stream.

Existing receipts are backfilled once under a lock that keeps writers out; the
``schema_markers`` row records that, so a re-applied revision skips the work.
"""

from alembic import op

revision = "20261130_0041"
down_revision = "20261130_0040"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE schema_markers (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

LOCK TABLE scan_upload_receipts IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE scan_upload_stream (
    execution_id           bigint      NOT NULL REFERENCES scan_executions (id) ON DELETE CASCADE,
    upload_id              text        NOT NULL,
    stream                 text        NOT NULL,
    batch_count            integer     NOT NULL DEFAULT 0,
    confirmed_count        integer     NOT NULL DEFAULT 0,
    pending_count          integer     NOT NULL DEFAULT 0,
    min_batch              integer,
    max_batch              integer,
    final_count            integer     NOT NULL DEFAULT 0,
    final_batch            integer,
    confirmed_observations bigint      NOT NULL DEFAULT 0,
    dirty                  boolean     NOT NULL DEFAULT false,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (execution_id, upload_id, stream)
);

-- Recompute one stream from its receipts (repair after deletes; also the backfill rule).
CREATE OR REPLACE FUNCTION scan_upload_stream_repair(p_execution bigint, p_upload text, p_stream text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM scan_upload_stream
     WHERE execution_id = p_execution AND upload_id = p_upload AND stream = p_stream;
    INSERT INTO scan_upload_stream (execution_id, upload_id, stream, batch_count, confirmed_count,
                                    pending_count, min_batch, max_batch, final_count, final_batch,
                                    confirmed_observations)
    SELECT execution_id, upload_id, stream, count(*),
           count(*) FILTER (WHERE status = 'confirmed'),
           count(*) FILTER (WHERE status = 'pending'),
           min(batch_index), max(batch_index),
           count(*) FILTER (WHERE is_final),
           max(batch_index) FILTER (WHERE is_final),
           COALESCE(sum(observation_count) FILTER (WHERE status = 'confirmed'), 0)
      FROM scan_upload_receipts
     WHERE execution_id = p_execution AND upload_id = p_upload AND stream = p_stream
     GROUP BY execution_id, upload_id, stream;
END $$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM schema_markers WHERE name = 'scan_upload_stream_backfill_v1') THEN
        INSERT INTO scan_upload_stream (execution_id, upload_id, stream, batch_count,
                                        confirmed_count, pending_count, min_batch, max_batch,
                                        final_count, final_batch, confirmed_observations)
        SELECT execution_id, upload_id, stream, count(*),
               count(*) FILTER (WHERE status = 'confirmed'),
               count(*) FILTER (WHERE status = 'pending'),
               min(batch_index), max(batch_index),
               count(*) FILTER (WHERE is_final),
               max(batch_index) FILTER (WHERE is_final),
               COALESCE(sum(observation_count) FILTER (WHERE status = 'confirmed'), 0)
          FROM scan_upload_receipts
         GROUP BY execution_id, upload_id, stream
        ON CONFLICT (execution_id, upload_id, stream) DO NOTHING;
        INSERT INTO schema_markers (name) VALUES ('scan_upload_stream_backfill_v1');
    END IF;
END $$;

CREATE OR REPLACE FUNCTION scan_upload_receipt_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.execution_id IS DISTINCT FROM OLD.execution_id
       OR NEW.upload_id IS DISTINCT FROM OLD.upload_id
       OR NEW.stream IS DISTINCT FROM OLD.stream
       OR NEW.batch_index IS DISTINCT FROM OLD.batch_index
       OR NEW.is_final IS DISTINCT FROM OLD.is_final
       OR NEW.checksum IS DISTINCT FROM OLD.checksum
       OR NEW.observation_count IS DISTINCT FROM OLD.observation_count THEN
        RAISE EXCEPTION 'upload receipt identity, batch index, final flag, checksum and '
                        'observation count are immutable'
              USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.status = 'confirmed' AND NEW.status <> 'confirmed' THEN
        RAISE EXCEPTION 'a confirmed upload receipt cannot return to pending'
              USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION scan_upload_stream_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO scan_upload_stream AS s (execution_id, upload_id, stream, batch_count,
                                         confirmed_count, pending_count, min_batch, max_batch,
                                         final_count, final_batch, confirmed_observations)
    VALUES (NEW.execution_id, NEW.upload_id, NEW.stream, 1,
            (NEW.status = 'confirmed')::int, (NEW.status = 'pending')::int,
            NEW.batch_index, NEW.batch_index,
            NEW.is_final::int, CASE WHEN NEW.is_final THEN NEW.batch_index END,
            CASE WHEN NEW.status = 'confirmed' THEN NEW.observation_count ELSE 0 END)
    ON CONFLICT (execution_id, upload_id, stream) DO UPDATE SET
        batch_count            = s.batch_count + 1,
        confirmed_count        = s.confirmed_count + EXCLUDED.confirmed_count,
        pending_count          = s.pending_count + EXCLUDED.pending_count,
        min_batch              = LEAST(s.min_batch, EXCLUDED.min_batch),
        max_batch              = GREATEST(s.max_batch, EXCLUDED.max_batch),
        final_count            = s.final_count + EXCLUDED.final_count,
        final_batch            = COALESCE(EXCLUDED.final_batch, s.final_batch),
        confirmed_observations = s.confirmed_observations + EXCLUDED.confirmed_observations,
        updated_at             = now();
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION scan_upload_stream_on_confirm() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE scan_upload_stream
       SET pending_count = pending_count - 1,
           confirmed_count = confirmed_count + 1,
           confirmed_observations = confirmed_observations + NEW.observation_count,
           updated_at = now()
     WHERE execution_id = NEW.execution_id AND upload_id = NEW.upload_id AND stream = NEW.stream;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION scan_upload_stream_on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE scan_upload_stream SET dirty = true, updated_at = now()
     WHERE execution_id = OLD.execution_id AND upload_id = OLD.upload_id AND stream = OLD.stream;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS scan_upload_receipt_guard ON scan_upload_receipts;
CREATE TRIGGER scan_upload_receipt_guard
    BEFORE UPDATE ON scan_upload_receipts
    FOR EACH ROW EXECUTE FUNCTION scan_upload_receipt_guard();

DROP TRIGGER IF EXISTS scan_upload_stream_on_insert ON scan_upload_receipts;
CREATE TRIGGER scan_upload_stream_on_insert
    AFTER INSERT ON scan_upload_receipts
    FOR EACH ROW EXECUTE FUNCTION scan_upload_stream_on_insert();

DROP TRIGGER IF EXISTS scan_upload_stream_on_confirm ON scan_upload_receipts;
CREATE TRIGGER scan_upload_stream_on_confirm
    AFTER UPDATE OF status ON scan_upload_receipts
    FOR EACH ROW WHEN (OLD.status = 'pending' AND NEW.status = 'confirmed')
    EXECUTE FUNCTION scan_upload_stream_on_confirm();

DROP TRIGGER IF EXISTS scan_upload_stream_on_delete ON scan_upload_receipts;
CREATE TRIGGER scan_upload_stream_on_delete
    AFTER DELETE ON scan_upload_receipts
    FOR EACH ROW EXECUTE FUNCTION scan_upload_stream_on_delete();
"""

DOWNGRADE = r"""
DROP TRIGGER IF EXISTS scan_upload_stream_on_delete ON scan_upload_receipts;
DROP TRIGGER IF EXISTS scan_upload_stream_on_confirm ON scan_upload_receipts;
DROP TRIGGER IF EXISTS scan_upload_stream_on_insert ON scan_upload_receipts;
DROP TRIGGER IF EXISTS scan_upload_receipt_guard ON scan_upload_receipts;
DROP FUNCTION IF EXISTS scan_upload_stream_on_delete();
DROP FUNCTION IF EXISTS scan_upload_stream_on_confirm();
DROP FUNCTION IF EXISTS scan_upload_stream_on_insert();
DROP FUNCTION IF EXISTS scan_upload_receipt_guard();
DROP FUNCTION IF EXISTS scan_upload_stream_repair(bigint, text, text);
DROP TABLE IF EXISTS scan_upload_stream;
DELETE FROM schema_markers WHERE name = 'scan_upload_stream_backfill_v1';
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM schema_markers) THEN
        DROP TABLE schema_markers;
    END IF;
END $$;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
