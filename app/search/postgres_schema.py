"""Tables, column lists and statement texts of the PostgreSQL search store (STO-1).

The tables are created by Alembic (``alembic/versions/20261130_0010_search_store.py``
and the migrations after it); this module only names them and builds the SQL the
adapter runs on them, so the writes (``postgres_writes``), the reads
(``postgres_queries``) and the server-side projection pages (``postgres_pages``)
share one text of every rule:

* ``merge_on_conflict`` is the SQL form of ``app.search.documents.merge_endpoints``;
  every merge statement (shards and server-side pages) uses it, so the rule cannot
  drift between them;
* ``merge_statement`` merges one shard of endpoint documents into a table (and, for
  execution endpoints, keeps the execution's exact counters);
* ``fact_statements`` writes a shard of facts with exact counters;
* ``status_statement`` sets the analysis's status fields of current assets;
* ``check_tables`` and ``create_partitions`` are the schema check and the monthly
  fact partitions created on demand.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, date, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.observability import emit
from app.search.documents import DETAIL_GROUPS, PROBED_FIELDS
from app.search.endpoint_facts import CERT_SHA256_SQL, FACT_FIELDS, FACT_SQL
from app.search.port import StoreUnavailable

FACTS_TABLE = "search_facts"
EXECUTION_TABLE = "search_execution_endpoints"
ASSET_TABLES = {"global": "search_assets_global", "user": "search_assets_user"}
# The distinct texts of the asset views, filled by triggers (migration 0170).
ASSET_TEXTS_TABLE = "search_asset_texts"
# The distinct certificate issuers and subjects (migration 1610) and HTTP titles and
# servers (migration 1800) of the asset views, each with a number handed out in first-seen
# order (migration 2200). Each view row carries its values' numbers and the views'
# partial indexes are on them, so a new value's entries go to the indexes' right-hand
# end instead of a random leaf (docs/scaling.md, "Value indexes in first-seen order").
FACT_TEXTS_TABLE = "search_asset_fact_texts"
FACT_TEXT_NUMBERS = {
    "cert.issuer": "cert_issuer_number",
    "cert.subject": "cert_subject_number",
    "title": "title_number",
    "server": "server_number",
}
FACT_TEXT_KEYS = {field: f"t.{column}" for field, column in FACT_TEXT_NUMBERS.items()}
# Exact per-execution counters maintained by the write statements (migration 0060).
FACT_COUNTS_TABLE = "search_execution_fact_counts"
EXECUTION_IPS_TABLE = "search_execution_ips"
ENDPOINT_COUNTS_TABLE = "search_execution_endpoint_counts"
MONTH_OF_OBSERVED_AT = "(date_trunc('month', observed_at AT TIME ZONE 'UTC'))::date"
# Fields joined by a unit separator (\x1f), which postgres_queries.like_pattern strips from
# queries, so a search never matches across two fields.
TEXT_EXPRESSION = (
    "(coalesce(banner, '') || E'\\x1f' || coalesce(product, '') || E'\\x1f' "
    "|| coalesce(hostname, ''))"
)
# A view row's key into search_asset_texts; the views' text indexes are on exactly this
# expression (migration 0170), so a query must spell it the same way to use them.
TEXT_ID_EXPRESSION = f"(md5({TEXT_EXPRESSION})::uuid)"

ENDPOINT_COLUMNS = (
    "key",
    "id",
    "ip",
    "port",
    "transport",
    "first_seen",
    "first_execution_id",
    "last_seen",
    "last_execution_id",
    "observation_key",
    "state",
    "service",
    "product",
    "version",
    "banner",
    "hostname",
    "tags",
    "details",
)
COLUMN_TYPES = {
    "key": "bigint",
    "id": "uuid",
    "ip": "inet",
    "port": "integer",
    "transport": "text",
    "first_seen": "timestamptz",
    "first_execution_id": "bigint",
    "last_seen": "timestamptz",
    "last_execution_id": "bigint",
    "observation_key": 'text COLLATE "C"',
    "state": "text",
    "service": "text",
    "product": "text",
    "version": "text",
    "banner": "text",
    "hostname": "text",
    "tags": "text[]",
    "details": "jsonb",
    "observed": "jsonb",
    "owner_id": "bigint",
    "execution_id": "bigint",
    "task_id": "bigint",
}
TABLE_COLUMNS = {
    EXECUTION_TABLE: (*ENDPOINT_COLUMNS, "owner_id", "execution_id", "task_id", "observed"),
    ASSET_TABLES["global"]: (*ENDPOINT_COLUMNS, "observed"),
    ASSET_TABLES["user"]: (*ENDPOINT_COLUMNS, "owner_id", "observed"),
}
NEWEST_GROUP = (
    "last_execution_id",
    "observation_key",
    *(
        c
        for c in ("state", "service", "product", "version", "banner", "hostname")
        if c not in PROBED_FIELDS
    ),
    "tags",
)


def _seen(alias: str, name: str) -> str:
    """When ``alias``'s value of probed field ``name`` was observed (``documents.field_seen``)."""
    return (
        f"(CASE WHEN {alias}.{name} IS NOT NULL THEN "
        f"coalesce(CAST({alias}.observed ->> '{name}' AS timestamptz), {alias}.last_seen) END)"
    )


