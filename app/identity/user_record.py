"""A user as the rest of the server sees it, and how a ``users`` row becomes one.

Kept apart from ``users`` (which ends sessions when a password changes) so that
``sessions`` can map the user of a session without importing ``users``: no import loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class User:
    id: int
    username: str
    is_admin: bool
    disabled: bool

    def public(self) -> dict[str, Any]:
        return {"id": self.id, "username": self.username, "is_admin": self.is_admin}


def _row_to_user(row: Any) -> User:
    return User(id=row.id, username=row.username, is_admin=row.is_admin, disabled=row.disabled)
