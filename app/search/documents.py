"""Documents kept in the search store, and the merge rule they share (STO-1; docs/architecture.md,
rule: idempotent by construction).

Three kinds of documents:

* ``FactDocument`` — one raw observation or DNS record as received (after
  normalisation/enrichment), never merged; stored by month of ``observed_at``.
* ``EndpointDocument`` with ``scope="execution"`` — one (ip, port, transport)
  seen by one execution; repeated sightings merge.
* ``EndpointDocument`` with ``scope="global"`` / ``"user"`` — the current
  asset, across executions, for everyone (admins) or per owner.

``merge_endpoints`` is a join: commutative, associative and idempotent, so
replaying writes in any order converges to the same document. Both adapters
implement exactly this rule (PostgreSQL in SQL, Elasticsearch in a stored
Painless script) and the contract suite checks them against this function.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import orjson

FACT_KINDS = ("observation", "dns_record")
ENDPOINT_SCOPES = ("execution", "global", "user")


def month_of(moment: datetime) -> str:
    """Storage month of a timestamp (UTC): ``2026.11``; names fact partitions and indices."""
    return f"{moment.year:04d}.{moment.month:02d}"


# Documents are values: nothing assigns to a field after construction (``dataclasses.replace``
# makes a changed copy). They are not declared ``frozen`` because a frozen dataclass sets every
# field through ``object.__setattr__`` in its ``__init__``: an upload builds one or two of each
# per observation, and frozen construction cost 4.1 µs for an endpoint document and 2.1 µs for a
# fact against 0.9 and 0.6 µs (this machine), some 6-9 µs of a worker's ~80 µs per observation.
# Neither was ever hashable (``body`` and ``details`` are dicts), so nothing else changes.
@dataclass(slots=True)
class FactDocument:
    id: str
    kind: str  # "observation" | "dns_record"
    execution_id: int
    task_id: int
    owner_id: int
    scanner_id: int | None
    upload_id: str
    stream: str
    batch_index: int
    position: int
    observed_at: datetime  # timezone-aware UTC
    body: Mapping[str, Any]  # the normalised observation / DNS record, with enrichment and tags

    @property
    def month(self) -> str:
        return month_of(self.observed_at)


@dataclass(slots=True)  # a value, not frozen: see FactDocument
class EndpointDocument:
    id: str
    scope: str  # "execution" | "global" | "user"
    ip: str  # normalised (app.search.ids.normalise_ip)
    port: int
    transport: str  # "tcp" | "udp"
    first_seen: datetime
    first_execution_id: int
    last_seen: datetime
    last_execution_id: int
    owner_id: int | None = None  # None only for scope="global"
    execution_id: int | None = None  # set only for scope="execution"
    task_id: int | None = None  # set only for scope="execution"
    # Fields of the newest observation (newest-wins as a group):
    state: str | None = None
    service: str | None = None
    product: str | None = None
    version: str | None = None
    banner: str | None = None
    hostname: str | None = None
    tags: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)  # tls/http facts, enrichment
    observation_key: str = ""  # deterministic tie-breaker between equally new observations
    # Current assets only, set by the change analysis (ANA-4), never by a merge: a
    # projection write leaves them as they are, and a new document starts open.
    status: str = "open"  # "open" | "gone"
    gone_since: datetime | None = None
    gone_execution_id: int | None = None
    # When each probed field's value was last observed (``FIELD_RULES``), where that is not
    # simply ``last_seen``: a merge that keeps a value from an older observation (the newer
    # one did not probe the field) records the older time here. Empty for a fresh document.
    observed: Mapping[str, datetime] = field(default_factory=dict)

    def newest_rank(self) -> tuple[datetime, int, str]:
        return (self.last_seen, self.last_execution_id, self.observation_key)

    def oldest_rank(self) -> tuple[datetime, int]:
        return (self.first_seen, self.first_execution_id)

    def public(self) -> dict[str, Any]:
        """The shape the HTTP API returns for results and assets."""
        item: dict[str, Any] = {
            "ip": self.ip,
            "port": self.port,
            "transport": self.transport,
            "state": self.state,
            "service": self.service,
            "product": self.product,
            "version": self.version,
            "banner": self.banner,
            "hostname": self.hostname,
            "tags": list(self.tags),
            "first_seen": self.first_seen.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "first_execution_id": self.first_execution_id,
            "last_execution_id": self.last_execution_id,
            # The certificate and HTTP facts (docs/inventory.md), not the rest of the
            # details (script outputs may run to kilobytes; exports carry them whole).
            "details": {k: self.details[k] for k in ("tls", "http") if k in self.details},
            # A guessed value (``GUESSED_AT``) was not observed: it has no time here.
            "observed": {
                **{
                    name: seen.isoformat()
                    for name in PROBED_FIELDS
                    if (seen := field_seen(self, name)) is not None and seen != GUESSED_AT
                },
                **{
                    name: seen.isoformat()
                    for name in DETAIL_GROUPS
                    if (seen := group_seen(self, name)) is not None
                },
            },
        }
        if self.scope != "execution":
            item["status"] = self.status
            item["gone_since"] = self.gone_since.isoformat() if self.gone_since else None
            item["gone_execution_id"] = self.gone_execution_id
        return item


# How each field of an observation merges into what is known of an endpoint, and what
# counts as a change (docs/changes.md). ``always``: every scan reports it (the port state),
# so the newest observation's value wins, even an empty one. ``when_probed``: only a scan
# that ran the detection reports it (service/version detection, banner grabbing, reverse
# DNS); an observation without it says nothing about it, so the last observed value is
# kept, with the time it was observed, and a missing value is never a change. A new field
# is one more row here, a column, and nothing else.
FIELD_RULES: dict[str, str] = {
    "state": "always",
    "service": "when_probed",
    "product": "when_probed",
    "version": "when_probed",
    "banner": "when_probed",
    "hostname": "when_probed",
    # The TLS certificate's fingerprint (``details.tls.sha256``): a run that read no
    # certificate (a ``quick`` profile) keeps the recorded one and is not a change.
    "cert_sha256": "when_probed",
}
# Rows read from an endpoint's details rather than kept as a document column: the
# analysis applies their rule (its ``cert_sha256`` columns); in the document the details
# are the newest observation's.
DETAIL_FIELDS = frozenset({"cert_sha256"})
PROBED_FIELDS = tuple(
    name
    for name, rule in FIELD_RULES.items()
    if rule == "when_probed" and name not in DETAIL_FIELDS
)


# When a value named from the port table was "observed": a service the scanner did not
# name is the port's usual one (requirement ING-14), a guess, not an observation. Dated
# before every observation, it shows and is searched while nothing better is known, any
# service a scanner names wins the merge over it, a later guess never replaces a named
# one, and the change analysis reads it as not probed (``guessed``).
GUESSED_AT = datetime(1970, 1, 1, tzinfo=UTC)


def guessed(doc: EndpointDocument, name: str) -> bool:
    """Whether ``doc``'s value of ``name`` is a guess (``GUESSED_AT``), not observed."""
    return doc.observed.get(name) == GUESSED_AT