def _group(alias: str, name: str) -> str:
    """``alias``'s ``details[name]`` document (a JSON null is none), ``documents.DETAIL_GROUPS``."""
    return f"NULLIF({alias}.details -> '{name}', 'null'::jsonb)"


def _group_seen(alias: str, name: str) -> str:
    """When ``alias``'s ``details[name]`` was observed (``documents.group_seen``)."""
    return (
        f"(CASE WHEN {_group(alias, name)} IS NOT NULL THEN "
        f"coalesce(CAST({alias}.observed ->> '{name}' AS timestamptz), {alias}.last_seen) END)"
    )


def _group_identity(alias: str, name: str) -> str:
    """``documents.group_identity``: the identity keys' texts joined by U+001F."""
    parts = [
        f"(CASE WHEN jsonb_typeof({alias}.details -> '{name}' -> '{key}') = 'string' "
        f"THEN {alias}.details -> '{name}' ->> '{key}' ELSE '' END)"
        for key in DETAIL_GROUPS[name]
    ]
    return " || chr(31) || ".join(parts)


def _group_take(name: str) -> str:
    """Whether the incoming row's ``details[name]`` wins (``documents.merge_endpoints``).

    A CASE, not a row comparison, so that the cheap tests decide the common cases and the
    identities are read only on a tie of time (the expression is repeated for the
    document, its value numbers and its time: a row comparison cost a republish of a web
    fleet a fifth more server CPU)."""
    mine, theirs = _group_seen("t", name), _group_seen("excluded", name)
    return (
        f"(CASE WHEN {_group('excluded', name)} IS NULL THEN false "
        f"WHEN {_group('t', name)} IS NULL THEN true "
        f"WHEN {theirs} <> {mine} THEN {theirs} > {mine} "
        f'ELSE ({_group_identity("excluded", name)}) COLLATE "C" > '
        f'({_group_identity("t", name)}) COLLATE "C" END)'
    )


def _details_set(newer: str) -> str:
    """``details``: the newest row's, with each of ``DETAIL_GROUPS`` from the row that
    observed it last."""
    chosen = {
        name: (
            f"(CASE WHEN {_group_take(name)} THEN {_group('excluded', name)} "
            f"ELSE {_group('t', name)} END)"
        )
        for name in DETAIL_GROUPS
    }
    # A document neither row has (or a JSON null) leaves the newest row's as it is.
    groups = " || ".join(
        f"(CASE WHEN {value} IS NULL THEN '{{}}'::jsonb "
        f"ELSE jsonb_build_object('{name}', {value}) END)"
        for name, value in chosen.items()
    )
    newest = f"coalesce(CASE WHEN {newer} THEN excluded.details ELSE t.details END, '{{}}')"
    return f"details = {newest} || {groups}"


