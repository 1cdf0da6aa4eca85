"""The search language (``app.search.query_language``) as an Elasticsearch query.

``query(node)`` spells a parsed tree in the query DSL over the endpoint mapping of
``app.search.elasticsearch_schema`` (certificate and HTTP facts under ``facts.*``,
indexed from ``details`` by ``app.search.endpoint_facts``). It answers exactly what
``app.search.postgres_language`` answers; the contract suite runs both.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.search.encoding import utc_text
from app.search.endpoint_facts import FACT_FIELDS, FACT_INDEX_NAMES
from app.search.postgres_language import time_text
from app.search.query_language import And, Clause, Node, Not, Or, Text

_RANGE = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}
# ``date_nanos`` holds 1970-01-01 to 2262-04-11: a bound beyond is clamped to the edge,
# which selects the same stored instants and is never refused.
_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(2262, 4, 11, tzinfo=UTC)


def wildcard_text(text: str) -> str:
    """``*text*`` with the wildcard's own characters escaped (control characters dropped,
    as ``like_pattern`` drops them in SQL)."""
    cleaned = "".join(ch for ch in text if ch >= " ")
    escaped = cleaned.replace("\\", "\\\\").replace("*", "\\*").replace("?", "\\?")
    return f"*{escaped}*"


def _substring(field: str, text: str) -> dict[str, Any]:
    return {"wildcard": {field: {"value": wildcard_text(text), "case_insensitive": True}}}


def _keyword(field: str, value: Any) -> dict[str, Any]:
    return {"term": {field: {"value": value, "case_insensitive": True}}}


def _clamped(moment: datetime) -> str:
    return utc_text(min(max(moment, _EARLIEST), _LATEST))


def _range(field: str, c: Clause, spell=lambda v: v) -> dict[str, Any]:
    if c.until is not None:
        return {"range": {field: {"gte": spell(c.value), "lt": spell(c.until)}}}
    if c.op == "=":
        return {"term": {field: spell(c.value)}}
    return {"range": {field: {_RANGE[c.op]: spell(c.value)}}}


def clause(c: Clause, status: str | None = None) -> dict[str, Any]:
    """One clause; ``status`` (``open`` | ``gone``), when given, is the status every asset
    is taken to have: a ``status:`` clause is then true or false whatever is stored."""
    field = c.field
    if field in ("ip", "net"):
        return {"term": {"ip": c.value}}
    if field == "port":
        return _range("port", c)
    if field in ("transport", "state"):
        return {"term": {field: c.value}}
    if field == "status" and status is not None:
        return {"match_all": {}} if c.value == status else {"match_none": {}}
    if field == "status":
        # A document the analysis never touched has no status field: it is open.
        if c.value == "gone":
            return {"term": {"status": "gone"}}
        return {"bool": {"must_not": [{"term": {"status": "gone"}}]}}
    if field in ("service", "product", "version", "hostname"):
        return _keyword(field, c.value)
    if field == "banner":
        return _substring("banner", c.value)
    if field == "tag":
        return {"term": {"tags": c.value}}
    if field in ("first_seen", "last_seen"):
        return _range(field, c, _clamped)
    if field in FACT_FIELDS:
        name = "facts." + FACT_INDEX_NAMES[field]
        kind = FACT_FIELDS[field][2]
        if kind == "text":
            return _substring(name, c.value)
        if kind in ("keyword", "list"):
            # Stored lower-case (endpoint_facts), so a lower-case term is exact.
            return {"term": {name: c.value.lower()}}
        if kind in ("fingerprint", "boolean"):
            return {"term": {name: c.value}}
        if kind == "time":
            return _range(name, c, time_text)
        if kind == "count":
            return _range(name, c)
    raise ValueError(f"no query for field {field!r}")


def query(node: Node, *, status: str | None = None) -> dict[str, Any]:
    """The DSL query of a parsed tree; ``status`` as for ``clause``."""
    if isinstance(node, And):
        return {"bool": {"filter": [query(n, status=status) for n in node.nodes]}}
    if isinstance(node, Or):
        return {
            "bool": {
                "should": [query(n, status=status) for n in node.nodes],
                "minimum_should_match": 1,
            }
        }
    if isinstance(node, Not):
        return {"bool": {"must_not": [query(node.node, status=status)]}}
    if isinstance(node, Text):
        return {
            "bool": {
                "should": [
                    _substring(name, node.text) for name in ("banner", "product", "hostname")
                ],
                "minimum_should_match": 1,
            }
        }
    return clause(node, status)
