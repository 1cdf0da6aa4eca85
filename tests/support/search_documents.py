"""Builders for search-store documents in tests: real ids, sensible defaults, UTC times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from app.search.documents import EndpointDocument, FactDocument, observation_key
from app.search.ids import current_asset_id, execution_endpoint_id, fact_id, normalise_ip

BASE_TIME = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def at(minutes: float = 0, *, base: datetime = BASE_TIME) -> datetime:
    return base + timedelta(minutes=minutes)


def _newest_fields(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        "state": kwargs.get("state", "open"),
        "service": kwargs.get("service"),
        "product": kwargs.get("product"),
        "version": kwargs.get("version"),
        "banner": kwargs.get("banner"),
        "hostname": kwargs.get("hostname"),
        "tags": tuple(kwargs.get("tags", ())),
        "details": dict(kwargs.get("details", {})),
    }


def execution_endpoint(
    execution_id: int,
    ip: str,
    port: int,
    transport: str = "tcp",
    *,
    task_id: int = 1,
    owner_id: int = 1,
    seen: datetime | None = None,
    first_seen: datetime | None = None,
    last_seen: datetime | None = None,
    **fields: Any,
) -> EndpointDocument:
    ip = normalise_ip(ip)
    newest = _newest_fields(fields)
    first = first_seen or seen or BASE_TIME
    last = last_seen or seen or first
    return EndpointDocument(
        id=execution_endpoint_id(execution_id, ip, port, transport),
        scope="execution",
        ip=ip,
        port=port,
        transport=transport,
        first_seen=first,
        first_execution_id=fields.get("first_execution_id", execution_id),
        last_seen=last,
        last_execution_id=fields.get("last_execution_id", execution_id),
        owner_id=owner_id,
        execution_id=execution_id,
        task_id=task_id,
        observation_key=observation_key(newest),
        **newest,
    )


def current_asset(
    scope: str,
    ip: str,
    port: int,
    transport: str = "tcp",
    *,
    owner_id: int | None = 1,
    execution_id: int = 1,
    seen: datetime | None = None,
    first_seen: datetime | None = None,
    last_seen: datetime | None = None,
    first_execution_id: int | None = None,
    last_execution_id: int | None = None,
    **fields: Any,
) -> EndpointDocument:
    ip = normalise_ip(ip)
    newest = _newest_fields(fields)
    first = first_seen or seen or BASE_TIME
    last = last_seen or seen or first
    owner = owner_id if scope == "user" else None
    return EndpointDocument(
        id=current_asset_id(scope, owner, ip, port, transport),
        scope=scope,
        ip=ip,
        port=port,
        transport=transport,
        first_seen=first,
        first_execution_id=first_execution_id if first_execution_id is not None else execution_id,
        last_seen=last,
        last_execution_id=last_execution_id if last_execution_id is not None else execution_id,
        owner_id=owner,
        observation_key=observation_key(newest),
        **newest,
    )


def fact(
    execution_id: int,
    position: int,
    *,
    observed_at: datetime = BASE_TIME,
    kind: str = "observation",
    task_id: int = 1,
    owner_id: int = 1,
    upload_id: str = "u-1",
    stream: str = "main",
    batch_index: int = 0,
    body: dict[str, Any] | None = None,
) -> FactDocument:
    return FactDocument(
        id=fact_id(execution_id, upload_id, stream, batch_index, position),
        kind=kind,
        execution_id=execution_id,
        task_id=task_id,
        owner_id=owner_id,
        scanner_id=1,
        upload_id=upload_id,
        stream=stream,
        batch_index=batch_index,
        position=position,
        observed_at=observed_at,
        body=body or {"ip": "192.0.2.1", "port": 80, "transport": "tcp", "state": "open"},
    )


def forge_key_collision(
    table: str, document_id: str, *, ip: str, owner_id: int | None = None
) -> None:
    """Store, in a PostgreSQL asset table, another id with ``document_id``'s 64-bit key
    at its address ``ip`` (and owner, in the user view) on port 9, so writing
    ``document_id`` there must be refused. The views' primary keys are (owner,) address
    and key (migration 2000): only there can two ids' keys collide."""
    import sqlalchemy as sa

    from app.db import transaction
    from app.search.ids import pg_key

    forged = document_id[:16] + ("0" * 16 if document_id[16:] != "0" * 16 else "1" * 16)
    user_table = table.endswith("user")
    with transaction() as conn:
        conn.execute(
            sa.text(
                f"INSERT INTO {table} (key, id, ip, port, transport, first_seen, "
                "first_execution_id, last_seen, last_execution_id, observation_key"
                f"{', owner_id' if user_table else ''}) VALUES (:key, CAST(:id AS uuid), "
                "CAST(:ip AS inet), 9, 'tcp', now() - interval '10 minutes', 1, "
                "now() - interval '10 minutes', 1, ''"
                f"{', :owner' if user_table else ''})"
            ),
            {"key": pg_key(document_id), "id": forged, "ip": ip, "owner": owner_id},
        )
