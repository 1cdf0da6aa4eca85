"""Report aggregates of one execution's endpoints, the same from every store (REP-1).

``ExecutionAggregates`` is what ``SearchStore.execution_aggregates`` returns and what
``report_execution_aggregates`` keeps (app/reports/capture.py): the top services
(an endpoint without one counts as ``unknown``), products and (port, transport) pairs
by endpoint count, and the number of endpoints first seen in each UTC hour. Ties are
broken by the name / port / transport in code-point order (PostgreSQL: ``COLLATE "C"``),
so both adapters give the same lists for the same observations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

UNKNOWN_SERVICE = "unknown"


@dataclass(frozen=True)
class ExecutionAggregates:
    services: list[dict[str, Any]]  # {"name", "count"}
    products: list[dict[str, Any]]  # {"name", "count"}
    ports: list[dict[str, Any]]  # {"port", "transport", "count"}
    first_seen_hours: list[dict[str, Any]]  # {"hour": ISO 8601 UTC, "count"}, by hour

    def as_json(self) -> dict[str, list[dict[str, Any]]]:
        return {
            "services": self.services,
            "products": self.products,
            "ports": self.ports,
            "first_seen_hours": self.first_seen_hours,
        }


def top_names(counts: Mapping[str, int], top: int) -> list[dict[str, Any]]:
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
    return [{"name": name, "count": count} for name, count in ranked]


def top_ports(counts: Mapping[tuple[int, str], int], top: int) -> list[dict[str, Any]]:
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
    return [
        {"port": port, "transport": transport, "count": count}
        for (port, transport), count in ranked
    ]


def hour_text(hour: datetime) -> str:
    """The hour as PostgreSQL's jsonb writes a UTC ``timestamptz``."""
    return hour.astimezone(UTC).isoformat()


def hours(counts: Mapping[datetime, int]) -> list[dict[str, Any]]:
    return [{"hour": hour_text(hour), "count": counts[hour]} for hour in sorted(counts)]
