"""The deliveries outbox: leased claims, outcomes, retries, redelivery and the log.

A runner claims one due ``pending`` row at a time (``FOR UPDATE SKIP LOCKED``) with a
fresh ``claim_token`` and ``lease_expires_at`` (docs/architecture.md, rule: leases),
sends it with no database connection held, then records the outcome with both in the
``WHERE`` clause: zero rows means the lease was lost and another runner owns the row.

The guarantee is **at least once, with the same id**: the id is fixed when the message
is created, and a runner that dies between the send and the record (kill -9) leaves
the row ``pending`` with a lease that runs out; the next claim counts the lost attempt
and sends the same id again. A failed attempt is retried after an exponential backoff
with jitter (between half and all of ``min(max_backoff, base · 2^attempts)``) until
``[alerts] retry_hours`` have passed since the first attempt; then the row is ``dead``
with its last error. A refused target or a 4xx is dead at once. ``redeliver`` makes any
row pending again (same id), with a fresh retry window.

Lease helpers come from ``app.leases`` (the error texts and parameter shapes); the
statements are here because this queue is keyed by message id, not execution.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from app.alerts.channels import Channel, channel_of
from app.alerts.senders import Message
from app.config import AlertSettings
from app.db import transaction
from app.errors import NotFound, ValidationError
from app.identity.users import User
from app.leases import claim_parameters, retry_parameters

STATUSES = ("pending", "delivered", "dead")
_ID = re.compile(r"^msg_[0-9a-f]{32}$")
_OWNED = "id = :id AND claim_token = :token AND lease_expires_at > now()"


@dataclass(frozen=True)
class DeliveryClaim:
    id: str
    token: uuid.UUID
    attempts: int
    recovered: bool
    message: Message
    channel: Channel


_CLAIM = sa.text(
    """
    WITH next AS (
        SELECT d.id, d.claim_token IS NOT NULL AS recovered
          FROM alert_deliveries d
         WHERE d.status = 'pending' AND d.available_at <= now()
           AND (d.claim_token IS NULL OR d.lease_expires_at <= now())
         ORDER BY d.available_at, d.id
         LIMIT 1
           FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE alert_deliveries d
           SET claim_token = gen_random_uuid(),
               lease_expires_at = now() + make_interval(secs => :lease),
               attempts = d.attempts + CASE WHEN next.recovered THEN 1 ELSE 0 END,
               last_error = CASE WHEN next.recovered THEN :recovered_error ELSE d.last_error END,
               first_attempt_at = coalesce(d.first_attempt_at, now()),
               updated_at = now()
          FROM next
         WHERE d.id = next.id
        RETURNING d.id, d.claim_token, d.attempts, d.channel_id, d.event_type, d.payload,
                  d.created_at, next.recovered
    )
    SELECT k.*, c.id AS c_id, c.owner_id, c.name, c.kind, c.url, c.recipients,
           c.secret_encrypted, c.previous_secret_encrypted, c.previous_secret_until,
           c.created_at AS c_created_at, c.updated_at
      FROM claimed k LEFT JOIN alert_channels c ON c.id = k.channel_id
    """
)


def claim_next(settings: AlertSettings) -> DeliveryClaim | None:
    """Claim the next due delivery under a lease (one short transaction)."""
    with transaction() as conn:
        row = conn.execute(_CLAIM, claim_parameters(settings.lease_seconds)).one_or_none()
        if row is not None and row.c_id is None:
            # The channel was deleted after the message was made: nothing can send it.
            conn.execute(
                sa.text(
                    "UPDATE alert_deliveries SET status = 'dead', claim_token = NULL, "
                    "lease_expires_at = NULL, last_error = 'the channel was deleted', "
                    "updated_at = now() WHERE id = :id"
                ),
                {"id": row.id},
            )
            return None
    if row is None:
        return None
    channel = channel_of(
        _ChannelRow(
            id=row.c_id,
            owner_id=row.owner_id,
            name=row.name,
            kind=row.kind,
            url=row.url,
            recipients=row.recipients,
            secret_encrypted=row.secret_encrypted,
            previous_secret_encrypted=row.previous_secret_encrypted,
            previous_secret_until=row.previous_secret_until,
        )
    )
    return DeliveryClaim(
        id=row.id,
        token=row.claim_token,
        attempts=row.attempts,
        recovered=row.recovered,
        message=Message(row.id, row.event_type, row.created_at, row.payload),
        channel=channel,
    )


@dataclass(frozen=True)
class _ChannelRow:
    id: int
    owner_id: int
    name: str
    kind: str
    url: str | None
    recipients: list[str]
    secret_encrypted: str | None
    previous_secret_encrypted: str | None
    previous_secret_until: datetime | None


def record_delivered(claim: DeliveryClaim, note: str) -> bool:
    """The send succeeded; False when the lease was lost (another runner sends again)."""
    with transaction() as conn:
        done = conn.execute(
            sa.text(
                f"""
                UPDATE alert_deliveries
                   SET status = 'delivered', delivered_at = now(), attempts = attempts + 1,
                       last_error = NULL, claim_token = NULL, lease_expires_at = NULL,
                       updated_at = now()
                 WHERE {_OWNED}
                RETURNING 1
                """  # noqa: S608 - the ownership predicate is a constant
            ),
            {"id": claim.id, "token": claim.token},
        ).scalar()
    return done is not None


def record_failure(
    claim: DeliveryClaim, error: str, settings: AlertSettings, *, permanent: bool
) -> str | None:
    """Count the failed attempt: ``pending`` again after a backoff, or ``dead`` when the
    error is permanent or the retry window is over. None when the lease was lost."""
    parameters = retry_parameters(
        error,
        base_seconds=settings.retry_base_seconds,
        max_backoff_seconds=settings.max_backoff_seconds,
    )
    with transaction() as conn:
        status = conn.execute(
            sa.text(
                f"""
                WITH delay AS (
                    SELECT least(CAST(:max_backoff AS double precision),
                                 CAST(:base AS double precision)
                                 * power(2, least(attempts, 40)))
                           * (0.5 + random() * 0.5) AS seconds,
                           :permanent OR first_attempt_at
                               <= now() - make_interval(secs => :window) AS over
                      FROM alert_deliveries WHERE {_OWNED}
                )
                UPDATE alert_deliveries
                   SET status = CASE WHEN (SELECT over FROM delay) THEN 'dead' ELSE 'pending' END,
                       attempts = attempts + 1, last_error = :error,
                       claim_token = NULL, lease_expires_at = NULL,
                       available_at = now() + make_interval(secs => (SELECT seconds FROM delay)),
                       updated_at = now()
                 WHERE {_OWNED}
                RETURNING status
                """  # noqa: S608 - the ownership predicate is a constant
            ),
            {
                **parameters,
                "id": claim.id,
                "token": claim.token,
                "permanent": permanent,
                "window": settings.retry_hours * 3600,
            },
        ).scalar()
    return status


_LOG_COLUMNS = (
    "d.id, d.rule_id, d.channel_id, c.kind AS channel_kind, d.execution_id, d.task_id, d.run_id, "
    "d.message_kind, d.event_type, d.status, d.attempts, d.last_error, d.created_at, "
    "d.first_attempt_at, d.delivered_at, d.available_at"
)


def public(row: Any) -> dict[str, Any]:
    def when(value: datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "id": row.id,
        "rule_id": row.rule_id,
        "channel_id": row.channel_id,
        "channel_kind": row.channel_kind,
        "execution_id": row.execution_id,
        "task_id": row.task_id,
        "run_id": row.run_id,
        "message_kind": row.message_kind,
        "event_type": row.event_type,
        "status": row.status,
        "attempts": row.attempts,
        "last_error": row.last_error,
        "created_at": when(row.created_at),
        "first_attempt_at": when(row.first_attempt_at),
        "delivered_at": when(row.delivered_at),
        "next_attempt_at": when(row.available_at) if row.status == "pending" else None,
    }


def list_deliveries(
    user: User,
    *,
    rule_id: int | None,
    status: str | None,
    limit: int,
    before: tuple[datetime, str] | None,
) -> list[dict[str, Any]]:
    """The caller's delivery log, newest first (keyset by created_at, id)."""
    if status is not None and status not in STATUSES:
        raise ValidationError(
            "status must be one of " + ", ".join(STATUSES),
            code="invalid_parameter",
            details={"parameter": "status"},
        )
    where = ["d.owner_id = :owner"]
    params: dict[str, Any] = {"owner": user.id, "limit": limit}
    if rule_id is not None:
        where.append("d.rule_id = :rule")
        params["rule"] = rule_id
    if status is not None:
        where.append("d.status = :status")
        params["status"] = status
    if before is not None:
        where.append("(d.created_at, d.id) < (:before_at, :before_id)")
        params.update(before_at=before[0], before_id=before[1])
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                f"SELECT {_LOG_COLUMNS} FROM alert_deliveries d "  # noqa: S608 - constants and fixed predicates
                f"LEFT JOIN alert_channels c ON c.id = d.channel_id "
                f"WHERE {' AND '.join(where)} ORDER BY d.created_at DESC, d.id DESC LIMIT :limit"
            ),
            params,
        ).all()
    return [public(r) for r in rows]


