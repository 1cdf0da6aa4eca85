"""The searchable facts of an endpoint: TLS certificate and HTTP fields read from ``details``.

An endpoint document keeps what a scanner learnt about TLS and HTTP under
``details["tls"]`` and ``details["http"]`` (the upload's ``tls`` and ``http``
documents; the agent fills them from nmap's ``ssl-cert``, ``http-title`` and
``http-server-header`` scripts, ``app.agent.nmap_xml``). This module names the keys
the search language reads there and how each is read, once for both stores:

* ``searchable_facts(details)`` is the flat, typed copy the Elasticsearch adapter
  indexes beside the document (``facts.*``, mapped in ``elasticsearch_schema``);
* ``FACT_SQL`` is the same reading as PostgreSQL expressions over ``t.details``.

A value of the wrong JSON type reads as absent in both (never an error): uploads
come from any scanner. Certificate times are compared as the fixed-width UTC text
``YYYY-MM-DDTHH:MM:SS`` (the first 19 characters of an ISO 8601 UTC time), which
sorts as the instants do, so no cast of stored text can fail a search.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Language field -> (details section, key, kind). Kinds: text (substring), keyword
# (case-insensitive exact), list (case-insensitive exact of one element), time,
# boolean, count, fingerprint (lower-case hex without separators).
FACT_FIELDS: dict[str, tuple[str, str, str]] = {
    "title": ("http", "title", "text"),
    "server": ("http", "server", "text"),
    "cert.subject": ("tls", "subject_cn", "text"),
    "cert.issuer": ("tls", "issuer", "text"),
    "cert.san": ("tls", "sans", "list"),
    "cert.fingerprint": ("tls", "sha256", "fingerprint"),
    "cert.expires": ("tls", "not_after", "time"),
    "cert.self_signed": ("tls", "self_signed", "boolean"),
    "cert.key_type": ("tls", "key_type", "keyword"),
    "cert.key_bits": ("tls", "key_bits", "count"),
}

# Elasticsearch field (under ``facts``) of each language field.
FACT_INDEX_NAMES = {name: name.replace(".", "_") for name in FACT_FIELDS}

_TIME_PREFIX = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")
MAX_COUNT = 1_000_000
MAX_TEXT = 1024


def time_key(value: Any) -> str | None:
    """A stored certificate time as comparable text (``None``: not a UTC time)."""
    if isinstance(value, str) and _TIME_PREFIX.match(value):
        return value[:19]
    return None


def _read(kind: str, value: Any) -> Any:
    if kind in ("text", "keyword"):
        if isinstance(value, str) and len(value) <= MAX_TEXT:
            return value.lower() if kind == "keyword" else value
        return None
    if kind == "list":
        if isinstance(value, list):
            items = [v.lower() for v in value if isinstance(v, str) and len(v) <= MAX_TEXT]
            return items or None
        return None
    if kind == "fingerprint":
        if isinstance(value, str):
            return value.lower().replace(":", "").replace(" ", "")[:128]
        return None
    if kind == "time":
        return time_key(value)
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind == "count":
        if type(value) is int and 0 <= value <= MAX_COUNT:
            return value
        return None
    raise ValueError(kind)


def searchable_facts(details: Mapping[str, Any] | None) -> dict[str, Any]:
    """The typed facts of ``details`` by Elasticsearch field name (absent ones left out)."""
    found: dict[str, Any] = {}
    if not details:
        return found
    for name, (section, key, kind) in FACT_FIELDS.items():
        part = details.get(section)
        if not isinstance(part, Mapping):
            continue
        value = _read(kind, part.get(key))
        if value is not None:
            found[FACT_INDEX_NAMES[name]] = value
    return found


def _json_path(section: str, key: str) -> str:
    return f"t.details->'{section}'->'{key}'"


def _fact_sql(section: str, key: str, kind: str) -> str:
    """The PostgreSQL expression reading one fact of ``t.details`` as ``_read`` does."""
    node = _json_path(section, key)
    text = f"(t.details->'{section}'->>'{key}')"
    typed = f"jsonb_typeof({node})"
    if kind == "text":
        return f"(CASE WHEN {typed} = 'string' AND length({text}) <= {MAX_TEXT} THEN {text} END)"
    if kind == "keyword":
        return (
            f"(CASE WHEN {typed} = 'string' AND length({text}) <= {MAX_TEXT} "
            f"THEN lower({text}) END)"
        )
    if kind == "fingerprint":
        return (
            f"(CASE WHEN {typed} = 'string' "
            f"THEN left(replace(replace(lower({text}), ':', ''), ' ', ''), 128) END)"
        )
    if kind == "time":
        return (
            f"(CASE WHEN {typed} = 'string' AND {text} ~ "
            "'^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}' "
            f'THEN left({text}, 19) COLLATE "C" END)'
        )
    if kind == "boolean":
        return f"(CASE WHEN {typed} = 'boolean' THEN {text} = 'true' END)"
    if kind == "count":
        # Nested CASEs: PostgreSQL may evaluate the operands of AND in any order, and
        # the cast must only ever see digits.
        return (
            f"(CASE WHEN {typed} = 'number' THEN CASE WHEN {text} ~ '^[0-9]{{1,7}}$' "
            f"THEN CASE WHEN {text}::integer <= {MAX_COUNT} THEN {text}::integer END END END)"
        )
    if kind == "list":
        # The expression is the array (or NULL); callers test membership case-insensitively.
        return f"(CASE WHEN {typed} = 'array' THEN {node} END)"
    raise ValueError(kind)


FACT_SQL: dict[str, str] = {
    name: _fact_sql(section, key, kind) for name, (section, key, kind) in FACT_FIELDS.items()
}


# The certificate fingerprint the change analysis compares (a new one is a change).
CERT_SHA256_SQL = FACT_SQL["cert.fingerprint"]


def certificate_fingerprint(details: Mapping[str, Any] | None) -> str | None:
    """``details.tls.sha256`` read as ``CERT_SHA256_SQL`` reads it (staged sightings)."""
    tls = details.get("tls") if details else None
    if not isinstance(tls, Mapping):
        return None
    return _read("fingerprint", tls.get("sha256"))
