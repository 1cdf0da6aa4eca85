"""How search-store documents become JSON and back, shared by both adapters.

One source shape serves the Elasticsearch ``_source`` and the PostgreSQL
``json_to_recordset`` rows, so both stores hold the same values. Timestamps are
written as fixed-width UTC text with microseconds (``2026-11-30T06:00:00.000000Z``):
fixed width makes text order equal time order, which the stored merge script
relies on, and microseconds keep the exact instants the merge rule compares.
``document_problem`` says why a document cannot be stored (an item failure,
reported like Elasticsearch's ``mapper_parsing_exception``) instead of letting
one bad document fail a whole shard; ``has_nul`` finds the one value only
PostgreSQL refuses (NUL in text).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from app.search.documents import ENDPOINT_SCOPES, FACT_KINDS, EndpointDocument, FactDocument
from app.search.ids import CANONICAL_IPV4, parsed_address

# date_nanos (Elasticsearch) holds 1970-01-01 .. 2262-04-11; keep both stores inside it.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2262, 1, 1, tzinfo=UTC)
TRANSPORTS = ("tcp", "udp", "sctp")
INVALID_DOCUMENT = "invalid_document"


def as_utc(moment: datetime) -> datetime:
    """Aware UTC datetime (a naive one is taken to be UTC already)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


@functools.lru_cache(maxsize=4096)
def utc_text(moment: datetime) -> str:
    # isoformat is several times faster than strftime and just as fixed-width here. The
    # cache: a batch's thousands of facts and endpoints share a few timestamps (a scanner
    # stamps a host's ports alike), and each is written up to three times. Equal
    # datetimes are the same instant, so they have the same text.
    return as_utc(moment).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_utc(text: str) -> datetime:
    return as_utc(datetime.fromisoformat(text))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return utc_text(value)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_json_default)


_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def dumps(value: Any) -> str:
    """Compact JSON as both stores receive it (UTF-8 text, no ASCII escaping).

    orjson writes it several times faster than ``json`` (every fact and endpoint of an
    upload passes here); datetimes still go through ``_json_default`` so both stores
    keep the fixed-width UTC text. What orjson refuses but ``json`` writes (integers
    beyond 64 bits inside a scanner's details, non-text keys) takes the ``json`` path.
    """
    try:
        return orjson.dumps(value, default=_json_default, option=_ORJSON_OPTIONS).decode()
    except TypeError:
        return _ENCODER.encode(value)


def endpoint_source(doc: EndpointDocument) -> dict[str, Any]:
    source: dict[str, Any] = {
        "scope": doc.scope,
        "ip": doc.ip,
        "port": doc.port,
        "transport": doc.transport,
        "first_seen": utc_text(doc.first_seen),
        "first_execution_id": doc.first_execution_id,
        "last_seen": utc_text(doc.last_seen),
        "last_execution_id": doc.last_execution_id,
        "observation_key": doc.observation_key,
        "owner_id": doc.owner_id,
        "execution_id": doc.execution_id,
        "task_id": doc.task_id,
        "state": doc.state,
        "service": doc.service,
        "product": doc.product,
        "version": doc.version,
        "banner": doc.banner,
        "hostname": doc.hostname,
        "tags": list(doc.tags),
        "details": dict(doc.details),
    }
    if doc.observed:
        source["observed"] = {name: utc_text(seen) for name, seen in doc.observed.items()}
    return source


