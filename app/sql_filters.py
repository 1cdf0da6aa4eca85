"""A ``WHERE`` clause built from optional filters: fixed SQL fragments, bound values.

List and search queries take a handful of optional filters (an owner, a status, a
time range, a keyset cursor). Each present filter adds one fragment written in the
code, such as ``"t.port = :port"``, and binds its values under their own names; the
fragments are joined with ``AND``. Only those constant fragments ever reach the
SQL text (the explicit-SQL rule of docs/architecture.md); values always travel as
parameters, and binding one name to two different values is a programming error
caught here rather than a silently wrong query.
"""

from __future__ import annotations

from typing import Any


class Filters:
    """Conditions joined with ``AND`` and the parameters they bind."""

    def __init__(self, **params: Any):
        self._conditions: list[str] = []
        self.params: dict[str, Any] = {}
        self.bind(**params)

    def bind(self, **params: Any) -> Filters:
        """Bind parameters that are not filters (``limit``) or that a fragment shares."""
        for name, value in params.items():
            if name in self.params and self.params[name] != value:
                raise ValueError(f"parameter {name!r} is already bound to another value")
            self.params[name] = value
        return self

    def add(self, condition: str, **params: Any) -> Filters:
        """AND ``condition`` (a constant fragment) with the values it names."""
        self._conditions.append(condition)
        return self.bind(**params)

    def extend(self, other: Filters) -> Filters:
        """AND every condition of ``other`` (and bind its parameters)."""
        self._conditions.extend(other._conditions)
        return self.bind(**other.params)

    def __bool__(self) -> bool:
        return bool(self._conditions)

    def sql(self) -> str:
        """The conditions joined with ``AND``; ``TRUE`` when there are none."""
        return " AND ".join(self._conditions) or "TRUE"

    def where(self) -> str:
        """``WHERE`` and the conditions, or nothing when there are none."""
        return f"WHERE {self.sql()}" if self._conditions else ""