def _probed_sets() -> list[str]:
    """SET items of the probed fields and ``observed`` (``documents.merge_endpoints``).

    A field takes the value of the version that observed it last (ties: the greater
    value, compared as code points like Python); ``observed`` keeps the times that are
    not the merged ``last_seen``. SET expressions read the row as it was before."""
    sets = []
    times = []
    for name in PROBED_FIELDS:
        mine, theirs = _seen("t", name), _seen("excluded", name)
        take = (
            f"({theirs} IS NOT NULL AND ({mine} IS NULL OR ({theirs}, excluded.{name} "
            f'COLLATE "C") > ({mine}, t.{name} COLLATE "C")))'
        )
        sets.append(f"{name} = CASE WHEN {take} THEN excluded.{name} ELSE t.{name} END")
        chosen = f"(CASE WHEN {take} THEN {theirs} ELSE {mine} END)"
        times.append(
            f"'{name}', CASE WHEN {chosen} <> GREATEST(t.last_seen, excluded.last_seen) "
            f"THEN to_jsonb({chosen}) END"
        )
    for name in DETAIL_GROUPS:
        take = _group_take(name)
        theirs, mine = _group_seen("excluded", name), _group_seen("t", name)
        chosen = f"(CASE WHEN {take} THEN {theirs} ELSE {mine} END)"
        times.append(
            f"'{name}', CASE WHEN {chosen} <> GREATEST(t.last_seen, excluded.last_seen) "
            f"THEN to_jsonb({chosen}) END"
        )
    sets.append(
        f"observed = nullif(jsonb_strip_nulls(jsonb_build_object({', '.join(times)})), '{{}}')"
    )
    return sets


def _fact_value(field: str, alias: str) -> str:
    """The search language's reading of text fact ``field`` over ``alias``'s details."""
    return FACT_SQL[field].replace("t.details", f"{alias}.details")


def fact_text_numbers(alias: str) -> list[str]:
    """Select-list items: the numbers of ``alias``'s four text fact values, named as the
    views' columns (migration 2200).

    A value is read by its md5 from ``FACT_TEXTS_TABLE``, where the writer put it just
    before, in a transaction of its own (``register_fact_texts``). One this statement's
    snapshot does not see (a row that came into the page since, another writer's value
    committed since the statement began) is read, or added, by
    ``search_asset_fact_text_number``, whose statements see what has committed."""
    items = []
    for field, column in FACT_TEXT_NUMBERS.items():
        value = _fact_value(field, alias)
        section = FACT_FIELDS[field][0]
        lookup = f"SELECT f.number FROM {FACT_TEXTS_TABLE} f WHERE f.id = md5({value})::uuid"  # noqa: S608 - module constants
        items.append(
            f"CASE WHEN {alias}.details ? '{section}' THEN coalesce(({lookup}), "
            f"search_asset_fact_text_number({value})) END AS {column}"
        )
    return items


def register_fact_texts(rows: str, alias: str) -> str:
    """An INSERT of the distinct text fact values of ``rows`` (a FROM item aliased
    ``alias`` with a ``details`` column) that the table lacks, in key order.

    Run in its own short transaction before a merge: a new value's row is then
    committed (and its key's lock released) before the merge reads its number, so two
    writers of one new value wait on each other for this statement only, never for a
    whole merge; key order keeps two of them from deadlocking."""
    values = ", ".join(f"({_fact_value(field, alias)})" for field in FACT_TEXT_NUMBERS)
    sections = sorted({FACT_FIELDS[field][0] for field in FACT_TEXT_NUMBERS})
    return f"""
        INSERT INTO {FACT_TEXTS_TABLE} (id, text)
        SELECT DISTINCT ON (x.id) x.id, x.text
          FROM (SELECT md5(v.text)::uuid AS id, v.text
                  FROM {rows}
                 CROSS JOIN LATERAL (VALUES {values}) AS v(text)
                 WHERE ({" OR ".join(f"{alias}.details ? '{s}'" for s in sections)})
                   AND v.text IS NOT NULL) AS x
         ORDER BY x.id
        ON CONFLICT (id) DO NOTHING
    """  # noqa: S608 - table and column names are module constants; values are bound


def id_after_cursor(column: str, parameter: str = ":after") -> str:
    """SQL: uuid ``column`` comes after a keyset walk's cursor ``parameter`` (NULL: the
    first page). psycopg2 sends parameters as literals, so the planner sees either
    ``NULL IS NULL`` (the condition folds away) or ``column > 'id'``, a bound it starts
    the walk's index range at. Every walk of one execution in id order reads the
    primary key ``(execution_id, id)`` this way (docs/scaling.md, "One index per
    walk"); the facts' copy to Elasticsearch walks ``search_facts`` alike."""
    return f"(CAST({parameter} AS uuid) IS NULL OR {column} > CAST({parameter} AS uuid))"


