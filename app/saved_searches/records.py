"""The ``saved_searches`` table: create, list, read, rename/re-query and delete, owner-scoped.

A saved search is a name and a query of the search language
(docs/search-language.md), checked when it is saved so that a stored query always
parses. Every statement is short and names the owner, so one user never sees or
changes another's searches (an admin included: saved searches are personal).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from psycopg2.errors import ForeignKeyViolation
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from app.errors import Conflict, ValidationError
from app.json_input import checked_object, has_control_characters
from app.search.query_language import MAX_QUERY_CHARS, parse_body_query

MAX_NAME = 100
_COLUMNS = "id, owner_id, name, query, created_at, updated_at"


def search_dict(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "query": row.query,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
    }


def validate(body: Any, *, partial: bool = False) -> dict[str, str]:
    """``name`` and ``query`` of a request body; a query that does not parse is a 400
    naming its column (``invalid_query``)."""
    checked_object(body, {"name", "query"})
    values: dict[str, str] = {}
    # In a partial update a field given is checked (null included: it cannot clear a
    # name or a query); only a field left out is kept.
    name = body.get("name")
    if "name" in body or not partial:
        if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_NAME:
            raise ValidationError(
                f"name must be 1 to {MAX_NAME} characters",
                code="invalid_name",
                details={"field": "name"},
            )
        if has_control_characters(name):
            raise ValidationError(
                "name must not hold control characters",
                code="invalid_name",
                details={"field": "name"},
            )
        values["name"] = name.strip()
    query = body.get("query")
    if "query" in body or not partial:
        if (
            not isinstance(query, str)
            or not query.strip()
            or len(query) > MAX_QUERY_CHARS
            or has_control_characters(query)
        ):
            raise ValidationError(
                f"query must be a search-language query of 1 to {MAX_QUERY_CHARS} characters "
                "on one line",
                code="invalid_query",
                details={"field": "query"},
            )
        parse_body_query(query, field="query")
        values["query"] = query
    return values


def _duplicate(name: str) -> Conflict:
    return Conflict(
        f"you already have a saved search named {name!r}",
        code="duplicate_name",
        details={"field": "name"},
    )


def create(conn: Connection, owner_id: int, values: dict[str, str]) -> Any:
    try:
        with conn.begin_nested():
            return conn.execute(
                sa.text(
                    "INSERT INTO saved_searches (owner_id, name, query) "  # noqa: S608 - fixed column list
                    f"VALUES (:owner_id, :name, :query) RETURNING {_COLUMNS}"
                ),
                {"owner_id": owner_id, **values},
            ).one()
    except IntegrityError:
        raise _duplicate(values["name"]) from None


def list_for(conn: Connection, owner_id: int, *, limit: int, after_id: int | None) -> list[Any]:
    return list(
        conn.execute(
            sa.text(
                f"SELECT {_COLUMNS} FROM saved_searches WHERE owner_id = :owner_id "  # noqa: S608 - fixed column list
                "AND (CAST(:after AS bigint) IS NULL OR id > :after) ORDER BY id LIMIT :limit"
            ),
            {"owner_id": owner_id, "after": after_id, "limit": limit},
        )
    )


def get(conn: Connection, owner_id: int, search_id: int) -> Any | None:
    return conn.execute(
        sa.text(f"SELECT {_COLUMNS} FROM saved_searches WHERE id = :id AND owner_id = :owner_id"),  # noqa: S608 - fixed column list
        {"id": search_id, "owner_id": owner_id},
    ).one_or_none()


def update(conn: Connection, owner_id: int, search_id: int, values: dict[str, str]) -> Any | None:
    if not values:
        return get(conn, owner_id, search_id)
    sets = ", ".join(f"{name} = :{name}" for name in sorted(values))  # names from validate()
    try:
        with conn.begin_nested():
            return conn.execute(
                sa.text(
                    f"UPDATE saved_searches SET {sets}, updated_at = now() "  # noqa: S608 - column names come from validate(); values are bound
                    f"WHERE id = :id AND owner_id = :owner_id RETURNING {_COLUMNS}"
                ),
                {"id": search_id, "owner_id": owner_id, **values},
            ).one_or_none()
    except IntegrityError:
        raise _duplicate(values.get("name", "")) from None


# The foreign keys that hold a saved search (migration 1600) and what the user calls them.
_USERS_OF = {
    "fk_alert_rules_search": "an alert rule",
    "fk_report_definitions_search": "a report definition",
}


def delete(conn: Connection, owner_id: int, search_id: int) -> bool:
    """Delete one of the owner's searches; 409 ``in_use`` while an alert rule or report
    definition refers to it (their foreign keys refuse the delete: no check-then-act race
    with a rule being saved at the same moment)."""
    try:
        with conn.begin_nested():
            deleted = conn.execute(
                sa.text("DELETE FROM saved_searches WHERE id = :id AND owner_id = :owner_id"),
                {"id": search_id, "owner_id": owner_id},
            ).rowcount
    except IntegrityError as exc:
        if not isinstance(exc.orig, ForeignKeyViolation):
            raise
        holder = _USERS_OF.get(
            str(exc.orig.diag.constraint_name), "an alert rule or report definition"
        )
        raise Conflict(
            f"the saved search is used by {holder}; change or delete that first",
            code="in_use",
            details={"search_id": search_id, "used_by": holder},
        ) from None
    return deleted == 1


def queries_of(conn: Connection, search_ids: list[int]) -> dict[int, str]:
    """The current query of each saved search (for the rules and reports that use them)."""
    rows = conn.execute(
        sa.text("SELECT id, query FROM saved_searches WHERE id = ANY(:ids)"),
        {"ids": list(search_ids)},
    )
    return {row.id: row.query for row in rows}