def _not_found() -> NotFound:
    return NotFound("delivery not found", code="delivery_not_found")


def get_delivery(user: User, delivery_id: str) -> dict[str, Any]:
    if not _ID.match(delivery_id):
        raise _not_found()
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                f"SELECT {_LOG_COLUMNS} FROM alert_deliveries d "  # noqa: S608 - constants
                "LEFT JOIN alert_channels c ON c.id = d.channel_id "
                "WHERE d.id = :id AND d.owner_id = :owner"
            ),
            {"id": delivery_id, "owner": user.id},
        ).one_or_none()
    if row is None:
        raise _not_found()
    return public(row)


def redeliver(user: User, delivery_id: str) -> dict[str, Any]:
    """Send the message again (same id), with a fresh retry window."""
    if not _ID.match(delivery_id):
        raise _not_found()
    with transaction() as conn:
        found = conn.execute(
            sa.text(
                """
                UPDATE alert_deliveries
                   SET status = 'pending', available_at = now(), first_attempt_at = NULL,
                       claim_token = NULL, lease_expires_at = NULL, updated_at = now()
                 WHERE id = :id AND owner_id = :owner
                   AND NOT (status = 'pending' AND claim_token IS NOT NULL
                            AND lease_expires_at > now())
                RETURNING id
                """
            ),
            {"id": delivery_id, "owner": user.id},
        ).scalar()
    if found is None:
        get_delivery(user, delivery_id)  # 404 when it is not the caller's
        raise ValidationError("the delivery is being sent right now", code="delivery_in_progress")
    return get_delivery(user, delivery_id)