# Each endpoint table's primary key, the merges' conflict target (migrations 2000, 2100).
# ``key`` alone is a hash, so every insert would land on a random leaf, which costs a
# page read once the key outgrows memory (docs/scaling.md, "Keys with insert
# locality"). Led by the execution (a run's rows), and by the owner and address (a new
# range of addresses), new rows land side by side instead. The views' leading columns
# are hashed into ``key`` too, so one document still has one row. Execution endpoints
# end with the full ``id``: that key is also the one index every walk of an execution
# reads in id order (docs/scaling.md, "One index per walk").
PRIMARY_KEYS = {
    EXECUTION_TABLE: ("execution_id", "id"),
    ASSET_TABLES["global"]: ("ip", "key"),
    ASSET_TABLES["user"]: ("owner_id", "ip", "key"),
}


def merge_on_conflict(table: str) -> str:
    """``ON CONFLICT … DO UPDATE`` of merge_endpoints for ``table`` aliased ``t``.

    Every merge statement (shards here, server-side projection pages in
    ``postgres_pages``) uses this one text, so the rule cannot drift between them.
    """
    older = (
        "(excluded.first_seen, excluded.first_execution_id) < (t.first_seen, t.first_execution_id)"
    )
    newer = (
        "(excluded.last_seen, excluded.last_execution_id, excluded.observation_key) "
        "> (t.last_seen, t.last_execution_id, t.observation_key)"
    )
    # A view row's value numbers go with the details document their value is read from
    # (migration 2200; ``FACT_FIELDS`` names the document).
    numbers = (
        [
            f"{c} = CASE WHEN {_group_take(FACT_FIELDS[field][0])} THEN excluded.{c} ELSE t.{c} END"
            for field, c in FACT_TEXT_NUMBERS.items()
        ]
        if table in ASSET_TABLES.values()
        else []
    )
    newest_sets = ",\n        ".join(
        [f"{c} = CASE WHEN {newer} THEN excluded.{c} ELSE t.{c} END" for c in NEWEST_GROUP]
        + [_details_set(newer)]
        + numbers
        + _probed_sets()
    )
    return f"""
        ON CONFLICT ({", ".join(PRIMARY_KEYS[table])}) DO UPDATE SET
        first_seen = LEAST(t.first_seen, excluded.first_seen),
        first_execution_id = CASE WHEN {older}
            THEN excluded.first_execution_id ELSE t.first_execution_id END,
        last_seen = GREATEST(t.last_seen, excluded.last_seen),
        {newest_sets}
        WHERE t.id = excluded.id
    """


# A merge returns the id of each row it wrote (``EndpointDocument.id`` form) and whether
# it created it; a row it did not write collided with another id on the primary key.
RETURNED_ID = "replace(t.id::text, '-', '') AS id"


# The text fact values of a shard of current assets (``merge_statement``'s rows).
SHARD_FACT_TEXTS = register_fact_texts(
    "json_to_recordset(CAST(:rows AS json)) AS r(details jsonb)", "r"
)


def merge_statement(table: str) -> str:
    """One set-based merge of a shard into ``table`` (the SQL form of merge_endpoints):
    (id, created) of each row written."""
    columns = TABLE_COLUMNS[table]
    record = ", ".join(f"{c} {COLUMN_TYPES[c]}" for c in columns)
    names = selected = ", ".join(columns)
    if table in ASSET_TABLES.values():
        # Its values' numbers, registered by SHARD_FACT_TEXTS just before (migration 2200).
        names += ", " + ", ".join(FACT_TEXT_NUMBERS.values())
        selected += ", " + ", ".join(fact_text_numbers("r"))
    merge = f"""
        INSERT INTO {table} AS t ({names})
        SELECT {selected}
        FROM json_to_recordset(CAST(:rows AS json)) AS r({record})
        {merge_on_conflict(table)}
    """  # noqa: S608 - table and column names are module constants; values are bound
    if table != EXECUTION_TABLE:
        return merge + f"RETURNING {RETURNED_ID}, (xmax = 0) AS created"
    # Execution endpoints also keep the execution's exact counters (ING-2): only rows
    # this statement created count, and an address counts once per execution because
    # the primary key of search_execution_ips decides which writer saw it first. Rows
    # are locked in (execution, ip) order so concurrent shards cannot deadlock.
    # The counter row names its task, so a task's results totals are read from the
    # counters (``postgres_queries.RESULT_TOTALS``), not from its rows.
    return f"""
        WITH merged AS (
            {merge}
            RETURNING {RETURNED_ID}, (xmax = 0) AS created, execution_id, task_id, ip
        ), new_ips AS (
            INSERT INTO {EXECUTION_IPS_TABLE} (execution_id, ip)
            SELECT DISTINCT execution_id, ip FROM merged WHERE created ORDER BY 1, 2
            ON CONFLICT DO NOTHING
            RETURNING execution_id
        ), counted AS (
            INSERT INTO {ENDPOINT_COUNTS_TABLE} AS c (execution_id, task_id, endpoints, ips)
            SELECT e.execution_id, e.task_id, e.n, coalesce(i.n, 0)
              FROM (SELECT execution_id, task_id, count(*) AS n FROM merged WHERE created
                     GROUP BY execution_id, task_id) e
              LEFT JOIN (SELECT execution_id, count(*) AS n FROM new_ips
                          GROUP BY execution_id) i USING (execution_id)
             ORDER BY 1
            ON CONFLICT (execution_id) DO UPDATE
               SET endpoints = c.endpoints + excluded.endpoints, ips = c.ips + excluded.ips
        )
        SELECT id, created FROM merged
    """  # noqa: S608 - table and column names are module constants; values are bound


