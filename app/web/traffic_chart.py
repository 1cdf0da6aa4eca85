"""Geometry of the console's traffic chart: rollup series as SVG coordinates (TRF-7, WEB-11).

The chart is drawn on the server so it needs no script and no image request:
this module turns (bucket start, requests, response bytes, request bytes)
points into numbers only (polyline coordinates, tick positions, axis labels),
and the template writes the SVG with autoescaping, so nothing a rollup or a
query argument carries is ever spliced into markup here. Two panels share the
time axis, as in the PNG chart of ``netmap traffic chart``: requests per
bucket, and response/request bytes per bucket. 5-minute series are steps with
empty buckets drawn as zero; day series are points joined by lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo

WIDTH = 960
PANEL_HEIGHT = 180
LEFT = 84  # room for the y labels
RIGHT = 16
TOP = 30  # room for the first panel's name
GAP = 60  # between the panels: the top panel's x labels and the next panel's name
BOTTOM = 40
FIVE_MINUTES = timedelta(minutes=5)
X_TICKS = 6
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

Point = tuple[datetime, int, int, int]


@dataclass(frozen=True)
class Line:
    css: str
    name: str
    points: str  # "x,y x,y …" for a <polyline>


@dataclass(frozen=True)
class Tick:
    position: float
    label: str
    anchor: str = "middle"  # the first and last time labels stay inside the chart


@dataclass(frozen=True)
class Panel:
    name: str
    top: float
    bottom: float
    lines: list[Line]
    y_ticks: list[Tick]


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int
    right: float
    title: str
    description: str
    panels: list[Panel]
    x_ticks: list[Tick]
    empty: bool


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2 or 5 times 10^k at or above ``value`` (1 for nothing)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)  # pragma: no cover - the loop always returns


def format_count(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.1f}"


def byte_unit(peak: float) -> tuple[str, int]:
    """The largest binary unit (B, KiB, MiB …) whose size does not exceed ``peak``."""
    index = 0
    while index + 1 < len(_BYTE_UNITS) and peak >= 1024 ** (index + 1):
        index += 1
    return _BYTE_UNITS[index], 1024**index


def format_bytes(value: float) -> str:
    unit, size = byte_unit(value)
    return f"{value / size:,.1f} {unit}" if size > 1 else f"{int(value):,} B"


def _filled(points: list[Point], start: datetime, end: datetime) -> list[Point]:
    """5-minute points with every missing bucket of [start, end) present as zeros."""
    by_start = {p[0]: p for p in points}
    first = start - timedelta(seconds=start.timestamp() % 300)
    filled = []
    bucket = first
    while bucket < end:
        filled.append(by_start.get(bucket, (bucket, 0, 0, 0)))
        bucket += FIVE_MINUTES
    return filled


def build_chart(
    points: list[Point],
    *,
    domain: str,
    granularity: str,
    start: datetime,
    end: datetime,
    tz: tzinfo,
) -> Chart:
    span = max((end - start).total_seconds(), 1.0)
    plot_width = WIDTH - LEFT - RIGHT

    def x_of(moment: datetime) -> float:
        offset = min(max((moment - start).total_seconds(), 0.0), span)
        return round(LEFT + offset / span * plot_width, 1)

    series = _filled(points, start, end) if granularity == "5m" else points
    tops = [TOP, TOP + PANEL_HEIGHT + GAP]
    requests_max = nice_ceiling(max((p[1] for p in series), default=0))
    bytes_peak = max((max(p[2], p[3]) for p in series), default=0)
    # The scale is a round number in the unit shown (50 KiB, not 48.8 KiB).
    unit, unit_size = byte_unit(bytes_peak)
    bytes_max = nice_ceiling(bytes_peak / unit_size) * unit_size

    def y_of(value: int, top: float, maximum: float) -> float:
        return round(top + PANEL_HEIGHT - value / maximum * PANEL_HEIGHT, 1)

    def coordinates(index: int, top: float, maximum: float) -> str:
        pairs: list[str] = []
        for point in series:
            y = y_of(point[index], top, maximum)
            if granularity == "5m":
                pairs.append(f"{x_of(point[0])},{y}")
                pairs.append(f"{x_of(point[0] + FIVE_MINUTES)},{y}")
            else:
                pairs.append(f"{x_of(point[0])},{y}")
        return " ".join(pairs)

    def y_ticks(top: float, maximum: float, label) -> list[Tick]:
        return [
            Tick(y_of(int(maximum * share), top, maximum), label(maximum * share))
            for share in (0, 0.5, 1)
        ]

    panels = [
        Panel(
            name="Requests",
            top=tops[0],
            bottom=tops[0] + PANEL_HEIGHT,
            lines=[Line("requests", "requests", coordinates(1, tops[0], requests_max))],
            y_ticks=y_ticks(tops[0], requests_max, format_count),
        ),
        Panel(
            name=f"Bytes ({unit})",
            top=tops[1],
            bottom=tops[1] + PANEL_HEIGHT,
            lines=[
                Line("response-bytes", "response bytes", coordinates(2, tops[1], bytes_max)),
                Line("request-bytes", "request bytes", coordinates(3, tops[1], bytes_max)),
            ],
            y_ticks=y_ticks(tops[1], bytes_max, lambda v: format_count(round(v / unit_size, 1))),
        ),
    ]
    label_format = "%m-%d %H:%M" if granularity == "5m" else "%Y-%m-%d"
    x_ticks = []
    for index in range(X_TICKS):
        moment = start + (end - start) * index / (X_TICKS - 1)
        anchor = "start" if index == 0 else "end" if index == X_TICKS - 1 else "middle"
        x_ticks.append(Tick(x_of(moment), moment.astimezone(tz).strftime(label_format), anchor))
    every = "5 minutes" if granularity == "5m" else "day"
    title = f"{domain}: traffic per {every}"
    described = (
        f"{_local(start, tz)} to {_local(end, tz)}: no rollups in this range."
        if not points
        else _description(points, start, end, tz)
    )
    return Chart(
        width=WIDTH,
        height=tops[1] + PANEL_HEIGHT + BOTTOM,
        left=LEFT,
        right=WIDTH - RIGHT,
        title=title,
        description=described,
        panels=panels,
        x_ticks=x_ticks,
        empty=not points,
    )


def _local(moment: datetime, tz: tzinfo) -> str:
    return moment.astimezone(tz).strftime("%Y-%m-%d %H:%M %z")


def _description(points: list[Point], start: datetime, end: datetime, tz: tzinfo) -> str:
    peak = max(points, key=lambda p: p[1])
    return (
        f"{_local(start, tz)} to {_local(end, tz)}: {len(points):,} buckets with traffic, "
        f"{sum(p[1] for p in points):,} requests in total, at most {peak[1]:,} "
        f"(at {_local(peak[0], tz)}); "
        f"{format_bytes(sum(p[2] for p in points))} sent, "
        f"{format_bytes(sum(p[3] for p in points))} received."
    )