@dataclass(frozen=True)
class DeliveryStats:
    by_kind_and_status: dict[tuple[str, str], int]
    oldest_pending_age_seconds: float


def stats() -> DeliveryStats:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                """
                SELECT coalesce(c.kind, 'deleted') AS kind, d.status, count(*) AS n
                  FROM alert_deliveries d LEFT JOIN alert_channels c ON c.id = d.channel_id
                 GROUP BY 1, 2
                """
            )
        ).all()
        oldest = conn.execute(
            sa.text(
                "SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0) "
                "FROM alert_deliveries WHERE status = 'pending'"
            )
        ).scalar()
    return DeliveryStats({(r.kind, r.status): int(r.n) for r in rows}, float(oldest or 0))


def deliver(settings: Any, claim: DeliveryClaim) -> str:
    """Send one claimed message and record the outcome; returns the status recorded
    (``lost`` when the lease ran out during the send: the row is another runner's)."""
    from app.alerts.outbound import PermanentDeliveryError, TemporaryDeliveryError
    from app.alerts.senders import send
    from app.observability import emit

    kind = claim.channel.kind
    try:
        note = send(settings, claim.channel, claim.message)
    except PermanentDeliveryError as exc:
        status = record_failure(claim, str(exc), settings.alerts, permanent=True)
    except (TemporaryDeliveryError, OSError, ValueError) as exc:
        status = record_failure(
            claim, f"{type(exc).__name__}: {exc}", settings.alerts, permanent=False
        )
    else:
        status = "delivered" if record_delivered(claim, note) else None
    outcome = status or "lost"
    emit(
        "AlertDeliveryAttempted",
        delivery_id=claim.id,
        channel_kind=kind,
        outcome=outcome,
        attempts=claim.attempts + 1,
    )
    return outcome
