"""One execution's change set, computed set-based in SQL (ANA-2, ANA-3).

``analysis_assets`` holds, per owner and endpoint (ip, port, transport), the
values the analysis last recorded (state, service, product, version, banner
hash), whether the endpoint is ``open`` or ``gone``, and since when. One
statement compares an execution's endpoints (its *sightings*) with it:

* ``new`` — no row for the owner yet: inserted open;
* ``changed`` — a recorded value differs: the row takes the new values and the
  change row keeps old and new;
* ``reappeared`` — the row was gone: open again;
* ``gone`` — an open row inside the execution's scanned scope (address inside
  one of its address targets, port inside its port ranges, transport among its
  transports) that the execution did not see.

Whatever the execution's size it is a handful of joins, never a Python loop.

What may decide what (ANA-3):
* only a succeeded ports execution with address targets checks absence: a
  failed, cancelled or otherwise unfinished one, or a DNS-only one, marks
  nothing gone, and neither does any execution of a run cancelled before its
  analysis (a succeeded final is only accepted once every batch of its
  upload is confirmed, so a succeeded execution is never partial);
* an execution that finished before the newest one already analysed for the
  owner (its final committed late) is *superseded*: it may add endpoints nobody
  recorded yet, but changes, gone and reappeared are left to the newer
  decisions, so an older execution never overrides a newer one. Finish time,
  then execution id, orders executions (``analysis_owner_watermarks``).

The sightings come from the search store: the PostgreSQL adapter offers them
as SQL (``execution_sightings_sql``) that runs inside this statement; any
other store is read in keyset pages and staged in ``analysis_sightings``.

Bounded statements: an execution may hold millions of endpoints, and a rescan
of a wide scope may find millions absent, while every statement must end
within the database's statement timeout. So the statement runs once per
*slice* of the address order, each slice holding at most ``[analysis]
slice_endpoints`` sightings and as many of the owner's endpoints in scope
(plus the other ports of its last address), all inside the one transaction:
the change set still commits whole or not at all. Slices are disjoint ranges
of addresses, and every comparison is between rows of the same address, so
the slices together compute exactly what one statement would. An execution
with more sightings than a slice is first copied from the store into
``analysis_sightings`` in keyset pages (the staged copy has the address
order the slices need).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.analysis import queue
from app.analysis.queue import AnalysisClaim
from app.db import transaction
from app.search.documents import FIELD_RULES
from app.search.port import SearchStore

CHANGE_KINDS = ("new", "changed", "gone", "reappeared")

STAGED_SIGHTINGS_SQL = """
    SELECT ip, port, transport, state, service, product, version, banner_hash, hostname,
           cert_sha256
      FROM analysis_sightings
     WHERE execution_id = :execution_id
