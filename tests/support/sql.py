"""One-line reads of the test database for assertions (each in its own short transaction)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from app.db import transaction


def rows(sql: str, **params: Any) -> list[Any]:
    with transaction() as conn:
        return conn.execute(sa.text(sql), params).all()


def scalar(sql: str, **params: Any) -> Any:
    with transaction() as conn:
        return conn.execute(sa.text(sql), params).scalar()
