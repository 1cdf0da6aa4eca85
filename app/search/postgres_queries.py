"""Reads of the PostgreSQL search store: projection pages, counts, results, asset search.

Every read is one short transaction through the adapter's ``run``
(``PostgresStore._run``). Lists page by keyset with the opaque cursors of
``app.cursors`` (same kinds and positions as the Elasticsearch adapter);
filter values are read by ``app.search.query_values``, so both adapters answer
bad input with the same 400s. Addresses are ordered by ``ip_order`` (IPv4 as
IPv4-mapped IPv6, like Elasticsearch's ``ip`` type), then port, transport; asset
lists may put another sort key first (``SORT_COLUMNS``, WEB-12).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.errors import ValidationError
from app.observability import stage
from app.search.aggregates import UNKNOWN_SERVICE, ExecutionAggregates, hour_text
from app.search.asset_sort import (
    AssetPosition,
    asset_sort,
    decode_asset_cursor,
    encode_asset_cursor,
    from_micros,
    has_key,
    sort_key,
)
from app.search.documents import EndpointDocument
from app.search.encoding import parse_utc
from app.search.endpoint_facts import FACT_SQL
from app.search.ids import normalise_ip
from app.search.port import (
    ASSET_STATUS_FILTERS,
    FACET_FIELDS,
    AssetAggregates,
    AssetFacets,
    AssetPage,
    AssetQuery,
    ExecutionCounts,
    ResultsPage,
    StorageScope,
)
from app.search.postgres_grams import (
    CHUNKINGS,
    GRAMINGS,
    Chunking,
    chunking_for,
    grams_for,
    particular_chunks,
    particular_grams,
)
from app.search.postgres_language import (
    CommonTexts,
    FactTextIds,
    TextIds,
    own_text_contains,
)
from app.search.postgres_language import condition as language_condition
from app.search.postgres_schema import (
    ASSET_TABLES,
    ASSET_TEXTS_TABLE,
    ENDPOINT_COUNTS_TABLE,
    EXECUTION_IPS_TABLE,
    EXECUTION_TABLE,
    FACT_COUNTS_TABLE,
    FACT_TEXT_KEYS,
    FACT_TEXTS_TABLE,
    SELECT_ENDPOINT,
    SELECT_STATUS,
    TEXT_ID_EXPRESSION,
    id_after_cursor,
    month_bounds,
)
from app.search.postgres_text_share import common_texts
from app.search.postgres_values import (
    distinct_text_contains,
    ip_order_range,
    ip_order_text,
    like_pattern,
    same_family,
    searched_text,
)
from app.search.query_language import Clause, Node, free_texts, walk
from app.search.query_values import invalid_parameter, query_cidr, query_ip
from app.search.results_cursor import (
    ResultsPosition,
    decode_results_cursor,
    encode_results_cursor,
)
from app.sql_filters import Filters

# ``PostgresStore._run``: ``run(work)`` runs ``work(conn)`` in one short transaction.
Run = Callable[..., Any]


# One keyset page of an execution's endpoints, in the order of its primary key
# ``(execution_id, id)`` (``postgres_schema.id_after_cursor``).
EXECUTION_PAGE = f"""
    SELECT {SELECT_ENDPOINT}, t.owner_id, t.execution_id, t.task_id
      FROM {EXECUTION_TABLE} t
     WHERE t.execution_id = :execution_id
       AND {id_after_cursor("t.id")}
     ORDER BY t.id
     LIMIT :limit