"""

# The values the analysis compares, each with its rule (``app.search.documents.FIELD_RULES``,
# docs/changes.md): ``always`` values are reported by every scan, so any difference is a
# change; a ``when_probed`` value missing from a sighting was not probed by that scan, so
# it is no change and the last observed value stays. ``changed`` therefore means: a value
# observed both times that differs. The banner is compared by its hash.
ANALYSIS_FIELDS: dict[str, str] = {
    "state": FIELD_RULES["state"],
    "service": FIELD_RULES["service"],
    "product": FIELD_RULES["product"],
    "version": FIELD_RULES["version"],
    "banner_hash": FIELD_RULES["banner"],
    "hostname": FIELD_RULES["hostname"],
    "cert_sha256": FIELD_RULES["cert_sha256"],
}
_VALUES = tuple(ANALYSIS_FIELDS)


# An execution's change set as other domains may read it (the alerts' rule evaluation
# runs it inside the analysis's transaction): one row per change, old and new values.
_CHANGE_VALUES = ", ".join(f"old_{v}, new_{v}" for v in ANALYSIS_FIELDS)
CHANGE_SET_SQL = (
    "SELECT id, owner_id, execution_id, task_id, finished_at, kind, ip, port, transport, "  # noqa: S608 - constants
    f"{_CHANGE_VALUES} FROM analysis_changes WHERE execution_id = :execution_id"
)


def field_changed_sql(name: str, old: str, new: str) -> str:
    """SQL: field ``name`` changed from the value ``old`` to ``new``. A probed field
    changes only when both sides observed it and differ: its first observation (old
    null, as after a ``quick`` profile's scans) or a scan that did not probe it (new
    null) is no change (docs/changes.md)."""
    test = f"{new} IS DISTINCT FROM {old}"
    if ANALYSIS_FIELDS[name] == "always":
        return test
    return f"({new} IS NOT NULL AND {old} IS NOT NULL AND {test})"


def field_changed(name: str, old: Any, new: Any) -> bool:
    """``field_changed_sql`` on values read back (a change's ``changed_fields``)."""
    if ANALYSIS_FIELDS[name] == "always":
        return old != new
    return old is not None and new is not None and old != new


def differs(new: str, old: str) -> str:
    """SQL: the sighting ``new`` would change what is recorded in ``old``: a value it
    probed that differs, a first observation included (which is recorded, but is no
    change: ``really_changed``)."""
    tests = []
    for name, rule in ANALYSIS_FIELDS.items():
        test = f"{new}.{name} IS DISTINCT FROM {old}.{name}"
        tests.append(test if rule == "always" else f"({new}.{name} IS NOT NULL AND {test})")
    return "(" + " OR ".join(tests) + ")"


def really_changed(alias: str) -> str:
    """SQL: row ``alias`` of the analysis (its ``old_<field>`` and recorded ``<field>``
    values) is a change by the field rules (``field_changed_sql``)."""
    tests = [field_changed_sql(v, f"{alias}.old_{v}", f"{alias}.{v}") for v in ANALYSIS_FIELDS]
    return "(" + " OR ".join(tests) + ")"


def _kept(new: str, old: str, name: str) -> str:
    """SQL: the value recorded after a sighting: an unprobed value keeps the old one."""
    if ANALYSIS_FIELDS[name] == "always":
        return new
    return f"coalesce({new}, {old})"


def _analysis_sql(sightings_sql: str) -> str:
    new_values = ", ".join(f"j.{v}" for v in _VALUES)
    old_values = ", ".join(f"j.old_{v}" for v in _VALUES)
    set_values = ", ".join(f"{v} = j.{v}" for v in _VALUES)
    change_columns = ", ".join(
        ["owner_id", "execution_id", "task_id", "finished_at", "kind", "ip", "port", "transport"]
        + [f"old_{v}" for v in _VALUES]
        + [f"new_{v}" for v in _VALUES]
    )
    nulls = ", ".join("NULL" for _ in _VALUES)
    gone_values = ", ".join(f"g.{v}" for v in _VALUES)
    s_values = ", ".join(f"s.{v}" for v in _VALUES)
    a_old = ", ".join(f"a.{v} AS old_{v}" for v in _VALUES)
    picked = {v: f"(CASE WHEN c.a_ip IS NOT NULL THEN c.old_{v} ELSE o.{v} END)" for v in _VALUES}
    picked_old = ", ".join(f"{picked[v]} AS old_{v}" for v in _VALUES)
    # What the endpoint's values become: the sighting's, an unprobed one kept from before.
    c_values = ", ".join(f"{_kept(f'c.{v}', picked[v], v)} AS {v}" for v in _VALUES)
    # One hash FULL JOIN of the sightings with the owner's endpoints inside the scope
    # finds, in one pass, what is absent and what differs; only those rows leave it (an
    # unchanged rescan is compared and dropped inside the join). Sightings outside the
    # scope (or every sighting when absence is not checked) are looked up by key after.
    return f"""
    WITH scope AS (
        SELECT net,
               set_masklen(network(net), CASE family(net) WHEN 4 THEN 32 ELSE 128 END) AS lo,
               set_masklen(broadcast(net), CASE family(net) WHEN 4 THEN 32 ELSE 128 END) AS hi
          FROM unnest(CAST(:networks AS inet[])) AS n(net)
         WHERE :check_absence
    ),
    scoped AS (
        -- One range of the primary key (owner_id, ip, …) per target network. As a plain
        -- join the planner cannot see how narrow the ranges are (their bounds come from
        -- the networks) and read the whole table once instead: linear in the owner's
        -- endpoints, 1.6 s at a million for a 10,000-endpoint run. OFFSET 0 keeps the
        -- subquery from being flattened back into that join.
        SELECT a.*
          FROM scope c
          CROSS JOIN LATERAL (
              SELECT * FROM analysis_assets a
               WHERE a.owner_id = :owner_id AND a.ip BETWEEN c.lo AND c.hi
                 AND a.ip > CAST(:after_ip AS inet) AND a.ip <= CAST(:upto_ip AS inet)
                 AND a.ip <<= c.net
                 AND a.port <@ CAST(:ports AS int4multirange)
                 AND a.transport = ANY(CAST(:transports AS text[]))
              OFFSET 0
          ) a
    ),
    compared AS MATERIALIZED (
        SELECT s.ip AS s_ip, s.port AS s_port, s.transport AS s_transport, {s_values},
               a.ip AS a_ip, a.port AS a_port, a.transport AS a_transport,
               a.status AS a_status, {a_old}
          FROM (SELECT * FROM ({sightings_sql}) s0
                 WHERE s0.ip > CAST(:after_ip AS inet) AND s0.ip <= CAST(:upto_ip AS inet)) s
          FULL JOIN scoped a ON a.ip = s.ip AND a.port = s.port AND a.transport = s.transport
         WHERE (s.ip IS NULL AND a.status = 'open')
            OR (s.ip IS NOT NULL
                AND (a.ip IS NULL OR a.status = 'gone'
                     OR {differs("s", "a")}))
    ),
    j AS MATERIALIZED (
        SELECT c.s_ip AS ip, c.s_port AS port, c.s_transport AS transport, {c_values},
               c.a_ip IS NULL AND o.owner_id IS NULL AS is_new,
               CASE WHEN c.a_ip IS NOT NULL THEN c.a_status ELSE o.status END AS old_status,
               {picked_old}
          FROM compared c
          -- A lookup by key per row (few rows; LATERAL keeps the planner from hashing
          -- the owner's whole state for them).
          LEFT JOIN LATERAL (
              SELECT * FROM analysis_assets o
               WHERE c.a_ip IS NULL AND o.owner_id = :owner_id AND o.ip = c.s_ip
                 AND o.port = c.s_port AND o.transport = c.s_transport
          ) o ON true
         WHERE c.s_ip IS NOT NULL
           AND (c.a_ip IS NOT NULL OR o.owner_id IS NULL OR o.status = 'gone'
                OR {differs("c", "o")})
    ),
    inserted AS (
        INSERT INTO analysis_assets (owner_id, ip, port, transport, {", ".join(_VALUES)},
                                     status, first_execution_id, changed_execution_id)
        SELECT :owner_id, j.ip, j.port, j.transport, {new_values}, 'open',
               :execution_id, :execution_id
          FROM j WHERE j.is_new
        ON CONFLICT DO NOTHING
        RETURNING ip, port, transport
    ),
    touched AS MATERIALIZED (
        SELECT * FROM j WHERE :current AND NOT j.is_new
    ),
    updated AS (
        UPDATE analysis_assets a
           SET {set_values}, status = 'open', gone_since = NULL, gone_execution_id = NULL,
               -- A first observation is recorded, but the endpoint did not change.
               changed_execution_id = CASE WHEN j.old_status = 'gone' OR {really_changed("j")}
                                           THEN :execution_id
                                           ELSE a.changed_execution_id END
          FROM touched j
         WHERE a.owner_id = :owner_id AND a.ip = j.ip AND a.port = j.port
           AND a.transport = j.transport
        RETURNING a.ip
    ),
    absent AS (
        SELECT a_ip AS ip, a_port AS port, a_transport AS transport
          FROM compared WHERE s_ip IS NULL
    ),
    gone AS (
        UPDATE analysis_assets a
           SET status = 'gone', gone_since = :finished_at, gone_execution_id = :execution_id,
               changed_execution_id = :execution_id
          FROM absent g
         WHERE a.owner_id = :owner_id AND a.ip = g.ip AND a.port = g.port
           AND a.transport = g.transport
        RETURNING a.ip, a.port, a.transport, {", ".join(f"a.{v}" for v in _VALUES)}
    ),
    recorded AS (
        INSERT INTO analysis_changes ({change_columns})
        SELECT :owner_id, :execution_id, :task_id, :finished_at, 'new', j.ip, j.port,
               j.transport, {nulls}, {new_values}
          FROM j WHERE j.is_new
        UNION ALL
        SELECT :owner_id, :execution_id, :task_id, :finished_at,
               CASE WHEN j.old_status = 'gone' THEN 'reappeared' ELSE 'changed' END,
               j.ip, j.port, j.transport, {old_values}, {new_values}
          FROM touched j
         WHERE j.old_status = 'gone' OR {really_changed("j")}
        UNION ALL
        SELECT :owner_id, :execution_id, :task_id, :finished_at, 'gone', g.ip, g.port,
               g.transport, {gone_values}, {nulls}
          FROM gone g
        RETURNING kind
    )
    SELECT kind, count(*) AS n FROM recorded GROUP BY kind
    """  # noqa: S608 - fragments are module constants; values are bound


# The ends of the address order: every host address sorts after the first (a /0
# network sorts before its own first address) and none after the last.
BEFORE_ALL_ADDRESSES = "0.0.0.0/0"
LAST_ADDRESS = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"

# Where the next slice ends: the address of the ``:skip``-th sighting after ``:after_ip``
# (staged copy only), or of the ``:skip``-th endpoint of the owner between the scope's
# outer bounds (only when absence is checked), whichever comes first; NULL when neither
# has that many left, so the slice runs to the end. Both read a primary-key range in
# order and stop at the row wanted. The scope's bounds are given as values, not computed
# in the statement: from a computed bound the planner cannot tell how many of the owner's
# endpoints lie in range, and at ten million endpoints it chose to walk all of them in
# address order from the first, two seconds for a scope of a few hundred addresses.
_NEXT_SLICE_END_SQL = """
    SELECT least(
        (SELECT s.ip FROM analysis_sightings s
          WHERE :staged AND s.execution_id = :execution_id AND s.ip > CAST(:after_ip AS inet)
          ORDER BY s.ip OFFSET :skip LIMIT 1),
        (SELECT a.ip FROM analysis_assets a
          WHERE :check_absence AND a.owner_id = :owner_id AND a.ip > CAST(:after_ip AS inet)
            AND a.ip >= CAST(:scope_lo AS inet) AND a.ip <= CAST(:scope_hi AS inet)
          ORDER BY a.ip OFFSET :skip LIMIT 1))
"""


@dataclass(frozen=True)
class ExecutionScope:
    """What an execution scanned, as the analysis's SQL parameters."""

    networks: tuple[str, ...]  # address targets as CIDR text (domains excluded)
    ports: str  # int4multirange text, e.g. "{[22,23),[80,81)}"
    transports: tuple[str, ...]

    def address_bounds(self) -> tuple[str, str]:
        """The first and the last address of all the networks, in inet order (every IPv4
        address before every IPv6 one); the whole order for no network."""
        if not self.networks:
            return BEFORE_ALL_ADDRESSES, LAST_ADDRESS
        parsed = [ipaddress.ip_network(n) for n in self.networks]
        low = min(parsed, key=lambda n: (n.version, int(n.network_address)))
        high = max(parsed, key=lambda n: (n.version, int(n.broadcast_address)))
        return str(low.network_address), str(high.broadcast_address)


# Executions whose endpoints are compared with the owner's known ones: a scan, and an
# imported file (its execution names no targets or ports, so its scope is empty and it
# never concludes absence: a file says what was found, not everywhere that was looked).
ANALYSED_KINDS = ("ports", "import")


def is_analysable(claim: AnalysisClaim) -> bool:
    return claim.status == "succeeded" and claim.kind in ANALYSED_KINDS


def execution_scope(claim: AnalysisClaim) -> ExecutionScope:
    """Address targets, port ranges and transports of the claimed execution.

    Domain targets name no address by themselves (their addresses become a
    child task), so they add nothing to the scope: absence is only concluded
    where the execution provably looked.
    """
    parsed: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for target in claim.targets:
        try:
            parsed.append(ipaddress.ip_network(target.strip(), strict=False))
        except ValueError:
            continue
    # Overlapping targets collapse, so no endpoint of the scope is joined twice.
    networks = [
        str(network)
        for version in (4, 6)
        for network in ipaddress.collapse_addresses(n for n in parsed if n.version == version)
    ]
    ranges = []
    for part in (claim.ports or "").split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            lo, hi = int(low), int(high or low)
        except ValueError:
            continue
        if 1 <= lo <= hi <= 65535:
            ranges.append(f"[{lo},{hi + 1})")
    return ExecutionScope(
        networks=tuple(networks),
        ports="{" + ",".join(ranges) + "}",
        transports=tuple(t.lower() for t in claim.transports),
    )


@dataclass(frozen=True)
class ChangeCounts:
    new: int = 0
    changed: int = 0
    gone: int = 0
    reappeared: int = 0
    absence_checked: bool = False
    superseded: bool = False
    slices: int = 0  # statements the change set took (0: nothing to analyse)

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in CHANGE_KINDS}

    @property
    def total(self) -> int:
        """The change set's rows, all kinds."""
        return sum(self.as_dict().values())


