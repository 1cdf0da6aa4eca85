"""The search language (``app.search.query_language``) as a PostgreSQL condition.

``condition(node)`` spells a parsed tree over an asset view aliased ``t``. Only
constant fragments of this module reach the SQL text; every value is a bound
parameter named ``qN``. A negation is ``(…) IS NOT TRUE``, so a row whose field is
missing (NULL) is one that does not match, as ``must_not`` treats a missing field in
Elasticsearch; the contract suite (tests/integration/search/test_search_language_contract.py)
runs the same queries on both stores.
"""

from __future__ import annotations

import itertools
from typing import Any

from app.search.endpoint_facts import FACT_FIELDS, FACT_SQL, MAX_TEXT
from app.search.postgres_schema import (
    ASSET_TABLES,
    ASSET_TEXTS_TABLE,
    FACT_TEXT_KEYS,
    TEXT_EXPRESSION,
    TEXT_ID_EXPRESSION,
)
from app.search.postgres_values import (
    distinct_text_contains,
    ip_order_range,
    ip_order_text,
    like_pattern,
    same_family,
    searched_text,
)
from app.search.query_language import And, Clause, Node, Not, Or, Text, free_texts

_COMPARISONS = {"=": "=", ">": ">", ">=": ">=", "<": "<", "<=": "<="}
_KEYWORD_COLUMNS = {
    "service": "t.service",
    "product": "t.product",
    "version": "t.version",
    "hostname": "t.hostname",
}
_TIME_COLUMNS = {"first_seen": "t.first_seen", "last_seen": "t.last_seen"}


# A text fact clause's (certificate issuer or subject, page title or server) matching
# distinct values (``FACT_TEXTS_TABLE`` numbers), looked up before the statement is spelled
# (``postgres_queries.matching_fact_text_ids``); a clause without an entry is spelled as
# the expression's own ILIKE.
FactTextIds = dict[tuple[str, str], tuple[int, ...]]
# A free text's matching distinct texts (``ASSET_TEXTS_TABLE`` keys), looked up the same way
# (``postgres_queries.matching_language_text_ids``); a text without an entry is spelled as
# a subquery of the texts table.
TextIds = dict[str, tuple[str, ...]]
# Free texts a large share of the view's rows hold (``postgres_text_share``), spelled as
# the row's own text instead: a page that walks the view tests the row it read rather
# than probing the texts table for each.
CommonTexts = frozenset[str]


def own_text_contains(pattern: str) -> str:
    """SQL: the view row's own text (``TEXT_EXPRESSION``, unaliased, as the statistics of
    migration 2500 name it) holds the value (``pattern``: its bound ``like_pattern``)."""
    return f"({TEXT_EXPRESSION} ILIKE {pattern})"


