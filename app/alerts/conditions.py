"""Condition rules: a scanner went offline (or came back), a certificate is about to expire.

Change rules are evaluated with each change set (``app.alerts.evaluate``); condition rules
describe states, so periodic runner jobs look for them (``jobs/alert_conditions.py``, each
under the runner's periodic lease, docs/alerts.md "Condition rules"):

* ``scanner_offline``: an enabled scanner whose last sign of life (claim, lease renewal or
  upload: ``scanners.last_seen_at``) is older than ``[scan] scanner_offline_seconds``.
  The episode is that last sign of life, so a scanner that stays offline is told once;
  one that comes back and goes silent again is a new episode. A rule with
  ``back_online`` is also told once when the scanner gives a sign of life again.
  A scanner that was already offline when the rule was made is not reported.
* ``run_failed``: a run of a task the rule sees that ended ``failed`` (every execution
  failed) or ``partial`` (some did). The episode is the run: one message per run, rule
  and channel. Runs that ended before the rule was made are not reported.
* ``certificate_expires``: a certificate on an open current asset the rule sees whose
  ``not_after`` is less than the rule's ``days`` away (or past). The episode is the
  certificate's SHA-256 fingerprint and the rule's ``days``: one message per
  certificate, rule and threshold, listing the endpoints that serve it.

Each episode is a row of ``alert_condition_marks`` inserted in the same transaction as its
messages (``ON CONFLICT DO NOTHING``): an episode already marked makes no message, so
two runners, a retried tick or a restart cannot double a message. The messages' ids are
derived from rule, channel, kind and episode as well (``msg_`` + md5), so even a replayed
insert finds the same row. Messages go out through the leased deliveries outbox
(``app.alerts.deliveries``) like change alerts.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from app.alerts.links import console_base, console_link
from app.config import Settings
from app.db import transaction
from app.identity.scanners import SCANNERS_SEEN_SQL
from app.observability import emit
from app.scan_control.fleet import holds_live_lease_sql
from app.scan_control.run_status import ENDED_BADLY_SQL
from app.search.endpoint_facts import time_key
from app.search.port import AssetQuery, SearchStore
from app.search.query_language import parse_query

CONDITION_KINDS = ("scanner_offline", "certificate_expires", "run_failed")
# A run that ended badly is looked for this long after it ended (runner downtime longer
# than this loses its message; docs/alerts.md).
RUN_FAILED_LOOKBACK = timedelta(days=1)
# A certificate message lists at most this many of the endpoints serving it.
MAX_ENDPOINTS_LISTED = 20
# Per rule and tick: asset pages read at most (each of PAGE_SIZE assets).
PAGE_SIZE = 500
MAX_PAGES = 40

_log = logging.getLogger(__name__)


def scanners_link(settings: Settings) -> str:
    return console_link(settings.alerts, "/scanners")


def assets_link(settings: Settings, fingerprint: str | None) -> str:
    base = console_link(settings.alerts, "/assets")
    return f"{base}?q=cert.fingerprint:{fingerprint}" if fingerprint else base


# -- scanner_offline ----------------------------------------------------------------------
_SCANNER_OFFLINE = sa.text(
    f"""
    WITH rules AS MATERIALIZED (
        SELECT r.id, r.owner_id, r.created_at,
               -- A global rule, or an admin's, sees every scanner; others the ones they made.
               r.is_global OR EXISTS (SELECT 1 FROM users u
                                       WHERE u.id = r.owner_id AND u.is_admin) AS sees_all
          FROM alert_rules r
         WHERE r.enabled AND 'scanner_offline' = ANY(r.on_kinds)
    ),
    seen AS MATERIALIZED ({SCANNERS_SEEN_SQL}),
    went AS (
        INSERT INTO alert_condition_marks (rule_id, kind, subject, episode)
        SELECT r.id, 'scanner_offline', CAST(s.scanner_id AS text),
               to_char(s.last_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
          FROM rules r JOIN seen s ON r.sees_all OR s.scanner_owner = r.owner_id
         WHERE s.last_seen_at < now() - make_interval(secs => :offline)
           AND s.last_seen_at + make_interval(secs => :offline) > r.created_at
           -- Busy (a live lease) is no outage, however long the scan is silent.
           AND NOT {holds_live_lease_sql("s.scanner_id")}
           -- Silence while netmap itself was down is not the scanner's: its agent retried
           -- against a closed port. It counts from when this watch started.
           AND CAST(:watching_since AS timestamptz) < now() - make_interval(secs => :offline)
        ON CONFLICT DO NOTHING
        RETURNING rule_id, subject, episode
    ),
    back AS (
        UPDATE alert_condition_marks m
           SET closed_at = now()
          FROM seen s
         WHERE m.kind = 'scanner_offline' AND m.closed_at IS NULL
           AND m.subject = CAST(s.scanner_id AS text)
           AND s.last_seen_at >= now() - make_interval(secs => :offline)
        RETURNING m.rule_id, m.subject, m.episode
    ),
    events AS (
        SELECT 'offline' AS what, rule_id, subject, episode FROM went
        UNION ALL
        SELECT 'online', rule_id, subject, episode FROM back
    )
    INSERT INTO alert_deliveries (id, rule_id, channel_id, owner_id, message_kind, event_type,
                                  payload)
    SELECT 'msg_' || md5(concat_ws(':', 'scanner', e.what, e.rule_id, c.id, e.subject,
                                   e.episode)),
           r.id, c.id, r.owner_id, 'each', 'netmap.scanner.' || e.what,
           jsonb_build_object(
               'rule', jsonb_build_object('id', r.id, 'name', r.name),
               'scanner', jsonb_build_object('id', s.scanner_id, 'name', s.scanner_name,
                                             'last_seen_at', s.last_seen_at),
               'status', e.what,
               'offline_since', e.episode,
               'offline_seconds', CAST(:offline AS integer),
               -- How long it was away, on the "back" message: from the sign of life the
               -- episode is named by to the one that ended it.
               'offline_for_seconds',
               CASE WHEN e.what = 'online'
                    THEN CAST(floor(extract(epoch FROM s.last_seen_at
                                                  - CAST(e.episode AS timestamptz)))
                              AS integer) END,
               'link', CAST(:link AS text))
      FROM events e
      JOIN alert_rules r ON r.id = e.rule_id
      JOIN seen s ON CAST(s.scanner_id AS text) = e.subject
      JOIN alert_channels c ON c.id = ANY(r.channel_ids) AND c.owner_id = r.owner_id
     WHERE e.what = 'offline' OR (r.back_online AND r.enabled)
    ON CONFLICT (id) DO NOTHING
    RETURNING event_type
    """  # noqa: S608 - the scanners' SQL is identity's constant; values are bound
)


def evaluate_scanner_offline(
    settings: Settings, *, watching_since: datetime | None = None
) -> dict[str, int]:
    """One tick of the ``scanner_offline`` rules (one short transaction): messages for
    scanners that went offline, and for those back online where the rule asks for it.

    ``watching_since``: when the runner started watching. No scanner is called offline
    before ``scanner_offline_seconds`` have passed since then: after a restart of netmap
    (an upgrade, a reboot) every agent's last sign of life is from before the stop, and
    each reconnects at its next claim, which they would otherwise all be alerted for."""
    return _create_messages(
        "scanner_offline",
        _SCANNER_OFFLINE,
        {
            "offline": settings.scan.scanner_offline_seconds,
            "link": scanners_link(settings),
            "watching_since": watching_since or datetime.min.replace(tzinfo=UTC),
        },
    )


def _create_messages(kind: str, statement: sa.TextClause, params: dict[str, Any]) -> dict[str, int]:
    """Run one condition's marking-and-messages statement in a short transaction; the
    messages it made, counted by event type."""
    with transaction() as conn:
        rows = conn.execute(statement, params).all()
    created: dict[str, int] = {}
    for row in rows:
        created[row.event_type] = created.get(row.event_type, 0) + 1
    if created:
        emit("AlertConditionMessagesCreated", kind=kind, **_event_counts(created))
    return created


# -- run_failed ---------------------------------------------------------------------------
_RUN_FAILED = sa.text(
    f"""
    WITH rules AS MATERIALIZED (
        SELECT r.id, r.owner_id, r.created_at, r.task_ids,
               r.is_global OR EXISTS (SELECT 1 FROM users u
                                       WHERE u.id = r.owner_id AND u.is_admin) AS sees_all
          FROM alert_rules r
         WHERE r.enabled AND 'run_failed' = ANY(r.on_kinds)
    ),
    runs AS MATERIALIZED ({ENDED_BADLY_SQL}),
    marked AS (
        INSERT INTO alert_condition_marks (rule_id, kind, subject, episode)
        SELECT r.id, 'run_failed', CAST(x.run_id AS text), x.status
          FROM rules r JOIN runs x ON r.sees_all OR x.owner_id = r.owner_id
         WHERE x.finished_at > r.created_at
           AND (cardinality(r.task_ids) = 0 OR x.task_id = ANY(r.task_ids))
        ON CONFLICT DO NOTHING
        RETURNING rule_id, subject
    )
    INSERT INTO alert_deliveries (id, rule_id, channel_id, owner_id, task_id, message_kind,
                                  event_type, payload)
    SELECT 'msg_' || md5(concat_ws(':', 'run_failed', m.rule_id, c.id, m.subject)),
           r.id, c.id, r.owner_id, x.task_id, 'each', 'netmap.run.' || x.status,
           jsonb_build_object(
               'rule', jsonb_build_object('id', r.id, 'name', r.name),
               'run', jsonb_build_object('id', x.run_id, 'number', x.number,
                                         'status', x.status, 'trigger', x.trigger,
                                         'task_id', x.task_id, 'task_name', x.task_name,
                                         'finished_at', x.finished_at,
                                         'executions', x.executions,
                                         'failed_executions', x.failed_executions),
               'link', CAST(:link AS text) || '/tasks/' || x.task_id)
      FROM marked m
      JOIN alert_rules r ON r.id = m.rule_id
      JOIN runs x ON CAST(x.run_id AS text) = m.subject
      JOIN alert_channels c ON c.id = ANY(r.channel_ids) AND c.owner_id = r.owner_id
    ON CONFLICT (id) DO NOTHING
    RETURNING event_type
    """  # noqa: S608 - the runs' SQL is scan_control's constant; values are bound
)


def evaluate_run_failed(settings: Settings, *, now: datetime | None = None) -> dict[str, int]:
    """One tick of the ``run_failed`` rules (one short transaction): a message for each
    run that ended failed or partial since the last day and was not told yet."""
    moment = now or datetime.now(UTC)
    return _create_messages(
        "run_failed",
        _RUN_FAILED,
        {"since": moment - RUN_FAILED_LOOKBACK, "link": console_base(settings.alerts)},
    )


def _event_counts(created: dict[str, int]) -> dict[str, int]:
    return {name.rsplit(".", 1)[-1]: n for name, n in created.items()}


# -- certificate_expires ------------------------------------------------------------------
@dataclass(frozen=True)
class CertificateRule:
    id: int
    owner_id: int
    is_global: bool
    name: str
    days: int
    cidrs: tuple[Any, ...]
    ports: tuple[int, ...]
    services: tuple[str, ...]
    products: tuple[str, ...]


@dataclass
class Certificate:
    fingerprint: str
    not_after: str
    subject_cn: str | None
    issuer: str | None
    endpoints: list[dict[str, Any]] = field(default_factory=list)
    endpoint_count: int = 0


def _certificate_rules() -> list[CertificateRule]:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                """
                SELECT id, owner_id, is_global, name, days, cidrs, ports, services, products
                  FROM alert_rules
                 WHERE enabled AND 'certificate_expires' = ANY(on_kinds) AND days IS NOT NULL
                 ORDER BY id
                """
            )
        ).all()
    return [
        CertificateRule(
            id=r.id,
            owner_id=r.owner_id,
            is_global=r.is_global,
            name=r.name,
            days=r.days,
            cidrs=tuple(ipaddress.ip_network(str(c)) for c in r.cidrs),
            ports=tuple(r.ports),
            services=tuple(r.services),
            products=tuple(r.products),
        )
        for r in rows
    ]


def _fingerprint(tls: dict[str, Any], not_after: str) -> str:
    """The certificate's SHA-256 (lower-case hex), or, when a scanner did not send one, a
    stand-in from what identifies it (subject and expiry)."""
    raw = tls.get("sha256")
    if isinstance(raw, str) and raw.strip():
        return raw.lower().replace(":", "").replace(" ", "")[:128]
    subject = tls.get("subject_cn") if isinstance(tls.get("subject_cn"), str) else ""
    return f"unfingerprinted:{subject[:200]}:{not_after}"


def _matches(rule: CertificateRule, doc: Any) -> bool:
    if rule.ports and doc.port not in rule.ports:
        return False
    if rule.services and (doc.service or "") not in rule.services:
        return False
    if rule.products and (doc.product or "") not in rule.products:
        return False
    if rule.cidrs:
        address = ipaddress.ip_address(doc.ip)
        if not any(address.version == n.version and address in n for n in rule.cidrs):
            return False
    return True


def expiring_certificates(
    store: SearchStore, rule: CertificateRule, *, check: Callable[[], None] | None = None
) -> dict[str, Certificate]:
    """The certificates on open current assets the rule sees that expire within its days
    (or have expired), by fingerprint; read from the search store, no connection held."""
    where = parse_query(f"cert.expires:<{rule.days}d").node
    found: dict[str, Certificate] = {}
    cursor = None
    for _ in range(MAX_PAGES):
        page = store.search_assets(
            AssetQuery(
                scope="global" if rule.is_global else "user",
                owner_id=None if rule.is_global else rule.owner_id,
                status="open",
                where=where,
                limit=PAGE_SIZE,
                cursor=cursor,
            )
        )
        for doc in page.items:
            tls = (doc.details or {}).get("tls")
            if not isinstance(tls, dict) or not _matches(rule, doc):
                continue
            not_after = time_key(tls.get("not_after"))
            if not_after is None:
                continue
            fingerprint = _fingerprint(tls, not_after)
            cert = found.get(fingerprint)
            if cert is None:
                cert = found[fingerprint] = Certificate(
                    fingerprint=fingerprint,
                    not_after=not_after + "Z",
                    subject_cn=tls.get("subject_cn")
                    if isinstance(tls.get("subject_cn"), str)
                    else None,
                    issuer=tls.get("issuer") if isinstance(tls.get("issuer"), str) else None,
                )
            cert.endpoint_count += 1
            if len(cert.endpoints) < MAX_ENDPOINTS_LISTED:
                cert.endpoints.append({"ip": doc.ip, "port": doc.port, "transport": doc.transport})
        cursor = page.next_cursor
        if not cursor:
            break
        if check is not None:
            check()
    else:
        emit(
            "AlertCertificateScanCapped",
            level=logging.WARNING,
            rule_id=rule.id,
            pages=MAX_PAGES,
            page_size=PAGE_SIZE,
        )
    return found


_CERTIFICATE_MESSAGES = sa.text(
    """
    WITH found AS (
        SELECT * FROM jsonb_to_recordset(CAST(:found AS jsonb))
            AS f(rule_id bigint, fingerprint text, payload jsonb)
    ),
    marked AS (
        INSERT INTO alert_condition_marks (rule_id, kind, subject, episode)
        SELECT f.rule_id, 'certificate_expires', f.fingerprint, 'days:' || r.days
          FROM found f JOIN alert_rules r ON r.id = f.rule_id
         WHERE r.enabled AND r.days IS NOT NULL
        ON CONFLICT DO NOTHING
        RETURNING rule_id, subject, episode
    )
    INSERT INTO alert_deliveries (id, rule_id, channel_id, owner_id, message_kind, event_type,
                                  payload)
    SELECT 'msg_' || md5(concat_ws(':', 'certificate', m.rule_id, c.id, m.subject, m.episode)),
           r.id, c.id, r.owner_id, 'each', 'netmap.certificate.expires',
           f.payload || jsonb_build_object(
               'rule', jsonb_build_object('id', r.id, 'name', r.name, 'days', r.days))
      FROM marked m
      JOIN found f ON f.rule_id = m.rule_id AND f.fingerprint = m.subject
      JOIN alert_rules r ON r.id = m.rule_id
      JOIN alert_channels c ON c.id = ANY(r.channel_ids) AND c.owner_id = r.owner_id
    ON CONFLICT (id) DO NOTHING
    RETURNING id
    """
)


def _certificate_payload(settings: Settings, cert: Certificate, now: datetime) -> dict[str, Any]:
    expires = datetime.fromisoformat(cert.not_after.replace("Z", "+00:00"))
    return {
        "certificate": {
            "fingerprint": None
            if cert.fingerprint.startswith("unfingerprinted:")
            else cert.fingerprint,
            "subject_cn": cert.subject_cn,
            "issuer": cert.issuer,
            "not_after": cert.not_after,
            # Whole days, toward zero: expired 2 days 17 hours ago is -2 (timedelta's
            # ``days`` floors, and said -3).
            "days_left": int((expires - now).total_seconds() / 86400),
            "expired": expires <= now,
        },
        "endpoints": cert.endpoints,
        "endpoint_count": cert.endpoint_count,
        "link": assets_link(
            settings,
            None if cert.fingerprint.startswith("unfingerprinted:") else cert.fingerprint,
        ),
    }


def evaluate_certificate_expiry(
    settings: Settings, store: SearchStore, *, check: Callable[[], None] | None = None
) -> int:
    """One tick of the ``certificate_expires`` rules: read the expiring certificates of
    each rule from the store (no connection held), then mark new episodes and create
    their messages in one short transaction per rule. Returns the messages created."""
    created = 0
    for rule in _certificate_rules():
        found = expiring_certificates(store, rule, check=check)
        if not found:
            continue
        now = datetime.now(UTC)
        rows = [
            {
                "rule_id": rule.id,
                "fingerprint": fp,
                "payload": _certificate_payload(settings, cert, now),
            }
            for fp, cert in found.items()
        ]
        with transaction() as conn:
            made = conn.execute(_CERTIFICATE_MESSAGES, {"found": json.dumps(rows)}).all()
        created += len(made)
        if check is not None:
            check()
    if created:
        emit("AlertConditionMessagesCreated", kind="certificate_expires", expires=created)
    return created