"""  # noqa: S608 - table and column names are module constants; values are bound


class PostgresQueries:
    """The read half of ``PostgresStore`` (``run`` is its ``_run``)."""

    def __init__(self, run: Run):
        self._run = run

    def read_execution_endpoints(
        self, execution_id: int, *, after_id: str | None, limit: int
    ) -> list[EndpointDocument]:
        sql = sa.text(EXECUTION_PAGE)
        params = {"execution_id": execution_id, "after": after_id, "limit": limit}
        rows = self._run(lambda conn: conn.execute(sql, params).all())
        return endpoints_from_rows(rows, "execution")

    def count(self, scope: StorageScope, execution_id: int) -> ExecutionCounts:
        """Exact counts read from the counters the writes keep (O(months), not O(rows)).

        Facts are summed over the scope's months, like the Elasticsearch count request
        over the scope's monthly indices; a legacy scope counts every month.
        """
        if scope.empty:
            return ExecutionCounts(observations=0, endpoints=0, ips=0)
        params: dict[str, Any] = {"execution_id": execution_id, "months": None}
        if not scope.legacy_full_history:
            params["months"] = [month_bounds(m)[0].date() for m in sorted(set(scope.months))]
        sql = sa.text(
            f"""
            SELECT f.observations, f.dns_records,
                   coalesce(e.endpoints, 0) AS endpoints, coalesce(e.ips, 0) AS ips
              FROM (SELECT coalesce(sum(facts) FILTER (WHERE kind = 'observation'), 0)
                             AS observations,
                           coalesce(sum(facts) FILTER (WHERE kind = 'dns_record'), 0)
                             AS dns_records
                      FROM {FACT_COUNTS_TABLE}
                     WHERE execution_id = :execution_id
                       AND (CAST(:months AS date[]) IS NULL
                            OR month = ANY(CAST(:months AS date[])))) f
              LEFT JOIN {ENDPOINT_COUNTS_TABLE} e ON e.execution_id = :execution_id
            """  # noqa: S608 - table and column names are module constants; values are bound
        )
        with stage("count_execution_observation_chunk"):
            row = self._run(lambda conn: conn.execute(sql, params).one())
        return ExecutionCounts(
            observations=int(row.observations),
            endpoints=int(row.endpoints),
            ips=int(row.ips),
            dns_records=int(row.dns_records),
        )

    def execution_results(
        self,
        task_id: int,
        *,
        cursor: str | None,
        limit: int,
        execution_ids: Sequence[int] | None = None,
    ) -> ResultsPage:
        """One page of at most ``limit`` endpoints of a task (of ``execution_ids`` only,
        when given: one run's), by (ip_order, port, transport, execution_id) after the
        cursor's position.

        The page is one range of ``ix_search_execution_endpoints_task_order`` read up to
        ``limit + 1`` entries, whatever the planner believes about the task: a running
        task is newer than the last ANALYZE, estimated at one row, and a plan that
        depends on that estimate (the earlier IP-page subquery) re-ran per row, or read
        and sorted the whole execution (``RESULTS_PAGE_PLANNING``).
        """
        position = decode_results_cursor(cursor)

        def page(conn: Connection) -> tuple[list[Any], int | None, int]:
            total_endpoints = None
            ids = list(execution_ids) if execution_ids is not None else None
            if position is None:
                total_endpoints, total_ips = task_result_totals(conn, task_id, ids)
            else:
                total_ips = position.total_ips
            params: dict[str, Any] = {"task_id": task_id, "limit": limit + 1}
            after = ""
            if ids is not None:
                after = RESULTS_OF_EXECUTIONS
                params["execution_ids"] = ids
            if position is not None:
                after += RESULTS_AFTER
                params.update(
                    c_ip=ip_order_text(position.ip),
                    c_port=position.port,
                    c_transport=position.transport,
                    c_execution=position.execution_id,
                )
            conn.execute(sa.text(RESULTS_PAGE_PLANNING))  # the page's last statement
            rows = conn.execute(sa.text(RESULTS_PAGE.format(after=after)), params).all()
            return rows, total_endpoints, total_ips

        rows, total_endpoints, total_ips = self._run(page)
        next_cursor = None
        if len(rows) > limit:
            # One row more than the page holds, only to learn that another page exists.
            rows = rows[:limit]
            last = rows[-1]
            next_cursor = encode_results_cursor(
                ResultsPosition(
                    ip=normalise_ip(last.ip),
                    port=last.port,
                    transport=last.transport,
                    execution_id=last.execution_id,
                    total_ips=total_ips,
                )
            )
        return ResultsPage(
            items=endpoints_from_rows(rows, "execution"),
            next_cursor=next_cursor,
            total_endpoints=total_endpoints,
            total_ips=total_ips,
        )

    def search_assets(self, query: AssetQuery) -> AssetPage:
        order = asset_sort(query.sort, query.order)

        def page(conn: Connection) -> list[Any]:
            statement = looked_up_statement(conn, query)
            if statement is None:
                return []  # no text in either view matches: nothing to read
            sql, params = statement
            return conn.execute(sa.text(sql), params).all()

        rows = self._run(page, time_limit_ms=query.time_limit_ms)
        next_cursor = None
        if len(rows) > query.limit:
            rows = rows[: query.limit]
            last = rows[-1]
            next_cursor = encode_asset_cursor(
                order,
                AssetPosition(
                    key=sort_key(order.sort, last.last_seen, last.service),
                    ip=last.ip_order,
                    port=last.port,
                    transport=last.transport,
                ),
            )
        return AssetPage(items=endpoints_from_rows(rows, query.scope), next_cursor=next_cursor)

    def asset_facets(self, query: AssetQuery, *, size: int, sample: int) -> AssetFacets:
        """Facets over the first ``sample`` matching assets in address order (one range of
        the ordering index, then a sort of at most ``sample`` rows per field)."""
        sampled_query = replace(query, cursor=None, sort="ip", order="asc", limit=sample)

        # Only the columns the facets read: a sample of thousands of rows would otherwise
        # carry every banner and document along.
        rows = self._run(
            lambda conn: _grouped(
                conn, sampled_query, FACET_COLUMNS, FACETS, "@sample@", facet_size=size
            ),
            time_limit_ms=query.time_limit_ms,
        )
        found: dict[str, list[tuple[object, int]]] = {name: [] for name in FACET_FIELDS}
        sampled = 0
        for row in rows:
            if row.facet == "":
                sampled = int(row.count)
            else:
                found[row.facet].append(
                    (row.number if row.facet == "port" else row.value, int(row.count))
                )
        return AssetFacets(sampled=min(sampled, sample), capped=sampled > sample, facets=found)

    def asset_aggregates(self, query: AssetQuery, *, top: int) -> AssetAggregates:
        """Exact report aggregates over every asset the search finds (one statement: the
        matching rows' few columns once, then a count and a grouped list each)."""
        everything = replace(query, cursor=None, sort="ip", order="asc", limit=ALL_ROWS)

        rows = self._run(
            lambda conn: _grouped(
                conn,
                everything,
                AGGREGATE_COLUMNS,
                ASSET_AGGREGATES,
                "@assets@",
                top=top,
                unknown=UNKNOWN_SERVICE,
            )
        )
        endpoints = ips = 0
        services, products, ports, hours = [], [], [], []
        for row in rows:
            if row.list == "total":
                endpoints, ips = int(row.n), int(row.ips)
            elif row.list == "service":
                services.append({"name": row.name, "count": int(row.n)})
            elif row.list == "product":
                products.append({"name": row.name, "count": int(row.n)})
            elif row.list == "port":
                ports.append({"port": row.port, "transport": row.transport, "count": int(row.n)})
            else:
                hours.append({"hour": hour_text(row.hour), "count": int(row.n)})
        return AssetAggregates(
            endpoints=endpoints,
            ips=ips,
            lists=ExecutionAggregates(
                services=services,
                products=products,
                ports=ports,
                first_seen_hours=sorted(hours, key=lambda h: h["hour"]),
            ),
        )

    def count_current_assets(self, *, owner_id: int | None, cap: int) -> int:
        """Open current assets of one owner (or all, ``owner_id`` None), up to ``cap + 1``.

        A bounded count for page views (the console's dashboard): it reads at most
        ``cap + 1`` index entries whatever the size of the set, so the caller shows
        "more than cap" instead of paying for an exact count over millions of rows.
        """
        if owner_id is None:
            sql = (
                f"SELECT count(*) FROM (SELECT 1 FROM {ASSET_TABLES['global']} "  # noqa: S608 - table name is a module constant
                "WHERE status = 'open' LIMIT :cap) s"
            )
            params: dict[str, Any] = {"cap": cap + 1}
        else:
            sql = (
                f"SELECT count(*) FROM (SELECT 1 FROM {ASSET_TABLES['user']} "  # noqa: S608 - table name is a module constant
                "WHERE owner_id = :owner_id AND status = 'open' LIMIT :cap) s"
            )
            params = {"cap": cap + 1, "owner_id": owner_id}
        return int(self._run(lambda conn: conn.execute(sa.text(sql), params).scalar_one()))


# One page of a task's results: a range of ix_search_execution_endpoints_task_order
# (task_id, ip_order, port, transport, execution_id) read in index order and cut by
# LIMIT. No subquery, DISTINCT or sort, so the plan is the same at one row or millions
# (the planner's estimate for a task newer than the last ANALYZE is one row). ``after``
# is RESULTS_AFTER on every page but the first: one row comparison over the index's
# columns, so the page starts inside the index.
RESULTS_PAGE = f"""
    SELECT {SELECT_ENDPOINT}, t.owner_id, t.execution_id, t.task_id
      FROM {EXECUTION_TABLE} t
     WHERE t.task_id = :task_id{{after}}
     ORDER BY t.ip_order, t.port, t.transport, t.execution_id
     LIMIT :limit
"""  # noqa: S608 - table and column names are module constants; values are bound
RESULTS_OF_EXECUTIONS = " AND t.execution_id = ANY(:execution_ids)"
# Run before RESULTS_PAGE in its transaction. The page is always one ordered range of
# ix_search_execution_endpoints_task_order, but an execution newer than the last ANALYZE
# (every new run's, and ANALYZE comes rarely to a table of millions) is estimated at one
# row, and for one row reading it through (execution_id, id) and sorting looks as cheap:
# that read and sorted the whole execution for every page. Sorting priced out, the
# planner takes the ordered range; it may still sort where nothing else answers.
RESULTS_PAGE_PLANNING = "SET LOCAL enable_sort = off"
RESULTS_AFTER = (
    " AND (t.ip_order, t.port, t.transport, t.execution_id)"
    " > (CAST(:c_ip AS inet), :c_port, :c_transport, :c_execution)"
)

# A task's exact totals from the counters every execution-endpoint merge keeps in the
# same statement as its rows (so one snapshot sees rows and counters agree):
# endpoints are the sum over the task's executions; addresses are the single
# execution's count, or distinct over the (execution, ip) set when several executions
# may have seen the same address. Neither reads the task's endpoint rows.
RESULT_TOTALS = f"""
    WITH executions AS (
        SELECT execution_id, endpoints, ips FROM {ENDPOINT_COUNTS_TABLE}
         WHERE task_id = :task_id
           AND (CAST(:execution_ids AS bigint[]) IS NULL
                OR execution_id = ANY(CAST(:execution_ids AS bigint[])))
    )
    SELECT coalesce(sum(endpoints), 0) AS endpoints,
           CASE WHEN count(*) <= 1 THEN coalesce(sum(ips), 0)
                ELSE (SELECT count(DISTINCT i.ip) FROM {EXECUTION_IPS_TABLE} i
                       WHERE i.execution_id IN (SELECT execution_id FROM executions))
           END AS ips
      FROM executions
"""  # noqa: S608 - table and column names are module constants; values are bound


def task_result_totals(
    conn: Connection, task_id: int, execution_ids: list[int] | None = None
) -> tuple[int, int]:
    """(endpoints, distinct addresses) of a task's execution endpoints (ING-10), of
    ``execution_ids`` only when given."""
    row = conn.execute(
        sa.text(RESULT_TOTALS), {"task_id": task_id, "execution_ids": execution_ids}
    ).one()
    return int(row.endpoints), int(row.ips)


# Facets of one search: the sampled rows (the search's own page statement, ``sample + 1``
# rows, so one more than the sample tells that more matched) grouped per field. Values
# order by count, then byte order ("C"), as Elasticsearch orders terms buckets.
_ISSUER = FACT_SQL["cert.issuer"]
FACET_COLUMNS = f"t.service, t.product, t.port, t.transport, {_ISSUER} AS issuer, t.ip_order"
FACETS = (
    "WITH s AS MATERIALIZED (@sample@), "
    "c AS (SELECT * FROM s t ORDER BY t.ip_order, t.port, t.transport LIMIT :limit - 1) "
    "SELECT '' AS facet, NULL AS value, NULL::integer AS number, (SELECT count(*) FROM s) AS count "
    "UNION ALL (SELECT 'service', t.service, NULL, count(*) FROM c t WHERE t.service IS NOT NULL "
    'GROUP BY t.service ORDER BY count(*) DESC, t.service COLLATE "C" LIMIT :facet_size) '
    "UNION ALL (SELECT 'product', t.product, NULL, count(*) FROM c t WHERE t.product IS NOT NULL "
    'GROUP BY t.product ORDER BY count(*) DESC, t.product COLLATE "C" LIMIT :facet_size) '
    "UNION ALL (SELECT 'port', NULL, t.port, count(*) FROM c t "
    "GROUP BY t.port ORDER BY count(*) DESC, t.port LIMIT :facet_size) "
    "UNION ALL (SELECT 'cert.issuer', t.issuer, NULL, count(*) FROM c t "
    "WHERE t.issuer IS NOT NULL "
    'GROUP BY t.issuer ORDER BY count(*) DESC, t.issuer COLLATE "C" LIMIT :facet_size)'
)

# Report aggregates of the assets a search finds (``asset_aggregates``): the rows' few
# columns once, then the lists ranked as ``app.search.aggregates`` ranks them (ties in
# code-point order, hours in UTC).
ALL_ROWS = 2**62
AGGREGATE_COLUMNS = "t.ip, t.port, t.transport, t.service, t.product, t.first_seen"
ASSET_AGGREGATES = (
    "WITH s AS MATERIALIZED (@assets@) "
    "SELECT 'total' AS list, NULL AS name, NULL::integer AS port, NULL AS transport, "
    "NULL::timestamptz AS hour, count(*) AS n, count(DISTINCT s.ip) AS ips FROM s "
    "UNION ALL (SELECT 'service', coalesce(s.service, :unknown), NULL, NULL, NULL, count(*), "
    "NULL FROM s GROUP BY coalesce(s.service, :unknown) "
    'ORDER BY count(*) DESC, coalesce(s.service, :unknown) COLLATE "C" LIMIT :top) '
    "UNION ALL (SELECT 'product', s.product, NULL, NULL, NULL, count(*), NULL FROM s "
    "WHERE s.product IS NOT NULL GROUP BY s.product "
    'ORDER BY count(*) DESC, s.product COLLATE "C" LIMIT :top) '
    "UNION ALL (SELECT 'port', NULL, s.port, s.transport, NULL, count(*), NULL FROM s "
    'GROUP BY s.port, s.transport ORDER BY count(*) DESC, s.port, s.transport COLLATE "C" '
    "LIMIT :top) "
    "UNION ALL (SELECT 'hour', NULL, NULL, NULL, date_trunc('hour', s.first_seen, 'UTC'), "
    "count(*), NULL FROM s GROUP BY date_trunc('hour', s.first_seen, 'UTC'))"
)

# Matching texts a search names outright (see matching_text_ids); beyond this many it
# leaves the texts to a subquery.
TEXT_IDS_CAP = 1000
# Text fact values (certificate, HTTP) a search names outright (see
# matching_fact_text_ids); beyond this many it leaves the clause to the expression's own
# ILIKE.
FACT_TEXT_IDS_CAP = 1000


_CHUNK_PARAMS = tuple(f":chunks{part}" for part in range(5))


def _lookup(select: str, table: str, **pieces: Any) -> sa.TextClause:
    """The lookup of a value among ``table``'s distinct texts: through an index of their
    pieces (``pieces``: the condition's bound arrays and how they are cut; see
    ``text_lookup``), or, with none, through their trigrams."""
    contains = distinct_text_contains("text", ":text", ":value", **pieces)
    return sa.text(
        f"SELECT {select} FROM {table} WHERE {contains} LIMIT :cap"  # noqa: S608 - module constants; values are bound
    )


# By the chunking whose index a free text's lookup reads (None: the trigrams).
MATCHING_TEXT_IDS = {
    None: _lookup("CAST(id AS text)", ASSET_TEXTS_TABLE),
    **{
        c: _lookup(
            "CAST(id AS text)", ASSET_TEXTS_TABLE, chunks=_CHUNK_PARAMS, chunked_by=c.function
        )
        for c in CHUNKINGS
    },
}
# By the grams whose index a fact value's lookup reads (None: the trigrams).
MATCHING_FACT_TEXT_IDS = {
    None: _lookup("number", FACT_TEXTS_TABLE),
    **{
        g: _lookup("number", FACT_TEXTS_TABLE, grams=":grams", grammed_by=g.function)
        for g in GRAMINGS
    },
}


def by_pieces(table: str, text: str) -> bool:
    """Whether ``table``'s lookup of ``text`` reads an index of pieces: a free text long
    enough for the chunks (``postgres_grams.chunking_for``), a text fact value long
    enough for the grams (``postgres_grams.grams_for``: five or more characters)."""
    if table == ASSET_TEXTS_TABLE:
        return chunking_for(searched_text(text)) is not None
    return grams_for(searched_text(text)) is not None


def text_lookup(
    conn: Connection, table: str, text: str, cap: int
) -> tuple[sa.TextClause, dict[str, Any]]:
    """The statement that looks ``text`` up among ``table``'s distinct texts, at most
    ``cap`` rows, and its parameters: by the pieces ``postgres_grams`` picks where the
    value is long enough (``by_pieces``) and its folded form has them, else by trigrams."""
    value = searched_text(text)
    if table == ASSET_TEXTS_TABLE:
        return chunk_lookup(conn, chunking_for(value), text, cap)
    params = {"text": like_pattern(text), "value": value, "cap": cap}
    grams = grams_for(value)
    pieces = particular_grams(conn, grams, value) if grams else []
    if not pieces:
        return MATCHING_FACT_TEXT_IDS[None], params
    return MATCHING_FACT_TEXT_IDS[grams], {**params, "grams": pieces}


def chunk_lookup(
    conn: Connection, chunking: Chunking | None, text: str, cap: int
) -> tuple[sa.TextClause, dict[str, Any]]:
    """The statement that looks the free text ``text`` up among the distinct texts through
    ``chunking``'s index (the pieces ``postgres_grams`` keeps), at most ``cap`` rows, and
    its parameters; through the trigrams with no chunking, or when the folded value has
    no piece at some alignment."""
    value = searched_text(text)
    params = {"text": like_pattern(text), "value": value, "cap": cap}
    chunks = particular_chunks(conn, chunking, value) if chunking else None
    if not chunks:
        return MATCHING_TEXT_IDS[None], params
    pieces = {f"chunks{part}": kept for part, kept in enumerate(chunks)}
    return MATCHING_TEXT_IDS[chunking], {**params, **pieces}


def _distinct_text_keys(conn: Connection, table: str, text: str, cap: int) -> tuple | None:
    """The keys of ``table``'s distinct texts that contain ``text``; None beyond ``cap``."""
    statement, params = text_lookup(conn, table, text, cap + 1)
    found = tuple(conn.execute(statement, params).scalars())
    return None if len(found) > cap else found


def matching_text_ids(conn: Connection, text: str) -> tuple[str, ...] | None:
    """The keys of the asset texts that ``text`` matches; ``None``: more than the cap.

    A text search reads the distinct texts first (their chunk or trigram index,
    migrations 2400 and 1900) and then asks the view for rows with one of those keys.
    Naming the keys outright lets the planner weigh each one by the view's statistics of
    its text index: a text on a handful of rows is read through that index, a text on
    half the view by walking the page's order and filtering. A join to the texts table
    would be planned with the average rows per text instead, the same for a rare text
    and a common one.
    """
    return _distinct_text_keys(conn, ASSET_TEXTS_TABLE, text, TEXT_IDS_CAP)


def matching_fact_text_ids(conn: Connection, node: Node | None) -> FactTextIds:
    """The numbers of the distinct values each ``cert.issuer``/``cert.subject`` clause
    (migration 1610) and ``title``/``server`` clause (migration 1800) of the tree
    matches, as ``matching_text_ids`` does for free text: named outright, each number is
    weighed by the view's statistics of its column (migration 2200), so a rare value is
    an index lookup and a common one is read in page order. A clause matching more than
    the cap is left out (the expression's ILIKE decides it)."""
    found: FactTextIds = {}
    for clause in walk(node):
        if not isinstance(clause, Clause) or clause.field not in FACT_TEXT_KEYS:
            continue
        wanted = (clause.field, clause.value)
        if wanted in found:
            continue
        keys = _distinct_text_keys(conn, FACT_TEXTS_TABLE, clause.value, FACT_TEXT_IDS_CAP)
        if keys is not None:
            found[wanted] = keys
    return found


def matching_language_text_ids(
    conn: Connection, node: Node | None, *, common: CommonTexts = frozenset()
) -> TextIds:
    """The keys of the asset texts each free text of the tree that is looked up by its
    chunks matches (``matching_text_ids``), for those that match at most the cap. A
    shorter text stays a subquery: through the trigrams a common one would be read up to
    the cap first, only to be left to the subquery. The ``common`` texts are not looked
    up: each row's own text is tested instead."""
    found: TextIds = {}
    for text in free_texts(node):
        if text in common or not by_pieces(ASSET_TEXTS_TABLE, text):
            continue
        keys = matching_text_ids(conn, text)
        if keys is not None:
            found[text] = keys
    return found


def looked_up_statement(
    conn: Connection, query: AssetQuery, *, select: str | None = None
) -> tuple[str, dict[str, Any]] | None:
    """``asset_search_statement`` after the lookups of distinct values it names (the free
    text's, the text fact clauses'); None when the free text matches no text at all.
    Free texts the view's statistics call common (``postgres_text_share``) are not looked
    up: each row's own text is tested."""
    texts = free_texts(query.where)  # type: ignore[arg-type]
    if query.text:
        texts.add(query.text)
    table = ASSET_TABLES.get(query.scope)  # an unknown scope: asset_search_statement's 400
    common = common_texts(conn, table, texts) if table else frozenset()
    text_ids = None
    if query.text and query.text not in common:
        text_ids = matching_text_ids(conn, query.text)
        if text_ids == ():
            return None
    fact_ids = matching_fact_text_ids(conn, query.where)  # type: ignore[arg-type]
    language_text_ids = matching_language_text_ids(conn, query.where, common=common)  # type: ignore[arg-type]
    return asset_search_statement(
        query,
        text_ids=text_ids,
        select=select,
        fact_ids=fact_ids,
        language_text_ids=language_text_ids,
        common_texts=common,
    )


def _grouped(
    conn: Connection, query: AssetQuery, select: str, template: str, slot: str, **extra: Any
) -> list[Any]:
    """The rows of ``template`` (facets, aggregates) with the search's statement, reading
    only ``select``, in its ``slot``; none when the free text matches no text."""
    statement = looked_up_statement(conn, query, select=select)
    if statement is None:
        return []
    sql, params = statement
    return conn.execute(sa.text(template.replace(slot, sql)), {**params, **extra}).all()


def asset_search_statement(
    query: AssetQuery,
    *,
    text_ids: Sequence[str] | None = None,
    select: str | None = None,
    fact_ids: FactTextIds | None = None,
    language_text_ids: TextIds | None = None,
    common_texts: CommonTexts = frozenset(),
) -> tuple[str, dict[str, Any]]:
    """The SQL (and parameters) of one asset-search page; one row more than the page.

    ``text_ids``: with a ``text`` filter, the keys ``matching_text_ids`` found, or
    ``None`` to match the texts in a subquery instead. ``select``: the columns to read
    instead of whole documents (the facets read a few). ``fact_ids``: the text fact
    clauses' value keys (``matching_fact_text_ids``), else their expressions' ILIKE;
    ``language_text_ids``: the search language's free texts' keys
    (``matching_language_text_ids``), else a subquery of the texts. ``common_texts``: free
    texts (``text`` or the language's) tested on each row's own text instead."""
    table = ASSET_TABLES.get(query.scope)
    if table is None:
        raise ValidationError(f"unknown asset scope {query.scope!r}", code="invalid_parameter")
    where = Filters(limit=query.limit + 1)
    if query.scope == "user":
        if query.owner_id is None:
            raise ValueError("a user-scope asset search needs owner_id")
        where.add("t.owner_id = :owner_id", owner_id=query.owner_id)
    if query.ip:
        ip = query_ip(query.ip)
        # By ip_order, so the ordering index finds it; with the family, exactly the address.
        where.add("t.ip_order = CAST(:ip_order AS inet)", ip_order=ip_order_text(ip))
        where.add(same_family("t.ip", ip))
    if query.cidr:
        cidr = query_cidr(query.cidr)
        # ip <<= cidr as the block's ip_order range and family (``ip_order_range``): the
        # range's share of the view comes from ip_order's statistics alone.
        where.add(same_family("t.ip", cidr))
        first, last = ip_order_range(cidr)
        where.add(
            "t.ip_order BETWEEN CAST(:cidr_first AS inet) AND CAST(:cidr_last AS inet)",
            cidr_first=first,
            cidr_last=last,
        )
    if query.port is not None:
        where.add("t.port = :port", port=query.port)
    if query.transport:
        where.add("t.transport = :transport", transport=query.transport.lower())
    if query.service:
        where.add("lower(t.service) = lower(:service)", service=query.service)
    if query.product:
        where.add("lower(t.product) = lower(:product)", product=query.product)
    if query.text:
        # Rows whose text is one of the matching distinct texts (migration 0170): the
        # key is the md5 of the row's own text, so a row matches exactly when its text
        # does, without testing the text again (which the planner would count twice). A
        # common text is tested on the row's own text alone (postgres_text_share).
        if query.text in common_texts:
            where.add(own_text_contains(":text"), text=like_pattern(query.text))
        elif text_ids is not None:
            where.add(
                f"{TEXT_ID_EXPRESSION} = ANY(CAST(:text_ids AS uuid[]))", text_ids=list(text_ids)
            )
        else:
            where.add(
                f"{TEXT_ID_EXPRESSION} IN (SELECT x.id FROM {ASSET_TEXTS_TABLE} x "  # noqa: S608 - module constants; values are bound
                f"WHERE {distinct_text_contains('x.text', ':text', ':text_value', grams=None)})",
                text=like_pattern(query.text),
                text_value=searched_text(query.text),
            )
    if query.where is not None:
        language_sql, language_params = language_condition(
            query.where,  # type: ignore[arg-type]
            fact_ids=fact_ids,
            text_ids=language_text_ids,
            common_texts=common_texts,
        )
        where.add(language_sql, **language_params)
    for name, condition in (
        ("first_seen_from", "t.first_seen >= :first_seen_from"),
        ("first_seen_to", "t.first_seen < :first_seen_to"),
        ("last_seen_from", "t.last_seen >= :last_seen_from"),
        ("last_seen_to", "t.last_seen < :last_seen_to"),
    ):
        value = getattr(query, name)
        if value is not None:
            where.add(condition, **{name: value})
    order = asset_sort(query.sort, query.order)
    columns, values = SORT_COLUMNS[order.sort]
    position = decode_asset_cursor(order, query.cursor)
    if position is not None:
        # One row comparison over the index's columns: the page starts inside the index.
        where.add(
            f"({', '.join(columns)}) {'<' if order.descending else '>'} ({', '.join(values)})",
            c_ip=ip_order_text(position.ip),
            c_port=position.port,
            c_transport=position.transport,
        )
        if has_key(order.sort):
            key = position.key
            where.bind(c_key=from_micros(key) if isinstance(key, int) else key)
    if query.status not in ASSET_STATUS_FILTERS:
        raise invalid_parameter(
            "status", "status must be one of " + ", ".join(ASSET_STATUS_FILTERS)
        )
    if query.status != "all":
        where.add("t.status = :status", status=query.status)
    owner = ", t.owner_id" if query.scope == "user" else ""
    selected = select or f"{SELECT_ENDPOINT}{owner}, {SELECT_STATUS}, host(t.ip_order) AS ip_order"
    sql = (
        f"SELECT {selected} "  # noqa: S608 - fragments are module constants; values are bound
        f"FROM {table} t "
        f"WHERE {where.sql()} ORDER BY {order_by(columns, order.descending)} LIMIT :limit"
    )
    return sql, where.params


# Per sort: the ordered columns and the cursor values they are compared with (WEB-12).
# Each column list is the key of an index of migration 0140 (after owner_id in the user
# view), so ``ORDER BY`` and the keyset condition are a range of that index.
SERVICE_KEY = "coalesce(t.service, '') COLLATE \"C\""
_IP, _PORT, _TRANSPORT = "CAST(:c_ip AS inet)", ":c_port", ":c_transport"
SORT_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "ip": (("t.ip_order", "t.port", "t.transport"), (_IP, _PORT, _TRANSPORT)),
    "port": (("t.port", "t.ip_order", "t.transport"), (_PORT, _IP, _TRANSPORT)),
    "last_seen": (
        ("t.last_seen", "t.ip_order", "t.port", "t.transport"),
        ("CAST(:c_key AS timestamptz)", _IP, _PORT, _TRANSPORT),
    ),
    "service": (
        (SERVICE_KEY, "t.ip_order", "t.port", "t.transport"),
        ('CAST(:c_key AS text) COLLATE "C"', _IP, _PORT, _TRANSPORT),
    ),
}


def order_by(columns: tuple[str, ...], descending: bool) -> str:
    """``ORDER BY`` of a column list, every column the same direction (one index scan)."""
    direction = " DESC" if descending else ""
    return ", ".join(column + direction for column in columns)


_OPTIONAL_COLUMNS = (
    "owner_id",
    "execution_id",
    "task_id",
    "status",
    "gone_since",
    "gone_execution_id",
    "observed",
)


def endpoints_from_rows(rows: list[Any], scope: str) -> list[EndpointDocument]:
    """Documents of one result set.

    Values are read by position, with the positions looked up once from the first row's
    column names: a ``Row``'s attribute access goes through ``__getattr__`` after a failed
    normal lookup, about 0.6 µs a column against 0.03 by index, and a 500-row page of 24
    columns spent some 7 ms of a request's CPU on it. A column the statement does not
    select (``_OPTIONAL_COLUMNS``) reads as the ``None`` appended to each row."""
    if not rows:
        return []
    position = {name: index for index, name in enumerate(rows[0]._fields)}
    missing = len(position)  # the index of the appended None
    # Each position is looked up by the name written beside it, so no column order is assumed.
    i_id, i_ip, i_port, i_transport, i_key, i_tags, i_details = (
        position[name]
        for name in ("id", "ip", "port", "transport", "observation_key", "tags", "details")
    )
    i_first, i_first_execution, i_last, i_last_execution = (
        position[name]
        for name in ("first_seen", "first_execution_id", "last_seen", "last_execution_id")
    )
    i_state, i_service, i_product, i_version, i_banner, i_hostname = (
        position[name] for name in ("state", "service", "product", "version", "banner", "hostname")
    )
    i_owner, i_execution, i_task, i_status, i_gone_since, i_gone_execution, i_observed = (
        position.get(name, missing) for name in _OPTIONAL_COLUMNS
    )
    documents = []
    for row in rows:
        v = (*row, None)
        documents.append(
            EndpointDocument(  # positional, in the dataclass's field order
                v[i_id],
                scope,
                normalise_ip(v[i_ip]),
                v[i_port],
                v[i_transport],
                v[i_first],
                v[i_first_execution],
                v[i_last],
                v[i_last_execution],
                v[i_owner],
                v[i_execution],
                v[i_task],
                v[i_state],
                v[i_service],
                v[i_product],
                v[i_version],
                v[i_banner],
                v[i_hostname],
                tuple(v[i_tags] or ()),
                v[i_details] or {},
                v[i_key],
                v[i_status] or "open",
                v[i_gone_since],
                v[i_gone_execution],
                _observed(v[i_observed]),
            )
        )
    return documents


def _observed(value: dict[str, str] | None) -> dict[str, datetime]:
    """The ``observed`` column (JSON times) as the document's map."""
    return {name: parse_utc(seen) for name, seen in value.items()} if value else {}
