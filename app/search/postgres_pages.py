"""Server-side projection pages for the PostgreSQL store: one statement per page (PRJ-4).

The generic projection path reads a page of execution endpoints into Python,
builds two current-asset documents per endpoint and sends them back as JSON.
On PostgreSQL the data never needs to leave the server: one statement reads
the keyset page (``ORDER BY id LIMIT n`` after the cursor), computes the
deterministic current-asset ids in SQL and merges both documents with the
very ``ON CONFLICT`` clause the shard statements use (``merge_on_conflict``).
It returns the page size, the new cursor and, item by item, which merges were
not confirmed (``RETURNING`` lists every written key; a key that comes back
missing is a 64-bit collision with another endpoint at the same address, the
only place the views' primary keys let two ids meet, reported as a failed 409
item, never merged).

Ids: ``app.search.ids.current_asset_id`` is SHA-256 over ``b"asset"`` and
length-prefixed UTF-8 parts (scope, owner or ``global``, normalised IP, port,
lower-case transport), first 128 bits as hex; the key is the first 64 bits as
a signed bigint. SQL computes the same bytes with the built-in ``sha256``
(PostgreSQL 11+, no pgcrypto) and ``int4send`` for the 4-byte big-endian
lengths. The one subtle part is the IP text: PostgreSQL prints IPv6 addresses
like Python's ``ipaddress`` except for the forms it writes with an embedded
IPv4 quad (``::a.b.c.d``, ``::ffff:a.b.c.d``), which ``ip_text_sql`` rewrites
into Python's spelling. ``ServerPages.available`` checks SQL against Python on
a set of awkward addresses once per store; if they ever disagree (another
Python or PostgreSQL version), the store says so in an event and the
projection keeps using the generic path.

A page whose documents might exceed the per-operation byte limit (an estimate
that can only over-count) is not written here: the caller falls back to the
generic path, which measures the real bytes and raises ``OperationTooLarge``
(never truncating). Two endpoints of one page sharing a primary key (the same
address and 64-bit key) make PostgreSQL refuse the statement (cardinality
violation); that page also falls back, where the collision is reported per item.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from app.observability import emit
from app.search.ids import current_asset_id, normalise_ip
from app.search.port import PagePublishResult, StoreUnavailable
from app.search.postgres_schema import (
    ASSET_TABLES,
    ENDPOINT_COLUMNS,
    EXECUTION_TABLE,
    FACT_TEXT_NUMBERS,
    fact_text_numbers,
    id_after_cursor,
    merge_on_conflict,
    register_fact_texts,
)
from app.search.postgres_writes import id_collision

GLOBAL_TABLE = ASSET_TABLES["global"]
USER_TABLE = ASSET_TABLES["user"]
# Every column of an endpoint document but the two ids, which the page computes in SQL.
_DOCUMENT_COLUMNS = (*ENDPOINT_COLUMNS[2:], "observed")
MIN_PART = 100  # endpoints per part below which a page is not worth splitting
_TEXT_COLUMNS = ("state", "service", "product", "version", "banner", "hostname", "observation_key")
# Awkward addresses the SQL spelling must agree with Python on (checked once per store).
SELF_CHECK_ADDRESSES = (
    "192.0.2.1",
    "0.0.0.0",  # noqa: S104 - an address to spell, not one to bind
    "255.255.255.255",
    "::",
    "::1",
    "::2",
    "2001:db8::1",
    "2001:db8::",
    "2001:db8:0:1:1:1:1:1",
    "1:0:0:1:0:0:0:1",
    "1:0:0:1:1:0:0:1",
    "fe80::1:2",
    "::ffff:1.2.3.4",
    "::ffff:0.0.0.0",
    "::ffff:0.0.0.1",
    "::ffff:0:1.2.3.4",
    "::1.2.3.4",
    "::0.0.1.2",
    "::0.1.0.0",
    "::0.0.0.2",
    "::1:0.0.0.0",
    "64:ff9b::1.2.3.4",
    "::2:3:4:5:6:7",
    "1::",
    "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
)


def _outcome(future: Future) -> Any:
    try:
        return future.result()
    except BaseException as exc:  # noqa: BLE001 - judged once every range has ended
        return exc


def _python_spells_mapped_dotted() -> bool:
    # Newer Pythons may print IPv4-mapped addresses as ::ffff:a.b.c.d, like PostgreSQL.
    return str(ipaddress.ip_address("::ffff:1.2.3.4")) == "::ffff:1.2.3.4"


def ip_text_sql(column: str) -> str:
    """SQL text of inet ``column`` exactly as ``normalise_ip`` prints it."""
    host = f"host({column})"
    quad = f"substring({host} from '[0-9.]+$')"
    high = f"(split_part({quad}, '.', 1)::int * 256 + split_part({quad}, '.', 2)::int)"
    low = f"(split_part({quad}, '.', 3)::int * 256 + split_part({quad}, '.', 4)::int)"
    mapped = (
        host
        if _python_spells_mapped_dotted()
        else f"'::ffff:' || to_hex({high}) || ':' || to_hex({low})"
    )
    # PostgreSQL writes a quad only after a leading run of zero words: "::a.b.c.d"
    # (words 0-5 zero) or "::ffff:a.b.c.d" (words 0-4 zero, word 5 ffff).
    return (
        f"(CASE WHEN family({column}) = 4 OR strpos({host}, '.') = 0 THEN {host} "
        f"WHEN {host} LIKE '::ffff:%' THEN {mapped} "
        f"WHEN {high} = 0 THEN '::' || to_hex({low}) "
        f"ELSE '::' || to_hex({high}) || ':' || to_hex({low}) END)"
    )


def _part(expression: str) -> str:
    """One length-prefixed part of the id encoding (4-byte big-endian length, UTF-8 bytes).

    Every part is ASCII (digits, an IP's text, a transport), so its character count
    is its UTF-8 byte count."""
    return f"int4send(octet_length({expression})) || convert_to({expression}, 'UTF8')"


def _prefix(*parts: str) -> bytes:
    """The constant leading bytes of an id digest (kind and constant parts)."""
    encoded = b"asset"
    for part in parts:
        raw = part.encode("utf-8")
        encoded += len(raw).to_bytes(4, "big") + raw
    return encoded


GLOBAL_PREFIX = _prefix("global", "global")
USER_PREFIX = _prefix("user")


def _key(digest: str) -> str:
    return f"('x' || encode(substr({digest}, 1, 8), 'hex'))::bit(64)::bigint"


def _uuid(digest: str) -> str:
    return f"CAST(encode(substr({digest}, 1, 16), 'hex') AS uuid)"


def _hex(uuid_expression: str) -> str:
    return f"replace(CAST({uuid_expression} AS text), '-', '')"


def _endpoint_parts(ip_text: str, port: str, transport: str) -> str:
    """The parts every current-asset id ends with: IP text, port, transport."""
    return f"{_part(ip_text)} || {_part(f'CAST({port} AS text)')} || {_part(f'lower({transport})')}"


def _digests(parts: str, owner: str) -> tuple[str, str]:
    """SQL of the global and user digests, given the endpoint parts and the owner column."""
    global_digest = f"sha256(CAST(:global_prefix AS bytea) || {parts})"
    user_digest = (
        f"CASE WHEN {owner} IS NOT NULL THEN sha256(CAST(:user_prefix AS bytea) || "
        f"{_part(f'CAST({owner} AS text)')} || {parts}) END"
    )
    return global_digest, user_digest


def _size_estimate(alias: str) -> str:
    """An upper bound of a document's JSON bytes: escapes make text at most 6x longer."""
    texts = " + ".join(f"coalesce(octet_length({alias}.{c}), 0)" for c in _TEXT_COLUMNS)
    return (
        f"(({texts} + coalesce(octet_length(array_to_string({alias}.tags, '')), 0) "
        f"+ octet_length(CAST({alias}.details AS text))) * 6 "
        f"+ coalesce(cardinality({alias}.tags), 0) * 8 + 1024)"
    )


def page_statement() -> str:
    """One part of a page: the page's bounds, this part's endpoints, both merges, verdicts.

    ``bounds`` reads only the ``(execution_id, id)`` index: the keyset page (``ORDER BY
    id LIMIT n`` after the cursor) reduced to its size and last id. The part then fetches
    just its own endpoints (key modulo the number of parts) of that id range, so parts
    running at once do not each read every row of the page. The transaction commits
    without waiting for its WAL flush (``synchronous_commit`` off, set here rather than
    in a statement of its own): the page is replayable — a crash that loses it also
    loses the checkpoint after it, so the page is merged again, and merges are
    idempotent.
    """
    global_merge, user_merge = merge_on_conflict(GLOBAL_TABLE), merge_on_conflict(USER_TABLE)
    columns = ", ".join((*_DOCUMENT_COLUMNS, *FACT_TEXT_NUMBERS.values()))
    selected = ", ".join(f"t.{c}" for c in _DOCUMENT_COLUMNS)
    global_digest, user_digest = _digests("x.parts", "t.owner_id")
    return f"""
        WITH bounds AS MATERIALIZED (
            SELECT count(*) AS endpoints, (array_agg(r.id ORDER BY r.id DESC))[1] AS last_id
              FROM (SELECT e.id FROM {EXECUTION_TABLE} e
                     WHERE e.execution_id = :execution_id AND {id_after_cursor("e.id")}
                     ORDER BY e.id
                     LIMIT :limit) AS r
        ), hashed AS MATERIALIZED (
            SELECT {_key("d.g")} AS g_key, {_uuid("d.g")} AS g_id,
                   {_key("d.u")} AS u_key, {_uuid("d.u")} AS u_id,
                   {_size_estimate("t")} AS size_estimate, {selected}, t.owner_id,
                   {", ".join(fact_text_numbers("t"))}
              FROM {EXECUTION_TABLE} t
             CROSS JOIN LATERAL (
                   SELECT {_endpoint_parts(ip_text_sql("t.ip"), "t.port", "t.transport")} AS parts
             ) AS x
             CROSS JOIN LATERAL (SELECT {global_digest} AS g, {user_digest} AS u) AS d
             WHERE t.execution_id = :execution_id AND {id_after_cursor("t.id")}
               AND t.id <= (SELECT last_id FROM bounds)
               AND ((t.key % :parts) + :parts) % :parts = :part
        ), verdict AS MATERIALIZED (
            SELECT (SELECT endpoints FROM bounds) AS endpoints,
                   count(*) AS part_endpoints,
                   count(*) FILTER (WHERE size_estimate > :max_bytes) AS oversized,
                   count(u_key) AS owned
              FROM hashed
        ), g AS (
            INSERT INTO {GLOBAL_TABLE} AS t (key, id, {columns})
            SELECT g_key, g_id, {columns} FROM hashed
             WHERE (SELECT oversized FROM verdict) = 0
             ORDER BY g_key
            {global_merge}
            RETURNING t.key
        ), u AS (
            INSERT INTO {USER_TABLE} AS t (key, id, {columns}, owner_id)
            SELECT u_key, u_id, {columns}, owner_id FROM hashed
             WHERE (SELECT oversized FROM verdict) = 0 AND u_key IS NOT NULL
             ORDER BY u_key
            {user_merge}
            RETURNING t.key
        )
        SELECT v.endpoints, v.part_endpoints, v.oversized, v.owned,
               (SELECT {_hex("last_id")} FROM bounds) AS last_id,
               (SELECT count(*) FROM g) AS global_confirmed,
               (SELECT count(*) FROM u) AS user_confirmed,
               ARRAY(SELECT {_hex("g_id")} FROM hashed
                      WHERE v.oversized = 0 AND g_key NOT IN (SELECT key FROM g)) AS global_missing,
               ARRAY(SELECT {_hex("u_id")} FROM hashed
                      WHERE v.oversized = 0 AND u_key IS NOT NULL
                        AND u_key NOT IN (SELECT key FROM u)) AS user_missing,
               set_config('synchronous_commit', 'off', true) AS commit_mode
          FROM verdict v
    """  # noqa: S608 - constant column lists and expressions; values are bound


def fact_texts_statement() -> str:
    """The text fact values of one part of a page the values table lacks, added before
    the part's merge in a transaction of their own (``register_fact_texts``): the same
    bounds and part as ``page_statement``, and as replayable (``synchronous_commit`` off:
    WAL is flushed in order, so a merge that survives a crash has its values too)."""
    return f"""
        WITH bounds AS MATERIALIZED (
            SELECT (array_agg(r.id ORDER BY r.id DESC))[1] AS last_id
              FROM (SELECT e.id FROM {EXECUTION_TABLE} e
                     WHERE e.execution_id = :execution_id AND {id_after_cursor("e.id")}
                     ORDER BY e.id
                     LIMIT :limit) AS r
        ), relaxed AS MATERIALIZED (
            SELECT set_config('synchronous_commit', 'off', true) AS commit_mode
        )
        {
        register_fact_texts(
            f"(SELECT t.details FROM {EXECUTION_TABLE} t CROSS JOIN relaxed "
            f"WHERE t.execution_id = :execution_id AND {id_after_cursor('t.id')} "
            "AND t.id <= (SELECT last_id FROM bounds) "
            "AND ((t.key % :parts) + :parts) % :parts = :part) AS p",
            "p",
        )
    }
    """  # noqa: S608 - constant column lists and expressions; values are bound


def ids_statement() -> str:
    """Ids SQL computes for a list of addresses (the self-check and the equality test)."""
    global_digest, user_digest = _digests(
        _endpoint_parts(ip_text_sql("a.ip"), ":port", ":transport"), "CAST(:owner_id AS bigint)"
    )
    return f"""
        SELECT {ip_text_sql("a.ip")} AS ip_text,
               {_hex(_uuid("d.g"))} AS global_id, {_key("d.g")} AS global_key,
               {_hex(_uuid("d.u"))} AS user_id, {_key("d.u")} AS user_key
          FROM unnest(CAST(:ips AS inet[])) WITH ORDINALITY AS a(ip, n)
          CROSS JOIN LATERAL (SELECT {global_digest} AS g, {user_digest} AS u) AS d
         ORDER BY a.n
    """  # noqa: S608 - constant column lists and expressions; values are bound


class ServerPages:
    """The server-side page publish of one ``PostgresStore`` (``run`` is its ``_run``).

    A page is one statement, or — with ``concurrency`` > 1 (``bulk_max_concurrency``)
    and a page big enough — that many statements run at once on separate pooled
    connections, each reading the same page and merging the endpoints whose key falls
    in its part (key modulo the number of parts). The merge is CPU work in the server
    and the parts touch disjoint rows, so they use several cores without waiting on
    each other. The page is done when every part is; each part is its own short
    transaction (a failed one fails the page, and the replay is idempotent).
    """

    def __init__(self, run: Any, *, concurrency: int = 1):
        self._run = run
        self._sql = sa.text(page_statement())
        self._fact_texts_sql = sa.text(fact_texts_statement())
        self._ids_sql = sa.text(ids_statement())
        self._available: bool | None = None
        self._lock = threading.Lock()
        self._concurrency = max(1, concurrency)
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def sql_ids(
        self, ips: Sequence[str], *, port: int, transport: str, owner_id: int
    ) -> list[dict[str, Any]]:
        """What SQL makes of ``ips``: ip_text, global/user id and key, in input order."""
        params = {"ips": list(ips), "port": port, "transport": transport, "owner_id": owner_id}
        params.update(global_prefix=GLOBAL_PREFIX, user_prefix=USER_PREFIX)
        rows = self._run(lambda conn: conn.execute(self._ids_sql, params).all())
        return [dict(row._mapping) for row in rows]

    def available(self) -> bool:
        """Whether SQL spells ids exactly like Python here (checked once)."""
        with self._lock:
            if self._available is None:
                self._available = self._self_check()
            return self._available

    def _self_check(self) -> bool:
        owner = 7
        found = self.sql_ids(SELF_CHECK_ADDRESSES, port=443, transport="tcp", owner_id=owner)
        for address, row in zip(SELF_CHECK_ADDRESSES, found, strict=True):
            ip = normalise_ip(address)
            expected = (
                ip,
                current_asset_id("global", None, ip, 443, "tcp"),
                current_asset_id("user", owner, ip, 443, "tcp"),
            )
            if (row["ip_text"], row["global_id"], row["user_id"]) != expected:
                emit(
                    "SearchStoreServerPagesDisabled",
                    level=logging.WARNING,
                    reason="SQL and Python spell a current-asset id differently",
                    address=address,
                    sql_ip_text=row["ip_text"],
                    python_ip_text=ip,
                )
                return False
        return True

    def publish(
        self,
        execution_id: int,
        *,
        after_id: str | None,
        limit: int,
        max_bytes: int,
        cancel: threading.Event | None,
    ) -> PagePublishResult | None:
        if not self.available():
            return None
        if cancel is not None and cancel.is_set():
            raise StoreUnavailable("publish cancelled")
        parts = self._concurrency if limit >= MIN_PART * self._concurrency else 1
        if parts == 1:
            return self._publish_part(execution_id, after_id, limit, max_bytes, 1, 0)
        pool = self._executor()
        futures = [
            pool.submit(self._publish_part, execution_id, after_id, limit, max_bytes, parts, part)
            for part in range(parts)
        ]
        done = [_outcome(future) for future in futures]  # wait for all before judging
        for outcome in done:
            if isinstance(outcome, BaseException):
                raise outcome
        if any(outcome is None for outcome in done):
            return None
        results = [outcome for outcome in done if isinstance(outcome, PagePublishResult)]
        if len({(r.endpoints, r.last_id) for r in results}) != 1:
            # The page itself differed between the parts' snapshots: publish it again.
            raise StoreUnavailable("the execution's endpoints changed during the page")
        return PagePublishResult(
            endpoints=results[0].endpoints,
            last_id=results[0].last_id,
            operations=sum(r.operations for r in results),
            confirmed=sum(r.confirmed for r in results),
            failed=tuple(item for r in results for item in r.failed),
            requests=len(results),
        )

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self._concurrency, thread_name_prefix="pg-page"
                )
            return self._pool

    def _publish_part(
        self,
        execution_id: int,
        after_id: str | None,
        limit: int,
        max_bytes: int,
        parts: int,
        part: int,
    ) -> PagePublishResult | None:
        params = {
            "execution_id": execution_id,
            "after": after_id,
            "parts": parts,
            "part": part,
            "limit": limit,
            "max_bytes": max_bytes,
            "global_prefix": GLOBAL_PREFIX,
            "user_prefix": USER_PREFIX,
        }
        # The part's new text fact values, committed before its merge reads their numbers.
        self._run(
            lambda conn: conn.execute(self._fact_texts_sql, params),
            statement="register_fact_texts",
        )
        try:
            row = self._run(lambda conn: conn.execute(self._sql, params).one())
        except sa_exc.DBAPIError as exc:
            if getattr(exc.orig, "pgcode", None) == "21000":
                # Two endpoints of this page share a 64-bit key: the generic path reports it.
                return None
            raise
        if row.oversized:
            return None
        failed = tuple(
            id_collision(document_id, table)
            for table, missing in (
                (GLOBAL_TABLE, row.global_missing),
                (USER_TABLE, row.user_missing),
            )
            for document_id in missing
        )
        for item in failed:
            emit("SearchStoreIdCollision", level=logging.ERROR, table=item.index, id=item.id)
        return PagePublishResult(
            endpoints=row.endpoints,
            last_id=row.last_id if row.endpoints else after_id,
            operations=row.part_endpoints + row.owned,
            confirmed=row.global_confirmed + row.user_confirmed,
            failed=failed,
            requests=1,
        )
