"""Export text of execution endpoints, written by PostgreSQL itself (EXP-7).

The generic export path turns every stored row into an ``EndpointDocument`` and
encodes it with Python's ``csv`` and ``json`` modules; on the PostgreSQL store
about half of an export's CPU went to that. Here one statement per keyset chunk
returns the chunk's CSV rows and JSON lines as two text values
(``string_agg`` of lines built in SQL), so Python only moves bytes.

Why not ``COPY ... (FORMAT csv)``: its quoting is not ``csv.writer``'s (COPY
quotes an empty string, the export does not), and the export must be the same bytes
whichever store produced it. Building the lines in SQL gives exact control.

The lines reproduce ``app.exports.formats`` byte for byte:

* CSV: ``csv.writer`` (excel dialect, ``\\n`` line ends) quotes a field only when
  it holds ``,``, ``"``, ``\\n`` or ``\\r`` (``formats.CsvEncoder``) and doubles
  ``"``; ``None`` and ``""`` are empty.
* JSON: ``json`` with ``ensure_ascii=False`` and ``(",", ":")`` separators escapes
  strings like PostgreSQL's ``to_json`` (``\\" \\\\ \\b \\f \\n \\r \\t``, other
  control characters as ``\\u00xx``). ``details`` is the ``jsonb`` text with the
  separators' spaces removed outside strings: the generic path re-encodes what
  psycopg2 parsed from that very text, keys in the same order.
* Times: ``isoformat()`` in UTC (the engine pins ``timezone=UTC``), microseconds
  only when not zero, ``+00:00`` written ``Z``; built from the timestamp's ISO
  text, so a session whose ``DateStyle`` is not ISO gets no exact chunk.

Where the two encoders could disagree, the chunk is marked not ``exact`` and the
caller encodes it the generic way: a non-integer number in ``details``
(``jsonb`` keeps ``1.50`` and ``0.00001`` as written, Python prints floats its
own way), an IPv4-embedding IPv6 address (``::ffff:1.2.3.4``: PostgreSQL prints
dotted quads, Python's ``ipaddress`` hex words), a NULL tag, ``details`` that is
not an object. tests/integration/exports/test_export_text.py builds exports both
ways and compares them byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg2.extensions
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.search.postgres_schema import EXECUTION_TABLE as TABLE
from app.search.postgres_schema import id_after_cursor

# A JSON string literal in jsonb's text output (escapes included).
_JSON_STRING = r'"(?:[^"\\]|\\.)*"'


def _csv_field(raw: str, *, plain: bool = True) -> str:
    """``csv.writer``'s QUOTE_MINIMAL for one text expression (NULL and '' are empty),
    neutralised against formula injection first (``formats.csv_text``: a leading
    ``=``, ``+``, ``-``, ``@``, tab or CR gets a ``'``)."""
    expr = (
        f"(CASE WHEN left({raw}, 1) IN ('=', '+', '-', '@', E'\\t', E'\\r') "
        f"THEN '''' || {raw} ELSE {raw} END)"
    )
    fast = f"WHEN p.plain THEN {expr} " if plain else ""
    return (
        f"CASE {fast}WHEN strpos({expr}, ',') > 0 OR strpos({expr}, '\"') > 0 "
        f"OR strpos({expr}, E'\\n') > 0 OR strpos({expr}, E'\\r') > 0 "
        f"THEN '\"' || replace({expr}, '\"', '\"\"') || '\"' ELSE {expr} END"
    )


def _json_text(expr: str, *, plain: bool = True) -> str:
    fast = f"WHEN p.plain THEN '\"' || {expr} || '\"' " if plain else ""
    return f"CASE WHEN {expr} IS NULL THEN 'null' {fast}ELSE to_json({expr})::text END"


# ``p.plain``: none of the row's short text columns holds a character that CSV quotes or
# JSON escapes, so both take them as they are (one test instead of one per column and
# format). Banners, often multi-line, are always checked on their own.
_PLAIN = (
    "concat(k.transport, k.state, k.service, k.product, k.version, k.hostname, k.tags_text)"
    " !~ '[\\x01-\\x1f,\"\\\\]'"
)

_JSON_TAGS = (
    "CASE WHEN coalesce(cardinality(p.tags), 0) = 0 THEN '[]' "
    "WHEN p.plain THEN '[\"' || array_to_string(p.tags, '\",\"') || '\"]' "
    "ELSE array_to_json(p.tags)::text END"
)


def _iso(text: str) -> str:
    """``datetime.isoformat()`` of a UTC time from its ISO-style ``timestamp`` text.

    The text trims trailing zeros of the fraction (``06:00:00.12``, or no fraction at
    all) where the export writes six digits always; ``+00:00`` is written ``Z``
    (formats._iso).
    """
    return (
        f"overlay(CASE WHEN length({text}) = 19 THEN {text} || '.000000' "
        f"ELSE rpad({text}, 26, '0') END placing 'T' from 11 for 1) || 'Z'"
    )


def _utc_text(expr: str) -> str:
    # A timestamp's own text output: several times cheaper than to_char. It is ISO
    # ("2026-11-30 06:00:00.12") under DateStyle ISO, which psycopg2's datetime parsing
    # needs as well; under any other DateStyle every chunk goes the generic way.
    return f"({expr} AT TIME ZONE 'UTC')::text"


def _compact_json(text: str) -> str:
    """jsonb text without the spaces its output puts after ``,`` and ``:``.

    ``json_strip_nulls`` re-emits JSON compactly and is several times cheaper than
    a regular expression, but it drops object members that are null: it serves
    only text with no ``null`` in it; other text has the separators' spaces removed
    outside string literals by ``regexp_replace``.
    """
    return (
        f"CASE WHEN strpos({text}, 'null') = 0 THEN json_strip_nulls({text}::json)::text "
        f"ELSE regexp_replace({text}, '({_JSON_STRING})|([,:]) ', '\\1\\2', 'g') END"
    )


_TEXT_COLUMNS = ("state", "service", "product", "version", "hostname")

# One concat() per line: a chain of || copies the growing line once per piece.
_CSV_LINE = (
    "concat("
    + ", ',', ".join(
        [
            "p.task_id",
            "p.execution_id",
            "p.ip",  # host(): digits, letters, '.' and ':' only
            "p.port",
            _csv_field("p.transport"),
            *(_csv_field(f"p.{column}") for column in _TEXT_COLUMNS),
            _csv_field("p.banner", plain=False),
            _csv_field("p.tags_text"),
            "p.first_seen_iso",
            "p.last_seen_iso",
        ]
    )
    + ", E'\\n')"
)

_JSON_LINE = (
    "concat("
    + ", ".join(
        [
            "'{\"task_id\":'",
            "p.task_id",
            "',\"execution_id\":'",
            "p.execution_id",
            "',\"ip\":'",
            "'\"' || p.ip || '\"'",
            "',\"port\":'",
            "p.port",
            "',\"transport\":'",
            _json_text("p.transport"),
            *(
                piece
                for column in _TEXT_COLUMNS
                for piece in (f"',\"{column}\":'", _json_text(f"p.{column}"))
            ),
            "',\"banner\":'",
            _json_text("p.banner", plain=False),
            "',\"tags\":'",
            _JSON_TAGS,
            '\',"first_seen":"\'',
            "p.first_seen_iso",
            '\'","last_seen":"\'',
            "p.last_seen_iso",
            '\'","details":\'',
            _compact_json("p.details_text"),
            "E'}\\n'",
        ]
    )
    + ")"
)

# Rows the generic encoder must write (see the module docstring).
_NOT_EXACT = (
    "(family(p.ip_inet) = 6"
    " AND (p.ip_inet <<= inet '::/96' OR p.ip_inet <<= inet '::ffff:0:0/96'))"
    " OR array_position(p.tags, NULL) IS NOT NULL"
    " OR jsonb_typeof(p.details) <> 'object'"
    " OR (strpos(p.details_text, '.') > 0"
    f" AND regexp_replace(p.details_text, '{_JSON_STRING}', '', 'g') LIKE '%.%')"
)


def _chunk_sql(*, csv: bool, jsonl: bool) -> str:
    # string_agg's ORDER BY matches the keyset subquery's order, so PostgreSQL (16+)
    # aggregates the sorted rows without sorting them again. The times' ISO text and
    # ``plain`` are computed once per row in the middle query, for both lines; the
    # uuid text of the last id is the largest (fixed width), its dashes removed once.
    csv_agg = f"string_agg({_CSV_LINE}, '' ORDER BY p.id)" if csv else "NULL::text"
    jsonl_agg = f"string_agg({_JSON_LINE}, '' ORDER BY p.id)" if jsonl else "NULL::text"
    return f"""
        SELECT count(*) AS rows,
               {csv_agg} AS csv,
               {jsonl_agg} AS jsonl,
               coalesce(bool_or({_NOT_EXACT}), false)
                   OR current_setting('DateStyle') NOT LIKE 'ISO%' AS not_exact,
               replace(max(p.id::text COLLATE "C"), '-', '') AS last_id
          FROM (SELECT k.*, {_iso("k.first_seen_text")} AS first_seen_iso,
                       {_iso("k.last_seen_text")} AS last_seen_iso, {_PLAIN} AS plain
                  FROM (SELECT t.id, t.task_id, t.execution_id, t.ip AS ip_inet,
                               host(t.ip) AS ip, t.port, t.transport, t.state, t.service,
                               t.product, t.version, t.hostname, t.banner, t.tags, t.details,
                               array_to_string(t.tags, ';') AS tags_text,
                               t.details::text AS details_text,
                               {_utc_text("t.first_seen")} AS first_seen_text,
                               {_utc_text("t.last_seen")} AS last_seen_text
                          FROM {TABLE} t
                         WHERE t.execution_id = :execution_id
                           AND {id_after_cursor("t.id")}
                           AND (CAST(:upto AS uuid) IS NULL OR t.id <= CAST(:upto AS uuid))
                         ORDER BY t.id
                         LIMIT CAST(:limit AS bigint)) k
                OFFSET 0) p
    """  # noqa: S608 - table, columns and expressions are module constants; values are bound


_STATEMENTS = {
    (csv, jsonl): sa.text(_chunk_sql(csv=csv, jsonl=jsonl))
    for csv in (True, False)
    for jsonl in (True, False)
    if csv or jsonl
}


@dataclass(frozen=True)
class ExportTextChunk:
    rows: int
    csv: bytes  # the chunk's CSV rows, no header (b"" when not asked for)
    jsonl: bytes  # the chunk's JSON lines (b"" when not asked for)
    last_id: str | None  # keyset position after this chunk (EndpointDocument.id form)
    exact: bool  # False: encode these rows the generic way instead


def read_export_text(
    conn: Connection,
    execution_id: int,
    *,
    after_id: str | None,
    limit: int | None,
    csv: bool = True,
    jsonl: bool = True,
    upto_id: str | None = None,
) -> ExportTextChunk:
    """The execution's endpoints after ``after_id`` (up to ``upto_id`` inclusive, when
    given), at most ``limit`` of them (None: no limit), as export text."""
    params = {"execution_id": execution_id, "after": after_id, "upto": upto_id, "limit": limit}
    raw = _raw_utf8_connection(conn)
    if raw is None:
        row: Any = tuple(conn.execute(_STATEMENTS[(csv, jsonl)], params).one())
    else:
        compiled = _compiled(conn, csv, jsonl)
        with raw.cursor() as cursor:
            psycopg2.extensions.register_type(psycopg2.extensions.BYTES, cursor)
            cursor.execute(compiled.string, compiled.construct_params(params))
            row = cursor.fetchone()
    rows, csv_text, jsonl_text, not_exact, last_id = row
    return ExportTextChunk(
        rows=int(rows),
        csv=_utf8(csv_text or b""),
        jsonl=_utf8(jsonl_text or b""),
        last_id=last_id.decode("utf-8") if isinstance(last_id, bytes) else last_id,
        exact=not not_exact,
    )


def _utf8(text: str | bytes) -> bytes:
    """Text as UTF-8 bytes: the raw path reads bytes already, the decoding path ``str``."""
    return text if isinstance(text, bytes) else text.encode("utf-8")


def _raw_utf8_connection(conn: Connection) -> Any | None:
    """The psycopg2 connection under ``conn`` when it talks UTF-8, else None.

    The chunk's text is read as the bytes the server sends (psycopg2's BYTES caster,
    on this statement's cursor only): decoding about 470 bytes a row into ``str`` only
    to encode them again was a fifth of the builder's CPU. Another driver, or a
    client encoding other than UTF-8, takes the decoding path.
    """
    raw = getattr(conn.connection, "dbapi_connection", None)
    if isinstance(raw, psycopg2.extensions.connection) and raw.encoding == "UTF8":
        return raw
    return None


_COMPILED: dict[tuple[str, bool, bool], Any] = {}


def _compiled(conn: Connection, csv: bool, jsonl: bool) -> Any:
    key = (conn.dialect.name, csv, jsonl)
    if key not in _COMPILED:
        _COMPILED[key] = _STATEMENTS[(csv, jsonl)].compile(dialect=conn.dialect)
    return _COMPILED[key]


# The id ending every ``chunk_rows``-th endpoint after ``after``: the keyset ranges that
# readers on several connections can write at the same time. The ids come from the
# primary key, (execution_id, id); no row is read.
_BOUNDS = sa.text(
    f"""
    SELECT replace(s.id::text, '-', '') AS id
      FROM (SELECT t.id, row_number() OVER (ORDER BY t.id) AS n
              FROM {TABLE} t
             WHERE t.execution_id = :execution_id
               AND {id_after_cursor("t.id")}
             ORDER BY t.id
             LIMIT :rows) s
     WHERE s.n % :chunk_rows = 0
     ORDER BY s.n
    """  # noqa: S608 - the table is a module constant; values are bound
)


def read_export_bounds(
    conn: Connection, execution_id: int, *, after_id: str | None, chunk_rows: int, chunks: int
) -> list[str]:
    """Up to ``chunks`` keyset bounds: the last id of each full chunk of ``chunk_rows``
    endpoints after ``after_id`` (``EndpointDocument.id`` form, ascending)."""
    return list(
        conn.execute(
            _BOUNDS,
            {
                "execution_id": execution_id,
                "after": after_id,
                "rows": chunk_rows * chunks,
                "chunk_rows": chunk_rows,
            },
        ).scalars()
    )
