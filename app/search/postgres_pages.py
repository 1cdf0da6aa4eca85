"""Server-side projection pages for the PostgreSQL store: one statement per page (PRJ-4).

The generic projection path reads a page of execution endpoints into Python,
builds two current-asset documents per endpoint and sends them back as JSON.
On PostgreSQL the data never needs to leave the server: one statement reads
the keyset page (``ORDER BY id LIMIT n`` after the cursor), computes the
deterministic current-asset ids in SQL and merges both documents with the
very ``ON CONFLICT`` clause the shard statements use (``merge_on_conflict``).
It returns the page size, the new cursor and, item by item, which merges were
not confirmed (``RETURNING`` lists every written key; a key that comes back
missing is a 64-bit collision with another endpoint, reported as a failed
409 item, never merged).

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
(never truncating). Two endpoints of one page sharing a 64-bit key make
PostgreSQL refuse the statement (cardinality violation); that page also falls
back, where the collision is reported per item.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from app.observability import emit
from app.search.ids import current_asset_id, normalise_ip
from app.search.port import BulkItemResult, PagePublishResult, StoreUnavailable

EXECUTION_TABLE = "search_execution_endpoints"
GLOBAL_TABLE = "search_assets_global"
USER_TABLE = "search_assets_user"

_DOCUMENT_COLUMNS = (
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
    """One length-prefixed part of the id encoding (4-byte big-endian length, UTF-8 bytes)."""
    utf8 = f"convert_to({expression}, 'UTF8')"
    return f"int4send(octet_length({utf8})) || {utf8}"


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


def _digests(alias: str) -> tuple[str, str]:
    """SQL of the global and user digests of the endpoint row ``alias``."""
    parts = (
        f"{_part(ip_text_sql(f'{alias}.ip'))} || {_part(f'CAST({alias}.port AS text)')} "
        f"|| {_part(f'lower({alias}.transport)')}"
    )
    global_digest = f"sha256(CAST(:global_prefix AS bytea) || {parts})"
    user_digest = (
        f"CASE WHEN {alias}.owner_id IS NOT NULL THEN sha256(CAST(:user_prefix AS bytea) || "
        f"{_part(f'CAST({alias}.owner_id AS text)')} || {parts}) END"
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


def page_statement(merge_clause: str) -> str:
    columns = ", ".join(_DOCUMENT_COLUMNS)
    selected = ", ".join(f"t.{c}" for c in _DOCUMENT_COLUMNS)
    global_digest, user_digest = _digests("p")
    return f"""
        WITH page AS MATERIALIZED (
            SELECT t.id AS source_id, {selected}, t.owner_id
              FROM {EXECUTION_TABLE} t
             WHERE t.execution_id = :execution_id
               AND (CAST(:after AS uuid) IS NULL OR t.id > CAST(:after AS uuid))
             ORDER BY t.id
             LIMIT :limit
        ), keyed AS MATERIALIZED (
            SELECT p.*, {global_digest} AS g_digest, {user_digest} AS u_digest,
                   {_size_estimate("p")} AS size_estimate
              FROM page p
        ), verdict AS MATERIALIZED (
            SELECT count(*) AS endpoints,
                   count(*) FILTER (WHERE size_estimate > :max_bytes) AS oversized,
                   count(u_digest) AS owned
              FROM keyed
        ), source AS MATERIALIZED (
            SELECT {_key("k.g_digest")} AS g_key, {_uuid("k.g_digest")} AS g_id,
                   {_key("k.u_digest")} AS u_key, {_uuid("k.u_digest")} AS u_id, k.*
              FROM keyed k
             WHERE (SELECT oversized FROM verdict) = 0
        ), g AS (
            INSERT INTO {GLOBAL_TABLE} AS t (key, id, {columns})
            SELECT g_key, g_id, {columns} FROM source ORDER BY g_key
            {merge_clause}
            RETURNING t.key
        ), u AS (
            INSERT INTO {USER_TABLE} AS t (key, id, {columns}, owner_id)
            SELECT u_key, u_id, {columns}, owner_id FROM source
             WHERE u_key IS NOT NULL ORDER BY u_key
            {merge_clause}
            RETURNING t.key
        )
        SELECT v.endpoints, v.oversized, v.owned,
               (SELECT {_hex("source_id")} FROM page ORDER BY source_id DESC LIMIT 1) AS last_id,
               (SELECT count(*) FROM g) AS global_confirmed,
               (SELECT count(*) FROM u) AS user_confirmed,
               ARRAY(SELECT {_hex("g_id")} FROM source
                      WHERE g_key NOT IN (SELECT key FROM g)) AS global_missing,
               ARRAY(SELECT {_hex("u_id")} FROM source
                      WHERE u_key IS NOT NULL AND u_key NOT IN (SELECT key FROM u)) AS user_missing
          FROM verdict v
    """


def ids_statement() -> str:
    """Ids SQL computes for a list of addresses (the self-check and the equality test)."""
    global_digest, user_digest = _digests("a")
    return f"""
        SELECT {ip_text_sql("a.ip")} AS ip_text,
               {_hex(_uuid("d.g"))} AS global_id, {_key("d.g")} AS global_key,
               {_hex(_uuid("d.u"))} AS user_id, {_key("d.u")} AS user_key
          FROM (SELECT i.ip, i.n, CAST(:port AS integer) AS port,
                       CAST(:transport AS text) AS transport, CAST(:owner_id AS bigint) AS owner_id
                  FROM unnest(CAST(:ips AS inet[])) WITH ORDINALITY AS i(ip, n)) AS a
          CROSS JOIN LATERAL (SELECT {global_digest} AS g, {user_digest} AS u) AS d
         ORDER BY a.n
    """


class ServerPages:
    """The server-side page publish of one ``PostgresStore`` (``run`` is its ``_run``)."""

    def __init__(self, run: Any, merge_clause: str):
        self._run = run
        self._sql = sa.text(page_statement(merge_clause))
        self._ids_sql = sa.text(ids_statement())
        self._available: bool | None = None
        self._lock = threading.Lock()

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
        params = {
            "execution_id": execution_id,
            "after": after_id,
            "limit": limit,
            "max_bytes": max_bytes,
            "global_prefix": GLOBAL_PREFIX,
            "user_prefix": USER_PREFIX,
        }
        try:
            row = self._run(lambda conn: conn.execute(self._sql, params).one(), relaxed_commit=True)
        except sa_exc.DBAPIError as exc:
            if getattr(exc.orig, "pgcode", None) == "21000":
                # Two endpoints of this page share a 64-bit key: the generic path reports it.
                return None
            raise
        if row.oversized:
            return None
        failed = tuple(
            BulkItemResult(
                document_id,
                table,
                409,
                "id_collision",
                "another document with the same 64-bit key exists; not merged",
            )
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
            operations=row.endpoints + row.owned,
            confirmed=row.global_confirmed + row.user_confirmed,
            failed=failed,
            requests=1,
        )