def stage_sightings(
    claim: AnalysisClaim,
    store: SearchStore,
    *,
    page_size: int,
    check_lease: Callable[[], None],
) -> None:
    """Copy the execution's endpoints from a store elsewhere into ``analysis_sightings``.

    Pages are read without a database connection held, then inserted in one
    set-based statement each; a restaged execution starts from an empty set.
    """
    from app.search.documents import guessed
    from app.search.encoding import dumps
    from app.search.endpoint_facts import certificate_fingerprint

    drop_staged(claim.execution_id)
    after: str | None = None
    while True:
        check_lease()
        docs = store.read_execution_endpoints(claim.execution_id, after_id=after, limit=page_size)
        if not docs:
            return
        rows = dumps(
            [
                {
                    "ip": d.ip,
                    "port": d.port,
                    "transport": d.transport,
                    "state": d.state,
                    "service": None if guessed(d, "service") else d.service,
                    "product": d.product,
                    "version": d.version,
                    "banner": d.banner,
                    "hostname": d.hostname,
                    "cert_sha256": certificate_fingerprint(d.details),
                }
                for d in docs
            ]
        )
        with transaction() as conn:
            conn.execute(
                sa.text(
                    """
                    INSERT INTO analysis_sightings (execution_id, ip, port, transport, state,
                                                    service, product, version, banner_hash,
                                                    hostname, cert_sha256)
                    SELECT :e, ip, port, transport, state, service, product, version, md5(banner),
                           hostname, cert_sha256
                      FROM json_to_recordset(CAST(:rows AS json))
                        AS r(ip inet, port integer, transport text, state text, service text,
                             product text, version text, banner text, hostname text,
                             cert_sha256 text)
                    ON CONFLICT DO NOTHING
                    """
                ),
                {"e": claim.execution_id, "rows": rows},
            )
        after = docs[-1].id
        if len(docs) < page_size:
            return