def execution_copy_counts_statement() -> str:
    """The counters of a shard of execution endpoints that COPY loaded (all of them new).

    ``:groups`` is a JSON array of ``{execution_id, task_id, endpoints, ips}``, ``ips``
    the group's distinct addresses joined by commas. The same bookkeeping as the merge
    statement's (``merge_statement``): an address counts once per execution, decided by
    the primary key of search_execution_ips, and locks are taken in (execution, ip)
    order, then the counters' in execution order, as the merge takes them."""
    return f"""
        WITH g AS (
            SELECT * FROM json_to_recordset(CAST(:groups AS json))
                AS g(execution_id bigint, task_id bigint, endpoints bigint, ips text)
        ), new_ips AS (
            INSERT INTO {EXECUTION_IPS_TABLE} (execution_id, ip)
            SELECT g.execution_id, CAST(a.ip AS inet)
              FROM g, unnest(string_to_array(g.ips, ',')) AS a(ip)
             ORDER BY 1, 2
            ON CONFLICT DO NOTHING
            RETURNING execution_id
        )
        INSERT INTO {ENDPOINT_COUNTS_TABLE} AS c (execution_id, task_id, endpoints, ips)
        SELECT g.execution_id, g.task_id, g.endpoints, coalesce(i.n, 0)
          FROM g LEFT JOIN (SELECT execution_id, count(*) AS n FROM new_ips
                             GROUP BY execution_id) i USING (execution_id)
         ORDER BY 1
        ON CONFLICT (execution_id) DO UPDATE
           SET endpoints = c.endpoints + excluded.endpoints, ips = c.ips + excluded.ips
    """  # noqa: S608 - table and column names are module constants; values are bound


FACT_COLUMNS = (
    "id",
    "observed_at",
    "kind",
    "execution_id",
    "task_id",
    "owner_id",
    "scanner_id",
    "upload_id",
    "stream",
    "batch_index",
    "position",
    "body",
)
FACT_TYPES = {
    "id": "uuid",
    "observed_at": "timestamptz",
    "kind": "text",
    "execution_id": "bigint",
    "task_id": "bigint",
    "owner_id": "bigint",
    "scanner_id": "bigint",
    "upload_id": "text",
    "stream": "text",
    "batch_index": "integer",
    "position": "integer",
    "body": "jsonb",
}


