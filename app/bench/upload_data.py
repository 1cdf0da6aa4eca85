"""The observations the upload benchmarks send, shared by the in-process and HTTP runs."""

from __future__ import annotations

from typing import Any


def observations(start: int, count: int, observed_at: str) -> list[dict[str, Any]]:
    """``count`` distinct endpoints from index ``start`` (addresses in 10.0.0.0/8)."""
    return [
        {
            "observed_at": observed_at,
            "ip": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
            "port": 443 + (i >> 24),
            "transport": "tcp",
            "state": "open",
            "service": {"name": "https", "product": "nginx", "version": "1.26"},
        }
        for i in range(start, start + count)
    ]
