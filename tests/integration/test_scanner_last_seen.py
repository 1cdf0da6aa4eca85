"""Scanner authentication refreshes last_seen_at at most once per resolution window (IDN-4)."""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction
from app.identity.scanners import authenticate_scanner, create_scanner


def _last_seen(scanner_id: int):
    with transaction() as conn:
        return conn.execute(
            sa.text("SELECT last_seen_at FROM scanners WHERE id = :id"), {"id": scanner_id}
        ).scalar_one()


def test_authentication_touches_last_seen_once_per_window_and_always_answers(engine):
    with transaction() as conn:
        scanner, token = create_scanner(conn, "last-seen")
    assert _last_seen(scanner.id) is None

    with transaction() as conn:
        first = authenticate_scanner(conn, token)
    assert first is not None and first.id == scanner.id
    seen = _last_seen(scanner.id)
    assert seen is not None

    # Inside the window: still authenticated, the timestamp is left alone.
    with transaction() as conn:
        again = authenticate_scanner(conn, token)
    assert again is not None and again.id == scanner.id
    assert _last_seen(scanner.id) == seen

    # Due again: refreshed.
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE scanners SET last_seen_at = now() - interval '1 day' WHERE id = :id"),
            {"id": scanner.id},
        )
        assert authenticate_scanner(conn, token) is not None
    assert _last_seen(scanner.id) > seen

    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE scanners SET disabled = true WHERE id = :id"), {"id": scanner.id}
        )
        assert authenticate_scanner(conn, token) is None
        assert authenticate_scanner(conn, token[:-1] + "x") is None
