"""Target freshness (ING-12), updated in the transaction that makes an execution succeed.

Scan control owns ``search_targets`` (task creation registers the rows); the
upload's final calls ``update_after_success`` with its open connection, so
freshness commits with the execution's success.

``search_targets.last_scanned_at`` says when the owner's target was last
covered by a successful scan. The time written is the execution's start (the
moment the data describes), and ``GREATEST`` semantics mean an older execution
finishing late never moves a newer time backwards. Only the task owner's rows
are touched.

* Single addresses are updated by primary key (owner, 'ip', key), also those
  inside a scanned network: a network of up to
  ``ENUMERATE_MAX_ADDRESSES`` addresses is listed as keys, one primary-key probe
  each; a larger one (up to 65,536 addresses) reads the owner's own ``ip`` rows
  through the primary key's (owner, kind) prefix and filters them by network —
  never the other owners' rows, never a sequential scan.
* Networks: CIDR targets inside the scanned network are found through the
  partial GiST index on ``target_ip`` (``<<=``, IPv4 and IPv6 never match
  each other); a larger CIDR target that the task split into pieces is fresh
  only once the whole task has succeeded (then by primary key).
* Domains are never cast to INET: a DNS task's domains become fresh only when
  its DNS executions and every follow-up (child) task succeeded; the time is
  that of the DNS execution.
"""

from __future__ import annotations

import ipaddress
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

_SET_FRESH = """
    SET last_scanned_at = :at, last_execution_id = :execution
    WHERE owner_id = :owner AND (last_scanned_at IS NULL OR last_scanned_at < :at)
"""
# CIDR targets inside a scanned network; the partial GiST index serves ``<<=``.
CIDR_TARGETS_INSIDE = (
    f"UPDATE search_targets {_SET_FRESH} AND kind = 'cidr' AND target_ip <<= CAST(:net AS inet)"
)

# Single-address targets by primary key: the listed keys, or the owner's 'ip' prefix.
IP_TARGETS_BY_KEY = f"UPDATE search_targets {_SET_FRESH} AND kind = 'ip' AND key = ANY(:keys)"
IP_TARGETS_INSIDE = (
    f"UPDATE search_targets {_SET_FRESH} AND kind = 'ip' AND target_ip <<= CAST(:net AS inet)"
)
# A /22 (IPv4) or /118 (IPv6) and smaller: listing the keys costs less than the prefix.
ENUMERATE_MAX_ADDRESSES = 1024
PREFIX_MAX_ADDRESSES = 65536


def update_after_success(
    conn: Connection,
    *,
    execution_id: int,
    task_id: int,
    owner_id: int,
    kind: str,
    targets: list[str],
    started_at: datetime,
    parent_task_id: int | None,
) -> None:
    if kind == "ports":
        _covered_addresses(conn, owner_id, execution_id, targets, started_at)
        if _task_succeeded(conn, task_id):
            _task_targets(conn, owner_id, task_id)
    if parent_task_id is not None:
        _domains_of(conn, owner_id, parent_task_id)
    elif kind == "dns":
        _domains_of(conn, owner_id, task_id)


def _covered_addresses(conn, owner_id, execution_id, targets, at) -> None:
    singles = [t for t in targets if "/" not in t]
    networks = [t for t in targets if "/" in t]
    params = {"owner": owner_id, "execution": execution_id, "at": at}
    keys = list(singles)
    for network in networks:
        # One statement per piece keeps the GiST index usable (inet <<= constant).
        conn.execute(sa.text(CIDR_TARGETS_INSIDE), {**params, "net": network})
        size = ipaddress.ip_network(network).num_addresses
        if size <= ENUMERATE_MAX_ADDRESSES:
            keys.extend(str(address) for address in ipaddress.ip_network(network))
        elif size <= PREFIX_MAX_ADDRESSES:
            conn.execute(sa.text(IP_TARGETS_INSIDE), {**params, "net": network})
    if keys:
        conn.execute(sa.text(IP_TARGETS_BY_KEY), {**params, "keys": keys})


def _task_succeeded(conn: Connection, task_id: int) -> bool:
    return conn.execute(
        sa.text("SELECT status = 'succeeded' FROM scan_tasks WHERE id = :id"), {"id": task_id}
    ).scalar()


def _task_targets(conn: Connection, owner_id: int, task_id: int) -> None:
    """Every target of a fully succeeded task, by primary key, at its earliest execution start."""
    conn.execute(
        sa.text(
            """
            WITH task AS (
                SELECT t.targets,
                       (SELECT min(started_at) FROM scan_executions WHERE task_id = t.id) AS at,
                       (SELECT max(id) FROM scan_executions WHERE task_id = t.id) AS execution
                FROM scan_tasks t WHERE t.id = :task
            )
            UPDATE search_targets s
               SET last_scanned_at = task.at, last_execution_id = task.execution
              FROM task, jsonb_array_elements_text(task.targets) AS target(key)
             WHERE s.owner_id = :owner AND s.kind IN ('ip', 'cidr')
               AND s.key = target.key
               AND (s.last_scanned_at IS NULL OR s.last_scanned_at < task.at)
            """
        ),
        {"task": task_id, "owner": owner_id},
    )


def _domains_of(conn: Connection, owner_id: int, dns_task_id: int) -> None:
    """A DNS task's domains, once its DNS executions and all follow-up tasks succeeded."""
    conn.execute(
        sa.text(
            """
            WITH dns AS (
                SELECT min(e.started_at) AS at, max(e.id) AS execution,
                       bool_and(e.status = 'succeeded') AS done
                FROM scan_executions e WHERE e.task_id = :task AND e.kind = 'dns'
            ), children AS (
                SELECT COALESCE(bool_and(c.status = 'succeeded'), true) AS done
                FROM scan_tasks c WHERE c.parent_task_id = :task
            ), domains AS (
                SELECT DISTINCT target.key
                FROM scan_executions e, jsonb_array_elements_text(e.targets) AS target(key)
                WHERE e.task_id = :task AND e.kind = 'dns'
            )
            UPDATE search_targets s
               SET last_scanned_at = dns.at, last_execution_id = dns.execution
              FROM dns, children, domains
             WHERE dns.done AND children.done
               AND s.owner_id = :owner AND s.kind = 'domain' AND s.key = domains.key
               AND (s.last_scanned_at IS NULL OR s.last_scanned_at < dns.at)
            """
        ),
        {"task": dns_task_id, "owner": owner_id},
    )