class _Spell:
    def __init__(
        self,
        status: str = "t.status",
        fact_ids: FactTextIds | None = None,
        text_ids: TextIds | None = None,
        common_texts: CommonTexts = frozenset(),
    ) -> None:
        self.params: dict[str, Any] = {}
        self._names = itertools.count()
        self.status = status
        self.fact_ids = fact_ids or {}
        self.text_ids = text_ids or {}
        self.common_texts = common_texts

    def bind(self, value: Any) -> str:
        name = f"q{next(self._names)}"
        self.params[name] = value
        return f":{name}"

    def node(self, node: Node) -> str:
        if isinstance(node, And):
            return "(" + " AND ".join(self.node(n) for n in node.nodes) + ")"
        if isinstance(node, Or):
            return "(" + " OR ".join(self.node(n) for n in node.nodes) + ")"
        if isinstance(node, Not):
            return f"(({self.node(node.node)}) IS NOT TRUE)"
        if isinstance(node, Text):
            # The row's text key among the matching distinct texts (migration 0170), as the
            # ``q`` filter has always been read: named outright where looked up (through the
            # texts' chunks, migration 2400), else a subquery; or, for a common text, the
            # row's own text, which holds the same answer.
            if node.text in self.common_texts:
                return own_text_contains(self.bind(like_pattern(node.text)))
            ids = self.text_ids.get(node.text)
            if ids is not None:
                if not ids:
                    return "(FALSE)"
                return f"({TEXT_ID_EXPRESSION} = ANY(CAST({self.bind(list(ids))} AS uuid[])))"
            return (
                f"({TEXT_ID_EXPRESSION} IN (SELECT x.id FROM {ASSET_TEXTS_TABLE} x "  # noqa: S608 - module constants; the value is bound
                "WHERE "
                + distinct_text_contains(
                    "x.text",
                    self.bind(like_pattern(node.text)),
                    self.bind(searched_text(node.text)),
                    grams=None,
                )
                + "))"
            )
        return self.clause(node)

    def clause(self, c: Clause) -> str:
        field, op = c.field, _COMPARISONS[c.op]
        # ``ip_order`` is ``ip`` with IPv4 spelled as IPv4-mapped IPv6: equal ``ip_order``
        # and family is equal ``ip``, a block's ``ip_order`` range and family is ``<<=``.
        if field == "ip":
            order = self.bind(ip_order_text(c.value))
            return f"(t.ip_order = CAST({order} AS inet) AND {same_family('t.ip', c.value)})"
        if field == "net":
            first, last = ip_order_range(c.value)
            return (
                f"(t.ip_order BETWEEN CAST({self.bind(first)} AS inet) "
                f"AND CAST({self.bind(last)} AS inet) AND {same_family('t.ip', c.value)})"
            )
        if field == "port":
            return f"(t.port {op} {self.bind(c.value)})"
        if field == "status":
            return f"({self.status} = {self.bind(c.value)})"
        if field in ("transport", "state"):
            return f"(t.{field} = {self.bind(c.value)})"
        if field in _KEYWORD_COLUMNS:
            return f"(lower({_KEYWORD_COLUMNS[field]}) = lower({self.bind(c.value)}))"
        if field == "banner":
            return f"(t.banner ILIKE {self.bind(like_pattern(c.value))})"
        if field == "tag":
            return f"({self.bind(c.value)} = ANY(t.tags))"
        if field in _TIME_COLUMNS:
            column = _TIME_COLUMNS[field]
            if c.until is not None:
                return f"({column} >= {self.bind(c.value)} AND {column} < {self.bind(c.until)})"
            return f"({column} {op} {self.bind(c.value)})"
        if field in FACT_FIELDS:
            return self.fact(c)
        raise ValueError(f"no SQL for field {field!r}")

    def fact(self, c: Clause) -> str:
        kind = FACT_FIELDS[c.field][2]
        expression = FACT_SQL[c.field]
        op = _COMPARISONS[c.op]
        if kind == "text":
            ids = self.fact_ids.get((c.field, c.value))
            if ids is not None:
                # The rows whose value is one of the matching distinct values (migrations
                # 1610, 1800, 2200): the number's index finds a rare one, the column's
                # statistics tell a common one.
                if not ids:
                    return "(FALSE)"
                key = FACT_TEXT_KEYS[c.field]
                return f"({key} = ANY(CAST({self.bind(list(ids))} AS bigint[])))"
            # Estimated from the expression's statistics (migration 1100).
            return f"({expression} ILIKE {self.bind(like_pattern(c.value))})"
        if kind == "keyword":
            return f"({expression} = lower({self.bind(c.value)}))"
        if kind == "fingerprint":
            return f"({expression} = {self.bind(c.value)})"
        if kind == "list":
            return (
                f"(EXISTS (SELECT 1 FROM jsonb_array_elements({expression}) e "  # noqa: S608 - module constants; the value is bound
                "WHERE jsonb_typeof(e) = 'string' "
                f"AND length(e #>> '{{}}') <= {MAX_TEXT} "
                f"AND lower(e #>> '{{}}') = lower({self.bind(c.value)})))"
            )
        if kind == "time":
            if c.until is not None:
                low, high = self.bind(time_text(c.value)), self.bind(time_text(c.until))
                return f"({expression} >= {low} AND {expression} < {high})"
            return f"({expression} {op} {self.bind(time_text(c.value))})"
        if kind in ("boolean", "count"):
            return f"({expression} {op} {self.bind(c.value)})"
        raise ValueError(kind)


