"""Report charts as PNG bytes, drawn with matplotlib's object API (REP-2).

``matplotlib.figure.Figure`` with an Agg canvas owned by the call: no pyplot,
so no global figure registry shared between threads and nothing to leak
between reports. A chart failure is a temporary error for the report (it is
retried), never a half-made mail.
"""

from __future__ import annotations

import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

WIDTH_IN, HEIGHT_IN, DPI = 7.0, 3.0, 80


class ChartError(Exception):
    """Drawing a chart failed (a temporary error: the report is retried)."""


def _png(figure: Figure) -> bytes:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()


def _count_axis(axis: Any) -> None:
    """A count axis: whole-number ticks only (no 0.5 endpoints), from 0, at least 0..1."""
    axis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))


def services_figure(top_services: list[dict[str, Any]]) -> Figure:
    figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN))
    axes = figure.add_subplot()
    names = [row["name"] for row in top_services] or ["none"]
    counts = [row["count"] for row in top_services] or [0]
    axes.barh(names[::-1], counts[::-1], color="#2f80ed")
    axes.set_xlabel("endpoints")
    axes.set_title("Services")
    axes.set_xlim(0, max(1, *counts))
    _count_axis(axes.xaxis)
    return figure


def services_chart(top_services: list[dict[str, Any]]) -> bytes:
    return _png(services_figure(top_services))


def new_endpoints_figure(per_day: list[dict[str, Any]]) -> Figure:
    figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN))
    axes = figure.add_subplot()
    days = [row["day"] for row in per_day] or ["-"]
    counts = [row["count"] for row in per_day] or [0]
    axes.bar(days, counts, color="#27ae60")
    axes.set_ylabel("new endpoints")
    axes.set_title("New endpoints per day")
    axes.tick_params(axis="x", labelrotation=30)
    axes.set_ylim(0, max(1, *counts))
    _count_axis(axes.yaxis)
    return figure


def new_endpoints_chart(per_day: list[dict[str, Any]]) -> bytes:
    return _png(new_endpoints_figure(per_day))


def report_charts(statistics: dict[str, Any]) -> dict[str, tuple[bytes, str]]:
    """Image token → (PNG bytes, alt text) for every chart a template may reference."""
    try:
        return {
            "services": (services_chart(statistics["top_services"]), "Endpoints per service"),
            "new-endpoints": (
                new_endpoints_chart(statistics["new_endpoints_per_day"]),
                "New endpoints per day",
            ),
        }
    except Exception as exc:
        raise ChartError(f"{type(exc).__name__}: {exc}") from exc