# Documents of ``details`` a scan writes only when it probed them: the certificate an
# ``ssl-cert`` read (``tls``) and the page ``http-title``/``http-server-header`` read
# (``http``). Each merges as a probed field does: the value of the version that observed
# it last, its time in ``observed`` under its name, so a scan that did not read them (a
# ``quick`` profile) keeps what an earlier one found. The rest of ``details`` is the
# newest observation's. Ties of time are decided by each document's identity (these
# keys' texts, compared as code points), the same in the SQL and Painless merges.
DETAIL_GROUPS: dict[str, tuple[str, ...]] = {"tls": ("sha256",), "http": ("title", "server")}


def group_identity(name: str, value: Any) -> str:
    """The text a tie between two ``name`` documents is decided by: its identity keys'
    texts joined by U+001F (a key that is no text, or a document that is no object,
    counts as empty)."""
    found = value if isinstance(value, Mapping) else {}
    return "\x1f".join(
        text if isinstance(text := found.get(key), str) else "" for key in DETAIL_GROUPS[name]
    )


def group_seen(doc: EndpointDocument, name: str) -> datetime | None:
    """When ``doc``'s ``details[name]`` was observed (None: it has none)."""
    if doc.details.get(name) is None:
        return None
    return doc.observed.get(name) or doc.last_seen


def field_seen(doc: EndpointDocument, name: str) -> datetime | None:
    """When ``doc``'s value of probed field ``name`` was observed (None: never)."""
    if getattr(doc, name) is None:
        return None
    return doc.observed.get(name) or doc.last_seen


NEWEST_FIELDS = ("state", "service", "product", "version", "banner", "hostname", "tags", "details")


# One encoder for every key (``json.dumps`` with options builds a new one per call); the
# text must stay byte-for-byte what it was, since stored keys are compared with new ones.
_KEY_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
)


