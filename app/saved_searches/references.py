"""A saved search (or a query of its own) as another domain's filter: alert rules and
report definitions (docs/inventory.md, "Saved searches as filters and scopes").

One shape everywhere: ``{"search": <saved search id>}`` or ``{"query": "<search
language>"}``, never both. ``search`` is a reference: the rule or report reads the saved
search's query whenever it is evaluated, so editing the search changes what they match,
and a search that is referenced cannot be deleted (409 ``in_use``, see ``records.delete``).
``query`` is the holder's own copy. Both are checked when written: a query must parse
(400 ``invalid_query`` naming the field), a search must be the owner's (404
``search_not_found`` naming the field; another user's search is not found, as in
``/api/searches``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from app.errors import NotFound, ValidationError
from app.saved_searches import records
from app.search.query_language import MAX_QUERY_CHARS, parse_body_query

MAX_ID = 2**63 - 1


def checked(search: Any, query: Any, *, prefix: str) -> tuple[int | None, str | None]:
    """``(search_id, query)`` read from a request (each may be absent: ``None``); 400 naming
    ``<prefix>.search`` or ``<prefix>.query`` when a value is wrong."""
    if search is not None and query is not None:
        raise ValidationError(
            f"give {prefix}.search or {prefix}.query, not both",
            code="validation_failed",
            details={"field": f"{prefix}.search"},
        )
    if search is not None:
        if isinstance(search, bool) or not isinstance(search, int) or not 1 <= search <= MAX_ID:
            raise ValidationError(
                f"{prefix}.search must be the id of one of your saved searches",
                code="validation_failed",
                details={"field": f"{prefix}.search"},
            )
        return search, None
    if query is not None:
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
            raise ValidationError(
                f"{prefix}.query must be a search-language query of 1 to "
                f"{MAX_QUERY_CHARS} characters",
                code="invalid_query",
                details={"field": f"{prefix}.query"},
            )
        parse_body_query(query, field=f"{prefix}.query")
        return None, query
    return None, None


def check_owned(conn: Connection, owner_id: int, search_id: int, *, field: str) -> None:
    """404 ``search_not_found`` naming ``field`` unless the search is the owner's."""
    if records.get(conn, owner_id, search_id) is None:
        raise NotFound(
            f"saved search {search_id} not found",
            code="search_not_found",
            details={"field": field},
        )