def time_text(moment: Any) -> str:
    """A bound in the fixed-width UTC text stored certificate times compare as."""
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
        f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    )


def condition(
    node: Node,
    *,
    status: str = "t.status",
    fact_ids: FactTextIds | None = None,
    text_ids: TextIds | None = None,
    common_texts: CommonTexts = frozenset(),
) -> tuple[str, dict[str, Any]]:
    """The SQL condition of a parsed tree and the parameters it binds (``q0``, ``q1``…).
    ``status``: the SQL the ``status`` field reads (a constant fragment of the caller's);
    ``fact_ids``: the text fact clauses' matching value keys, ``text_ids``: the free
    texts' matching text keys, where looked up; ``common_texts``: free texts tested on the
    row's own text."""
    spell = _Spell(status, fact_ids, text_ids, common_texts)
    sql = spell.node(node)
    return sql, spell.params


# Up to this many caller rows, ``asset_match`` tests each row's own asset, a cost that
# follows the rows whatever the estate; beyond it the planner chooses, as for a search.
# Why this many: a few microseconds per row keep such a set within tens of milliseconds,
# and a set several times larger is cheaper joined to the owner's assets once, for all
# but the common words (docs/performance.md, "Alert rules' search filters").
PER_ROW_MAX = 20_000


def tests_each_row(rows: int | None) -> bool:
    """Whether ``asset_match`` spells a caller's ``rows`` rows as a test of each row's own
    asset (else the planner chooses, and common words are the caller's to name)."""
    return rows is not None and rows <= PER_ROW_MAX


def asset_match(
    node: Node,
    *,
    endpoint: str,
    status: str,
    rows: int | None = None,
    common_texts: CommonTexts = frozenset(),
) -> tuple[str, dict[str, Any]]:
    """SQL: the current asset of owner ``:owner_id`` at the endpoint of row ``endpoint``
    (its ``ip``, ``port``, ``transport``) matches the tree, ``status`` standing for the
    asset's status. For callers that test other rows against the language inside their
    own statement (the alert rules' search filters, ``SearchStore`` capability
    ``ASSET_CONDITIONS_IN_DATABASE``). The asset is found by the ordering index
    ``(owner_id, ip_order, port, transport)``; ``endpoint`` and ``status`` are the
    caller's constant fragments.

    ``rows``: how many rows the caller tests, where known. Up to ``PER_ROW_MAX`` each row
    tests its one asset alone, so the work follows the rows, not the estate: free texts
    are tested on the asset's own text (the same answer as its key among the distinct
    texts, which are written for every view row and never deleted) rather than by a
    subquery of the texts, whose cost grows with the estate, and the subquery keeps
    ``OFFSET 0``, without which the planner may turn the ``EXISTS`` into a join that
    reads every asset of the owner. More rows (or an unknown number) are left to the
    planner, which may join them to the owner's assets: then ``common_texts`` (free
    texts the view's statistics call common, as a search reads them) are tested on each
    asset's own text, since a join reads most assets anyway, and every other free text
    is a subquery of the distinct texts, which finds a rare one's few assets at once."""
    per_row = tests_each_row(rows)
    common = frozenset(free_texts(node)) if per_row else common_texts
    sql, params = condition(node, status=status, common_texts=common)
    ip_order = (
        f"CASE WHEN family({endpoint}.ip) = 4 THEN ('::ffff:' || host({endpoint}.ip))::inet "
        f"ELSE {endpoint}.ip END"
    )
    return (
        f"EXISTS (SELECT 1 FROM {ASSET_TABLES['user']} t WHERE t.owner_id = :owner_id "  # noqa: S608 - constants and the caller's constant fragments; values are bound
        f"AND t.ip_order = {ip_order} AND t.port = {endpoint}.port "
        f"AND t.transport = {endpoint}.transport AND t.ip = {endpoint}.ip AND {sql}"
        f"{' OFFSET 0' if per_row else ''})",
        params,
    )
