"""A one-panel line chart over time, as SVG coordinates (the resources page, WEB-10).

The same approach as the traffic chart (``app.web.traffic_chart``): numbers only
(polyline coordinates, ticks, labels) computed here, the SVG written by the
template with autoescaping, nothing a sample carries spliced into markup. Values
are scaled to their unit: bytes in the largest binary unit the peak reaches
(MiB, GiB …), percentages from 0 to at least 100 when they are host-wide.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo

from app.web.traffic_chart import (
    BOTTOM,
    EDGE,
    LEFT,
    PANEL_HEIGHT,
    RIGHT,
    TOP,
    WIDTH,
    Line,
    Panel,
    Tick,
    byte_unit,
    format_count,
    nice_ceiling,
    time_ticks,
)

MAX_LINES = 8  # colours the stylesheet has (.series.s0 … .s7)

Samples = list[tuple[datetime, float]]


@dataclass(frozen=True)
class LineChart:
    width: int
    height: int
    left: int
    right: float
    title: str
    description: str
    panels: list[Panel]
    x_ticks: list[Tick]
    empty: bool
    legend: list[tuple[str, str]]  # (css class, name)


def unit_scale(unit: str, peak: float) -> tuple[str, float]:
    """(unit text for the axis, divisor) for values of ``unit`` up to ``peak``."""
    if unit in ("bytes", "bytes_per_second"):
        name, size = byte_unit(peak)
        return (f"{name}/s" if unit == "bytes_per_second" else name), float(size)
    if unit == "percent":
        return "%", 1.0
    return "", 1.0


def format_value(unit: str, value: float) -> str:
    """One value with its unit: ``412.3 MiB``, ``1.2 MiB/s``, ``37.5 %``, ``0.52``."""
    text, size = unit_scale(unit, value)
    if unit in ("bytes", "bytes_per_second"):
        number = f"{value:,.0f}" if size == 1 else f"{value / size:,.1f}"
        return f"{number} {text}"
    if unit == "percent":
        return f"{value:,.1f} %"
    return f"{value:,.2f}"


def build_line_chart(
    title: str,
    lines: list[tuple[str, Samples]],
    *,
    unit: str,
    start: datetime,
    end: datetime,
    tz: tzinfo,
    percent_of_whole: bool = False,
) -> LineChart:
    """``lines``: (name, samples) each; at most MAX_LINES, the highest peaks first."""
    lines = sorted(lines, key=lambda line: -max((v for _, v in line[1]), default=0))[:MAX_LINES]
    span = max((end - start).total_seconds(), 1.0)
    plot_width = WIDTH - LEFT - RIGHT
    peak = max((v for _, samples in lines for _, v in samples), default=0.0)
    unit_text, size = unit_scale(unit, peak)
    maximum = nice_ceiling(peak / size) * size
    if percent_of_whole:
        maximum = max(maximum, 100.0)

    def x_of(moment: datetime) -> float:
        offset = min(max((moment - start).total_seconds(), 0.0), span)
        return round(LEFT + offset / span * plot_width, 1)

    def y_of(value: float) -> float:
        return round(TOP + PANEL_HEIGHT - min(value, maximum) / maximum * PANEL_HEIGHT, 1)

    drawn = [
        Line(
            f"s{index}",
            name,
            " ".join(f"{x_of(at)},{y_of(value)}" for at, value in samples if start <= at <= end),
        )
        for index, (name, samples) in enumerate(lines)
    ]
    y_ticks = [
        Tick(y_of(maximum * share), format_count(round(maximum * share / size, 1)))
        for share in (0, 0.5, 1)
    ]
    panel = Panel(
        name=f"{title} ({unit_text})" if unit_text else title,
        top=TOP,
        bottom=TOP + PANEL_HEIGHT,
        lines=drawn,
        y_ticks=y_ticks,
    )
    x_ticks = []
    for moment, label in time_ticks(start, end, tz, "5m"):
        x = x_of(moment)
        anchor = "start" if x < LEFT + EDGE else "end" if x > WIDTH - RIGHT - EDGE else "middle"
        x_ticks.append(Tick(x, label, anchor))
    empty = not any(line.points for line in drawn)
    if empty:
        description = "No samples in this range."
    else:
        description = "; ".join(
            f"{name}: latest {format_value(unit, samples[-1][1])}, "
            f"at most {format_value(unit, max(v for _, v in samples))}"
            for name, samples in lines
            if samples
        )
    return LineChart(
        width=WIDTH,
        height=TOP + PANEL_HEIGHT + BOTTOM,
        left=LEFT,
        right=WIDTH - RIGHT,
        title=title,
        description=description,
        panels=[panel],
        x_ticks=x_ticks,
        empty=empty,
        legend=[(line.css, line.name) for line in drawn],
    )
