"""Deterministic document ids (docs/architecture.md, rule: idempotent by construction).

The same logical document always gets the same id, whichever process writes
it and however often, so retries and replays overwrite instead of duplicating.
Ids are the first 128 bits of SHA-256 over a canonical, unambiguous encoding
of the identity fields (length-prefixed parts), shown as 32 hex characters.
``pg_key`` gives the first 64 bits as a signed integer for PostgreSQL primary
keys, where a narrow key is what makes set-based merges fast.

IP addresses are normalised before hashing (compressed IPv6, no zone id,
IPv4-mapped IPv6 left as written by ``ipaddress``), so equal endpoints collide.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
from collections.abc import Iterable

ID_HEX_CHARS = 32
# A dotted quad without leading zeros: its own normalised text (``normalise_ip`` would
# parse it only to print it back the same; a scan brings thousands of distinct ones).
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
CANONICAL_IPV4 = re.compile(rf"(?:{_OCTET}\.){{3}}{_OCTET}")


def ipv4_value(text: str) -> int:
    """The 32-bit value of a dotted quad matching ``CANONICAL_IPV4``, without parsing it
    into an address object."""
    a, b, c, d = text.split(".")
    return (int(a) << 24) | (int(b) << 16) | (int(c) << 8) | int(d)


@functools.lru_cache(maxsize=65536)
def normalise_ip(value: str) -> str:
    """Canonical text of an address: ``2001:DB8::0:1%eth0`` → ``2001:db8::1`` (remembered:
    an upload asks for the same address in validation and again for each document id)."""
    text = value.strip()
    if "%" in text:
        text = text.split("%", 1)[0]
    return str(parsed_address(text))


def stored_ip(value: str) -> str:
    """The address as results store it: normalised, and an IPv4-mapped IPv6 address
    (``::ffff:192.0.2.1``) as the IPv4 address it maps: one host, one identity,
    whichever way a scanner or a result file wrote it (and however a search asks)."""
    text = normalise_ip(value)
    if ":" in text:
        mapped = parsed_address(text).ipv4_mapped  # type: ignore[union-attr]
        if mapped is not None:
            return str(mapped)
    return text


@functools.lru_cache(maxsize=65536)
def parsed_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``ipaddress.ip_address`` remembered: one upload parses an address in validation, scope
    check, enrichment and document ids, and parsing dominates each of those steps. The
    objects are immutable, so sharing them is safe; a ValueError is not cached."""
    return ipaddress.ip_address(text)


def _encoded(parts: tuple[object, ...]) -> bytes:
    pieces = []
    for part in parts:
        raw = b"\x00" if part is None else str(part).encode("utf-8")
        pieces.append(len(raw).to_bytes(4, "big"))
        pieces.append(raw)
    return b"".join(pieces)


def _prefix(kind: str, *parts: object) -> hashlib._Hash:
    """The hash state after ``kind`` and the leading ``parts`` an upload's ids share: each
    id then hashes only its own parts (SHA-256 is a stream, so the digest is the same).
    One update of the joined bytes: the same digest as one update per piece, with less
    interpreter work (every fact and endpoint of an upload gets an id here)."""
    return hashlib.sha256(kind.encode() + _encoded(parts))


def _digest(kind: str, *parts: object) -> str:
    return _prefix(kind, *parts).hexdigest()[:ID_HEX_CHARS]


def _digest_after(prefix: hashlib._Hash, *parts: object) -> str:
    """``_digest`` of the prefix's kind and parts followed by ``parts``."""
    return _digest_after_encoded(prefix, _encoded(parts))


def _digest_after_encoded(prefix: hashlib._Hash, encoded: bytes) -> str:
    """``_digest_after`` of parts already encoded (``_encoded``)."""
    state = prefix.copy()
    state.update(encoded)
    return state.hexdigest()[:ID_HEX_CHARS]


# A fact id leads with its execution's id (48 bits, hex), then the digest's first 80 bits.
# The facts' primary key is on the id, and a random id sends every insert to a random
# leaf of that key: once the key no longer fits in memory each new fact costs a page
# read (docs/scaling.md, "Keys with insert locality"). Led by the execution, a run's
# facts land side by side at the key's newest end. The 80 bits hash every identity part
# (the execution included), so ids stay unique even where the 48-bit prefix wraps.
# Scheme 1 is the digest alone: a batch whose receipt was reserved under it (before
# migration 2000) is redone under it, so a retry across an upgrade overwrites its facts
# instead of doubling them (the receipt keeps the scheme, ``scan_upload_receipts.fact_ids``).
FACT_ID_SCHEME = 2
EXECUTION_PREFIX_CHARS = 12
_EXECUTION_PREFIX_MASK = (1 << (4 * EXECUTION_PREFIX_CHARS)) - 1