_FLAT = (str, int, bool, type(None))
# The newest-wins fields that hold one value (tags and details are containers).
_SCALAR_FIELDS = tuple(k for k in NEWEST_FIELDS if k not in ("tags", "details"))


_FLAT_TYPES = frozenset(_FLAT)


def _plain(value: Any) -> bool:
    """Text, integers, booleans and null, also nested in dicts with text keys and lists:
    what orjson writes exactly as the key encoder does. Floats are written differently
    (``1e16`` against ``1e+16``), and an int key would be sorted as an integer. (Loops
    rather than ``all()`` over generators: this runs for every endpoint of a batch.)"""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (type(item) not in _FLAT_TYPES and not _plain(item)):
                return False
        return True
    if kind is list:
        for item in value:
            if type(item) not in _FLAT_TYPES and not _plain(item):
                return False
        return True
    return kind in _FLAT_TYPES


def observation_key(values: Mapping[str, Any]) -> str:
    """Tie-breaker hash over the newest-wins fields (hex, compared as bytes/"C" collation)."""
    return newest_fields_key(
        {k: (list(values.get(k) or ()) if k == "tags" else values.get(k)) for k in NEWEST_FIELDS}
    )


def newest_fields_key(fields: dict[str, Any]) -> str:
    """``observation_key`` of a dict already in the hashed shape: exactly the newest-wins
    fields, tags a list (ingest builds its documents' fields so, and saves the copy)."""
    # orjson writes the same bytes as the encoder for plain values (keys sorted alike, at
    # every depth), several times faster; floats or other values anywhere take the
    # encoder. Scanners' details nest (CPE lists, script outputs), so the check recurses.
    # (Loops rather than ``all()`` over generators: this runs for every endpoint.)
    plain = _plain(fields["details"])
    if plain:
        for name in _SCALAR_FIELDS:
            if type(fields[name]) not in _FLAT_TYPES:
                plain = False
                break
    if plain:
        for tag in fields["tags"]:
            if type(tag) is not str:
                plain = False
                break
    if plain:
        try:
            return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()
        except TypeError:  # an integer beyond 64 bits, a lone surrogate
            pass
    canonical = _KEY_ENCODER.encode(fields)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def merge_endpoints(a: EndpointDocument, b: EndpointDocument) -> EndpointDocument:
    """Join two versions of the same document (same id)."""
    if a.id != b.id:
        raise ValueError("only versions of the same document merge")
    newest = a if a.newest_rank() >= b.newest_rank() else b
    oldest = a if a.oldest_rank() <= b.oldest_rank() else b
    # A probed field takes the value of the newest version that observed it (ties: the
    # greater value, so the choice stays commutative); a version that did not probe it
    # has no say. Each such field is a join of its own, so the merge stays one.
    probed: dict[str, Any] = {}
    observed: dict[str, datetime] = {}
    for name in PROBED_FIELDS:
        best: tuple[datetime, Any] | None = None
        for version in (a, b):
            seen = field_seen(version, name)
            if seen is not None and (best is None or (seen, getattr(version, name)) > best):
                best = (seen, getattr(version, name))
        probed[name] = None if best is None else best[1]
        if best is not None and best[0] != newest.last_seen:
            observed[name] = best[0]  # as new as the document: implied, not stored
    # The newest's details; a document only an older version has is laid over them (a
    # version with none, or a JSON null, leaves the newest's as they are).
    details = dict(newest.details)
    for name in DETAIL_GROUPS:
        chosen: tuple[datetime, str, Any] | None = None
        for version in (a, b):
            seen = group_seen(version, name)
            if seen is None:
                continue
            value = version.details[name]
            candidate = (seen, group_identity(name, value), value)
            if chosen is None or candidate[:2] > chosen[:2]:
                chosen = candidate
        if chosen is not None:
            details[name] = chosen[2]
            if chosen[0] != newest.last_seen:
                observed[name] = chosen[0]
    return replace(
        newest,
        **probed,
        details=details,
        observed=observed,
        status=a.status,
        gone_since=a.gone_since,
        gone_execution_id=a.gone_execution_id,
        first_seen=oldest.first_seen,
        first_execution_id=oldest.first_execution_id,
    )


def merge_all(documents: Iterable[EndpointDocument]) -> list[EndpointDocument]:
    """Merge documents sharing an id; order of the result follows first appearance."""
    merged: dict[str, EndpointDocument] = {}
    for document in documents:
        existing = merged.get(document.id)
        merged[document.id] = document if existing is None else merge_endpoints(existing, document)
    return list(merged.values())