def endpoint_from_source(document_id: str, source: Mapping[str, Any]) -> EndpointDocument:
    return EndpointDocument(
        id=document_id,
        scope=source["scope"],
        ip=source["ip"],
        port=int(source["port"]),
        transport=source["transport"],
        first_seen=parse_utc(source["first_seen"]),
        first_execution_id=int(source["first_execution_id"]),
        last_seen=parse_utc(source["last_seen"]),
        last_execution_id=int(source["last_execution_id"]),
        owner_id=source.get("owner_id"),
        execution_id=source.get("execution_id"),
        task_id=source.get("task_id"),
        state=source.get("state"),
        service=source.get("service"),
        product=source.get("product"),
        version=source.get("version"),
        banner=source.get("banner"),
        hostname=source.get("hostname"),
        tags=tuple(source.get("tags") or ()),
        details=dict(source.get("details") or {}),
        observation_key=source.get("observation_key") or "",
        status=source.get("status") or "open",
        gone_since=parse_utc(source["gone_since"]) if source.get("gone_since") else None,
        gone_execution_id=source.get("gone_execution_id"),
        observed={k: parse_utc(v) for k, v in (source.get("observed") or {}).items()},
    )


def fact_source(doc: FactDocument) -> dict[str, Any]:
    return {
        "kind": doc.kind,
        "execution_id": doc.execution_id,
        "task_id": doc.task_id,
        "owner_id": doc.owner_id,
        "scanner_id": doc.scanner_id,
        "upload_id": doc.upload_id,
        "stream": doc.stream,
        "batch_index": doc.batch_index,
        "position": doc.position,
        "observed_at": utc_text(doc.observed_at),
        "body": dict(doc.body),
    }


def fact_from_source(document_id: str, source: Mapping[str, Any]) -> FactDocument:
    """The inverse of ``fact_source``: a stored fact read back (a dead batch's removal)."""
    return FactDocument(
        id=document_id,
        kind=source["kind"],
        execution_id=int(source["execution_id"]),
        task_id=int(source["task_id"]),
        owner_id=int(source["owner_id"]),
        scanner_id=source.get("scanner_id"),
        upload_id=source["upload_id"],
        stream=source["stream"],
        batch_index=int(source["batch_index"]),
        position=int(source["position"]),
        observed_at=parse_utc(source["observed_at"]),
        body=source.get("body") or {},
    )


def _ip_problem(ip: str) -> str | None:
    if CANONICAL_IPV4.fullmatch(ip):
        return None
    return _parsed_ip_problem(ip)


@functools.lru_cache(maxsize=65536)
def _parsed_ip_problem(ip: str) -> str | None:
    # Cached: an address usually carries several endpoints, and parsing dominates the check.
    try:
        if str(parsed_address(ip)) != ip:
            return f"ip {ip!r} is not normalised"
    except ValueError:
        return f"ip {ip!r} is not an IP address"
    return None


def _bad_time(moment: datetime) -> bool:
    return not EARLIEST <= as_utc(moment) < LATEST


def endpoint_problem(doc: EndpointDocument) -> str | None:
    """Why ``doc`` cannot be stored, or ``None``."""
    if doc.scope not in ENDPOINT_SCOPES:
        return f"unknown scope {doc.scope!r}"
    ip_problem = _ip_problem(doc.ip)
    if ip_problem:
        return ip_problem
    if not 0 <= doc.port <= 65535:
        return f"port {doc.port} is out of range"
    if doc.transport not in TRANSPORTS:
        return f"transport {doc.transport!r} is not one of {', '.join(TRANSPORTS)}"
    if _bad_time(doc.first_seen) or _bad_time(doc.last_seen):
        return "first_seen/last_seen must fall between 1970 and 2262"
    if doc.scope == "user" and doc.owner_id is None:
        return "a user-scope document needs owner_id"
    if doc.scope == "execution" and (doc.execution_id is None or doc.task_id is None):
        return "an execution-scope document needs execution_id and task_id"
    return None


def fact_problem(doc: FactDocument) -> str | None:
    if doc.kind not in FACT_KINDS:
        return f"unknown fact kind {doc.kind!r}"
    if _bad_time(doc.observed_at):
        return "observed_at must fall between 1970 and 2262"
    return None


NUL_PROBLEM = "text must not contain NUL characters (PostgreSQL text cannot hold them)"


def has_nul(encoded: str) -> bool:
    """Whether JSON produced by ``dumps`` carries a NUL character anywhere."""
    return "\\u0000" in encoded
