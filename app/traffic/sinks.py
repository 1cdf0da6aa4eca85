"""Where published rows go: the ``RowSink`` port and the database sink (TRF-6).

The rollup hands each batch of changed rows to a sink and clears the rows'
dirty marks only after ``write`` returned, so a failed write is retried by the
next run. ``DatabaseRowSink`` validates and upserts into ``traffic_rollups`` in
one short transaction per batch (the runner, and the CLI without
``--endpoint``); ``remote.RemoteRowSink`` posts batches to
``POST /api/traffic/rollups`` (the CLI on an nginx host).
"""

from __future__ import annotations

from typing import Protocol


class SinkError(Exception):
    """Rows could not be delivered; their dirty marks stay for the next run."""


class RowSink(Protocol):
    # Declared by every sink: True when its rows go to this PostgreSQL (so a store that
    # ``publishes_in_database`` may write them in SQL instead of calling ``write``).
    writes_database: bool

    def write(self, rows: list[dict]) -> int:
        """Deliver rows; returns how many the receiver accepted."""
        ...


class DatabaseRowSink:
    # With the PostgreSQL checkpoint store, the rollup writes rows in SQL instead (no
    # row leaves the database); ``write`` serves every other store.
    writes_database = True

    def __init__(self) -> None:
        self.written = 0  # rows whose stored values actually changed

    def write(self, rows: list[dict]) -> int:
        # Imported here: the standalone command (remote sink) needs no database driver.
        from app.db import transaction
        from app.traffic.rows import upsert_rows, validate_rows

        records = validate_rows(rows, max_rows=len(rows))
        with transaction() as conn:
            self.written += upsert_rows(conn, records)
        return len(records)