def sightings_exceed(claim: AnalysisClaim, sightings_sql: str, limit: int) -> bool:
    """Whether the execution has more than ``limit`` sightings (reads at most limit + 1)."""
    with transaction() as conn:
        found = conn.execute(
            sa.text(f"SELECT count(*) FROM (SELECT 1 FROM ({sightings_sql}) s LIMIT :n) c"),  # noqa: S608 - the store's constant SQL
            {"execution_id": claim.execution_id, "n": limit + 1},
        ).scalar_one()
    return int(found) > limit


def stage_sightings_from_database(
    claim: AnalysisClaim, page_sql: str, *, page_size: int, check_lease: Callable[[], None]
) -> int:
    """Copy the execution's sightings from the store's tables into ``analysis_sightings``.

    One short transaction per keyset page of the store's ``execution_sightings_page_sql``,
    so no statement grows with the execution; returns the rows staged.
    """
    drop_staged(claim.execution_id)
    after: str | None = None
    staged = 0
    while True:
        check_lease()
        with transaction() as conn:
            page = conn.execute(
                sa.text(
                    f"""
                    WITH page AS MATERIALIZED ({page_sql}),
                    copied AS (
                        INSERT INTO analysis_sightings (execution_id, ip, port, transport, state,
                                                        service, product, version, banner_hash,
                                                        hostname, cert_sha256)
                        SELECT :execution_id, ip, port, transport, state, service, product,
                               version, banner_hash, hostname, cert_sha256
                          FROM page
                         -- In the primary key's order: appends to its index, not inserts
                         -- all over it.
                         ORDER BY ip, port, transport
                        ON CONFLICT DO NOTHING
                    )
                    SELECT count(*) AS n, CAST(max(CAST(id AS text)) AS text) AS last FROM page
                    """  # noqa: S608 - the store's constant SQL; values are bound
                ),
                {"execution_id": claim.execution_id, "after_id": after, "limit": page_size},
            ).one()
        staged += int(page.n)
        if page.n < page_size:
            return staged
        after = page.last


