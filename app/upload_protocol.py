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


def canonical_checksum(observations: Any, dns_records: Any, *, float_free: bool = False) -> str:
    """SHA-256 of the canonical JSON of both lists: keys sorted, compact, UTF-8, no escaping.

    The canonical form is what Python's ``json`` writes with those options. orjson
    writes the very same bytes for strings (every code point escaped alike),
    integers, booleans and null, several times faster; it writes floats differently
    (``1e16`` where ``json`` writes ``1e+16``). So ``float_free=True`` — the caller
    knows no float is anywhere inside — takes orjson, and an integer beyond 64 bits
    (which orjson refuses) still takes ``json``.
    """
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