def fact_id(
    execution_id: int,
    upload_id: str,
    stream: str,
    batch_index: int,
    position: int,
    *,
    scheme: int = FACT_ID_SCHEME,
) -> str:
    prefix = _prefix("fact", execution_id, upload_id, stream, batch_index)
    return _fact_ids(prefix, execution_id, (position,), scheme)[0]


def fact_ids(
    execution_id: int,
    upload_id: str,
    stream: str,
    batch_index: int,
    count: int,
    *,
    scheme: int = FACT_ID_SCHEME,
) -> list[str]:
    """``fact_id`` of positions ``0..count-1`` of one batch."""
    prefix = _prefix("fact", execution_id, upload_id, stream, batch_index)
    return _fact_ids(prefix, execution_id, range(count), scheme)


def _fact_ids(
    prefix: hashlib._Hash, execution_id: int, positions: Iterable[int], scheme: int
) -> list[str]:
    if scheme == 1:
        return [_digest_after(prefix, position) for position in positions]
    if scheme != FACT_ID_SCHEME:
        raise ValueError(f"unknown fact id scheme {scheme!r}")
    head = f"{int(execution_id) & _EXECUTION_PREFIX_MASK:0{EXECUTION_PREFIX_CHARS}x}"
    tail = ID_HEX_CHARS - EXECUTION_PREFIX_CHARS
    return [head + _digest_after(prefix, position)[:tail] for position in positions]


def execution_endpoint_id(execution_id: int, ip: str, port: int, transport: str) -> str:
    return _digest("xep", execution_id, normalise_ip(ip), port, transport.lower())


def execution_endpoint_ids(
    execution_id: int, endpoints: Iterable[tuple[str, int, str]]
) -> list[str]:
    """``execution_endpoint_id`` of each (ip, port, transport) of one execution; the
    addresses must already be normalised and transports lower-case (validated
    observations are), since normalising again is what this saves."""
    prefix = _prefix("xep", execution_id)
    # The encoded parts repeat across a batch (a host's many ports, a port on many hosts):
    # each address and each (port, transport) is encoded once.
    addresses: dict[str, bytes] = {}
    services: dict[tuple[int, str], bytes] = {}
    ids = []
    for ip, port, transport in endpoints:
        head = addresses.get(ip)
        if head is None:
            head = addresses[ip] = _encoded((ip,))
        tail = services.get((port, transport))
        if tail is None:
            tail = services[(port, transport)] = _encoded((port, transport))
        ids.append(_digest_after_encoded(prefix, head + tail))
    return ids


def current_asset_id(scope: str, owner_id: int | None, ip: str, port: int, transport: str) -> str:
    """``scope`` is ``global`` (owner ignored) or ``user`` (one document per owner)."""
    if scope not in ("global", "user"):
        raise ValueError(f"unknown current-asset scope {scope!r}")
    owner = "global" if scope == "global" else owner_id
    if scope == "user" and owner_id is None:
        raise ValueError("a user-scope asset needs an owner")
    return _digest("asset", scope, owner, normalise_ip(ip), port, transport.lower())


def pg_key(document_id: str) -> int:
    """First 64 bits of the id as a signed bigint."""
    return int.from_bytes(bytes.fromhex(document_id[:16]), "big", signed=True)


# A walk over execution endpoints in id order keeps its place in a bigint (a purge
# row's ``cursor``): the id's first 64 bits, shifted so that the integers sort as the
# ids do. Both stores' deleted-task sweeps use it (``postgres_purge``,
# ``elasticsearch_purge``).
_CURSOR_SHIFT = 2**63


def cursor_key(document_id: str) -> int:
    """The cursor of an id: its first 64 bits, less 2**63 (id order, as a bigint)."""
    return int(document_id[:16], 16) - _CURSOR_SHIFT


def cursor_after_id(key: int) -> str:
    """The greatest id whose first 64 bits are the cursor's: a walk resumes after it."""
    return f"{key + _CURSOR_SHIFT:016x}{'f' * 16}"