def fact_statements() -> tuple[str, str, str, str]:
    """A fact shard's statements, run in this order in one transaction.

    1. ``insert``: the new facts (``ON CONFLICT DO NOTHING``: a racing writer of the
       same id waits for the first one and then inserts nothing). When every fact of
       the shard was new (the normal batch) the same statement adds them to the
       counters and the shard is done.
    Otherwise (a retry, or a rewrite):
    2. ``lock``: the stored facts the shard would change, locked in id order and
       returned with their counted identity (execution, month, kind). A replay of
       the same content finds nothing, so a retry rewrites nothing.
    3. ``overwrite``: those facts, and only those (a fact another writer changed since
       the lock must not move without its count), take the new content, like an
       Elasticsearch index operation would overwrite a document. Never inserts.
    4. ``count``: +1 per fact the insert created, and the moves of overwritten facts
       whose kind (or execution) changed.

    Row locks are taken as new facts → stored facts → counters, each in sorted
    order, so concurrent shards cannot deadlock. (System columns such as xmax cannot
    be returned from a partitioned table, hence "insert, else overwrite" is split.)
    """
    names = ", ".join(FACT_COLUMNS)
    record = ", ".join(f"{c} {FACT_TYPES[c]}" for c in FACT_COLUMNS)
    add_counts = f"""
        INSERT INTO {FACT_COUNTS_TABLE} AS c (execution_id, month, kind, facts)
        SELECT execution_id, month, kind, sum(delta)
          FROM {{deltas}} GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (execution_id, month, kind) DO UPDATE SET facts = c.facts + excluded.facts
    """  # noqa: S608 - table and column names are module constants; values are bound
    # The normal batch: every fact new, so count them in the same statement.
    all_new = (
        f"(SELECT execution_id, {MONTH_OF_OBSERVED_AT} AS month, kind, 1 AS delta "  # noqa: S608 - table and column names are module constants; values are bound
        "FROM inserted WHERE (SELECT count(*) FROM inserted) = (SELECT count(*) FROM r)) d"
    )
    # Ids come back as text: the driver would build a uuid.UUID for each returned row.
    insert = f"""
        WITH r AS MATERIALIZED (
            SELECT * FROM json_to_recordset(CAST(:rows AS json)) AS r({record})
        ), inserted AS (
            INSERT INTO {FACTS_TABLE} ({names})
            SELECT {names} FROM r
            ON CONFLICT (id, observed_at) DO NOTHING
            RETURNING id, execution_id, kind, observed_at
        ), counted AS ({add_counts.format(deltas=all_new)})
        SELECT id::text AS id, execution_id, kind, observed_at FROM inserted
    """  # noqa: S608 - table and column names are module constants; values are bound
    stored = ", ".join(f"f.{c}" for c in FACT_COLUMNS[2:])
    incoming = ", ".join(f"r.{c}" for c in FACT_COLUMNS[2:])
    differs = (
        "f.id = r.id AND f.observed_at = r.observed_at "
        f"AND ({stored}) IS DISTINCT FROM ({incoming})"
    )
    lock = f"""
        SELECT f.id, f.observed_at,
               {MONTH_OF_OBSERVED_AT.replace("observed_at", "f.observed_at")} AS month,
               f.execution_id, f.kind, r.execution_id AS new_execution_id, r.kind AS new_kind
          FROM {FACTS_TABLE} AS f, json_to_recordset(CAST(:rows AS json)) AS r({record})
         WHERE {differs}
         ORDER BY f.id, f.observed_at
           FOR UPDATE OF f
    """  # noqa: S608 - table and column names are module constants; values are bound
    updates = ", ".join(f"{c} = r.{c}" for c in FACT_COLUMNS[2:])
    overwrite = f"""
        UPDATE {FACTS_TABLE} AS f SET {updates}
          FROM json_to_recordset(CAST(:rows AS json)) AS r({record})
         WHERE {differs}
           AND (f.id, f.observed_at) IN (
               SELECT * FROM unnest(CAST(:locked_ids AS uuid[]), CAST(:locked_at AS timestamptz[])))
    """  # noqa: S608 - table and column names are module constants; values are bound
    count = add_counts.format(
        deltas="json_to_recordset(CAST(:deltas AS json)) "
        "AS d(execution_id bigint, month date, kind text, delta bigint)"
    )
    return insert, lock, overwrite, count


SELECT_ENDPOINT = """
    replace(t.id::text, '-', '') AS id, host(t.ip) AS ip, t.port, t.transport,
    t.first_seen, t.first_execution_id, t.last_seen, t.last_execution_id, t.observation_key,
    t.state, t.service, t.product, t.version, t.banner, t.hostname, t.tags, t.details,
    t.observed
"""


SELECT_STATUS = "t.status, t.gone_since, t.gone_execution_id"

# An execution's endpoints as the change analysis compares them (ANA-2): the banner
# only as a hash, so a change of banner is detected without carrying the text along.
# A service named from the port table (``documents.GUESSED_AT``) was not probed: the
# analysis reads it as NULL, so a scan without service detection changes nothing.
_SIGHTING_COLUMNS = f"""ip, port, transport, state,
           CASE WHEN CAST(observed ->> 'service' AS timestamptz) = 'epoch' THEN NULL
                ELSE service END AS service, product, version,
           md5(banner) AS banner_hash, hostname,
           {CERT_SHA256_SQL.replace("t.details", "details")} AS cert_sha256"""