def _take_watermark(conn: Connection, claim: AnalysisClaim) -> bool:
    """Lock the owner's watermark; True when this execution is the newest so far."""
    conn.execute(
        sa.text(
            "INSERT INTO analysis_owner_watermarks (owner_id, finished_at, execution_id) "
            "VALUES (:o, :f, :e) ON CONFLICT DO NOTHING"
        ),
        {"o": claim.owner_id, "f": claim.finished_at, "e": claim.execution_id},
    )
    current = conn.execute(
        sa.text(
            """
            SELECT (CAST(:f AS timestamptz), CAST(:e AS bigint)) >= (finished_at, execution_id)
              FROM analysis_owner_watermarks WHERE owner_id = :o FOR UPDATE
            """
        ),
        {"o": claim.owner_id, "f": claim.finished_at, "e": claim.execution_id},
    ).scalar()
    if current:
        conn.execute(
            sa.text(
                "UPDATE analysis_owner_watermarks SET finished_at = :f, execution_id = :e "
                "WHERE owner_id = :o"
            ),
            {"o": claim.owner_id, "f": claim.finished_at, "e": claim.execution_id},
        )
    return bool(current)


# Work that commits with a change set, inside its transaction: the entry points wire the
# alerts' messages here (``app.alerts.evaluate.change_set_hook``), so the analysis does not
# import the domains that read its change sets. It runs for every analysed execution, an
# empty change set included: the last one of a run is what sends the run's digest.
ChangeSetHook = Callable[[Connection, AnalysisClaim, "ChangeCounts"], object]
# Work that follows a committed change set, outside any transaction (the alerts' search
# filters on a store that cannot test assets inside one, ``app.alerts.searched_changes``).
# It must not fail the analysis: what it leaves undone, its owner finishes by itself.
ChangeSetFollowUp = Callable[[AnalysisClaim], None]


