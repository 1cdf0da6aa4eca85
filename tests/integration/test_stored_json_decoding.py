"""json/jsonb columns come back through ``load_stored_json`` (``app.db.create_engine``)."""

from __future__ import annotations

import sqlalchemy as sa


def test_jsonb_and_json_columns_decode_exactly(engine):
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                'SELECT CAST(\'{"n": 123456789012345678901234567890, "f": 0.1, '
                '"s": "caf\\u00e9"}\' AS jsonb) AS b, '
                "CAST('[1, 2.5, \"x\", null, true]' AS json) AS j"
            )
        ).one()
    assert row.b == {"n": 123456789012345678901234567890, "f": 0.1, "s": "café"}
    assert isinstance(row.b["n"], int)
    assert row.j == [1, 2.5, "x", None, True]
