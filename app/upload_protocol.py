"""What the server and every scanner client must agree on byte for byte (ING-3).

The scanner protocol's version and the batch checksum live here, apart from both
sides, so the shipped agent (which loads no server code, AGT-1) and the upload
validation compute the checksum with one function: a drift between two copies
would turn every batch into a ``checksum_mismatch``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson

PROTOCOL_VERSION = 1


def _float_free(value: Any) -> bool:
    """No float anywhere inside ``value`` (dicts, lists and tuples are walked)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is not str and kind is not int and isinstance(item, float):
            return False
    return True


def canonical_checksum(
    observations: Any, dns_records: Any, *, float_free: bool | None = None
) -> str:
    """SHA-256 of the canonical JSON of both lists: keys sorted, compact, UTF-8, no escaping.

    The canonical form is what Python's ``json`` writes with those options. orjson
    writes the very same bytes for strings (every code point escaped alike),
    integers, booleans and null, several times faster; it writes floats differently
    (``1e16`` where ``json`` writes ``1e+16``). So a body with no float inside takes
    orjson — ``float_free`` says so when the caller already knows (the server's
    validation walks every value anyway), else a walk over the lists finds out, at a
    fraction of what the ``json`` encoder costs — and an integer beyond 64 bits (which
    orjson refuses) still takes ``json``.
    """
    if float_free is None:
        float_free = _float_free(observations) and _float_free(dns_records)
    document = {"dns_records": dns_records, "observations": observations}
    if float_free:
        try:
            canonical = orjson.dumps(document, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # JSONEncodeError: a long integer, a type JSON does not know
            pass
        else:
            return hashlib.sha256(canonical).hexdigest()
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