EXECUTION_SIGHTINGS_SQL = f"""
    SELECT {_SIGHTING_COLUMNS}
      FROM {EXECUTION_TABLE}
     WHERE execution_id = :execution_id
"""  # noqa: S608 - fragments are module constants; values are bound
# One keyset page of the same, by the primary key ``(execution_id, id)`` (``id_after_cursor``).
EXECUTION_SIGHTINGS_PAGE_SQL = f"""
    SELECT id, {_SIGHTING_COLUMNS}
      FROM {EXECUTION_TABLE}
     WHERE execution_id = :execution_id
       AND {id_after_cursor("id", ":after_id")}
     ORDER BY id
     LIMIT :limit
"""  # noqa: S608 - fragments are module constants; values are bound

STATUS_RECORD = (
    "owner_id bigint, ip inet, key bigint, id uuid, status text, gone_since timestamptz, "
    "gone_execution_id bigint"
)


def status_statement(table: str) -> str:
    """Set the analysis's status fields of ``table``'s rows in ``:rows`` (``STATUS_RECORD``
    each), each found through its primary key; returns the keys of the rows it found."""
    found = " AND ".join(f"t.{c} = r.{c}" for c in PRIMARY_KEYS[table])
    return f"""
        UPDATE {table} AS t
           SET status = r.status, gone_since = r.gone_since,
               gone_execution_id = r.gone_execution_id
          FROM json_to_recordset(CAST(:rows AS json)) AS r({STATUS_RECORD})
         WHERE {found} AND t.id = r.id
        RETURNING t.key
    """  # noqa: S608 - table and column names are module constants; values are bound


@functools.lru_cache(maxsize=1024)
def partition_name(month: str) -> str:
    """``2026.11`` → ``search_facts_y2026m11`` (cached: every fact of a batch asks)."""
    year, mon = month.split(".")
    return f"{FACTS_TABLE}_y{int(year):04d}m{int(mon):02d}"


def month_bounds(month: str) -> tuple[datetime, datetime]:
    year, mon = (int(part) for part in month.split("."))
    start = datetime(year, mon, 1, tzinfo=UTC)
    end = datetime(year + (mon == 12), mon % 12 + 1, 1, tzinfo=UTC)
    return start, end


def month_start(moment: datetime) -> date:
    """The counters' month key of a fact (UTC, like the monthly partitions)."""
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


STORE_TABLES = (
    FACTS_TABLE,
    EXECUTION_TABLE,
    *ASSET_TABLES.values(),
    ASSET_TEXTS_TABLE,
    FACT_TEXTS_TABLE,
    FACT_COUNTS_TABLE,
    EXECUTION_IPS_TABLE,
    ENDPOINT_COUNTS_TABLE,
)


def check_tables(conn: Connection) -> list[str]:
    """The existing fact partitions; ``StoreUnavailable`` when a store table is missing."""
    missing = [
        t
        for t in STORE_TABLES
        if conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": t}).scalar() is None
    ]
    if missing:
        raise StoreUnavailable(
            "search store tables are missing (run `netmap db upgrade`): " + ", ".join(missing)
        )
    return list(
        conn.execute(
            sa.text(
                "SELECT c.relname FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = CAST(:parent AS regclass)"
            ),
            {"parent": FACTS_TABLE},
        ).scalars()
    )


def create_partitions(conn: Connection, missing: Sequence[tuple[str, str]]) -> None:
    """Create the (partition name, ``YYYY.MM``) fact partitions that do not exist yet."""
    # One lock for all partition DDL: a second writer waits, then sees the table.
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('netmap:search_facts'))"))
    for name, month in missing:
        exists = conn.execute(sa.text("SELECT to_regclass(:t)"), {"t": name}).scalar()
        if exists is not None:
            continue
        start, end = month_bounds(month)
        # Names and bounds come from our own month arithmetic, never from input text.
        conn.execute(
            sa.text(
                f"CREATE TABLE IF NOT EXISTS {name} PARTITION OF {FACTS_TABLE} "
                f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
            )
        )
        emit("SearchFactPartitionCreated", partition=name)