def analyse(
    claim: AnalysisClaim,
    *,
    sightings_sql: str | None,
    on_change_set: ChangeSetHook | None = None,
    slice_endpoints: int = 250_000,
) -> ChangeCounts:
    """Compute and commit the execution's change set and summary; moves the row to ``publish``.

    One transaction: ownership is proven (and the queue row locked) first, so a
    worker that lost its claim writes nothing, and a crash leaves nothing behind.
    ``sightings_sql`` is the store's own SELECT, or ``None`` for the staged copy;
    the store's SELECT is only given for an execution of at most ``slice_endpoints``
    sightings (``sightings_exceed``), larger ones are staged first. The change set
    is computed in slices of at most ``slice_endpoints`` endpoints each (module
    docstring). ``on_change_set`` (the alert messages, docs/alerts.md) runs in this
    same transaction: no change set without its alerts, no alert without its change.
    """
    scope = execution_scope(claim)
    analysable = is_analysable(claim)
    with transaction(stage="analysis_execution") as conn:
        queue.hold(conn, claim, phase="analyse")
        # Hash joins over a million sightings want memory rather than disk batches.
        conn.execute(sa.text("SET LOCAL work_mem = '256MB'"))
        counts = ChangeCounts()
        if analysable:
            current = _take_watermark(conn, claim)
            # A cancelled run never marks endpoints gone (issue 33).
            check_absence = (
                current
                and not claim.run_cancelled
                and bool(scope.networks)
                and bool(scope.transports)
            )
            params = {
                "owner_id": claim.owner_id,
                "execution_id": claim.execution_id,
                "task_id": claim.task_id,
                "finished_at": claim.finished_at,
                "current": current,
                "check_absence": check_absence,
                "networks": list(scope.networks),
                "ports": scope.ports,
                "transports": list(scope.transports),
            }
            scope_lo, scope_hi = scope.address_bounds()
            statement = sa.text(_analysis_sql(sightings_sql or STAGED_SIGHTINGS_SQL))
            found: dict[str, int] = dict.fromkeys(CHANGE_KINDS, 0)
            slices = 0
            after = BEFORE_ALL_ADDRESSES
            while after is not None:
                upto = conn.execute(
                    sa.text(_NEXT_SLICE_END_SQL),
                    {
                        **params,
                        "staged": sightings_sql is None,
                        "after_ip": after,
                        "skip": slice_endpoints - 1,
                        "scope_lo": scope_lo,
                        "scope_hi": scope_hi,
                    },
                ).scalar()
                rows = conn.execute(
                    statement, {**params, "after_ip": after, "upto_ip": upto or LAST_ADDRESS}
                ).all()
                for r in rows:
                    found[r.kind] += int(r.n)
                slices += 1
                after = upto
            counts = ChangeCounts(
                **found,
                absence_checked=check_absence,
                superseded=not current,
                slices=slices,
            )
        conn.execute(
            sa.text(
                """
                INSERT INTO analysis_execution_summaries
                       (execution_id, task_id, owner_id, finished_at, new, changed, gone,
                        reappeared, absence_checked, superseded)
                VALUES (:e, :t, :o, :f, :new, :changed, :gone, :reappeared, :checked,
                        :superseded)
                """
            ),
            {
                "e": claim.execution_id,
                "t": claim.task_id,
                "o": claim.owner_id,
                "f": claim.finished_at,
                **counts.as_dict(),
                "checked": counts.absence_checked,
                "superseded": counts.superseded,
            },
        )
        if on_change_set is not None:
            on_change_set(conn, claim, counts)
        queue.advance(conn, claim, phase="publish")
    return counts


def drop_staged(execution_id: int, *, chunk: int = 50_000) -> None:
    """The staged copy is only needed by the analysis; deleted in bounded chunks."""
    while True:
        with transaction() as conn:
            deleted = conn.execute(
                sa.text(
                    """
                    DELETE FROM analysis_sightings
                     WHERE ctid = ANY(ARRAY(SELECT ctid FROM analysis_sightings
                                             WHERE execution_id = :e LIMIT :n))
                    """
                ),
                {"e": execution_id, "n": chunk},
            ).rowcount
        if deleted < chunk:
            return
