"""The saved searches the console's rule and report forms offer, and a form's choice (a
saved search or a query of its own) as the API's ``{"search": id}`` / ``{"query": …}``
(app.saved_searches.references)."""

from __future__ import annotations

from typing import Any

from app.parameters import decimal_int
from app.saved_searches import service as saved_searches

# How many of one's saved searches a form offers, oldest first.
SEARCH_CHOICES = 200


def saved_search_choices(owner_id: int) -> list[Any]:
    """The user's saved searches a form offers as a filter or scope (by id)."""
    rows, _more = saved_searches.list_searches(owner_id, limit=SEARCH_CHOICES, after_id=None)
    return rows


def form_id(text: str) -> int | str:
    """A form's id field as a number; anything else is passed on for the validation to
    refuse, naming its field."""
    try:
        return decimal_int(text)
    except ValueError:
        return text


def search_reference(form: dict[str, str]) -> dict[str, Any] | None:
    """A form's saved-search choice or query as the API's ``{"search"}``/``{"query"}``."""
    chosen, query = form["search"].strip(), form["query"].strip()
    reference: dict[str, Any] = {}
    if chosen:
        reference["search"] = form_id(chosen)
    if query:
        # Both given: passed on for the API's check to refuse at the field ("not both");
        # keeping one of them silently saved another filter than the one typed.
        reference["query"] = query
    return reference or None
