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

PROTOCOL_VERSION = 1


def canonical_checksum(observations: Any, dns_records: Any) -> str:
    """SHA-256 of the canonical JSON of both lists: keys sorted, compact, UTF-8, no escaping."""
    canonical = json.dumps(
        {"observations": observations, "dns_records": dns_records},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
