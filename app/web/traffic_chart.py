"""Geometry of the console's traffic chart: rollup series as SVG coordinates (TRF-7, WEB-11).

The chart is drawn on the server so it needs no script and no image request:
this module turns (bucket start, requests, response bytes, request bytes)
points into numbers only (polyline coordinates, tick positions, axis labels),
and the template writes the SVG with autoescaping, so nothing a rollup or a
query argument carries is ever spliced into markup here. Two panels share the
time axis, as in the PNG chart of ``netmap traffic chart``: requests per
bucket, and response/request bytes per bucket. Both are steps, one per bucket
(5-minute series with empty buckets drawn as zero), so even a single bucket is a
visible bar. Time labels sit on round local times (every 5, 10, 15, 30 minutes,
hours or days, as many as fit) and count labels are whole numbers.
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
ONE_DAY = timedelta(days=1)
X_TICKS = 6  # at most
# Distances between time labels, the smallest that keeps them to X_TICKS is used.
_TIME_STEPS = tuple(timedelta(minutes=m) for m in (5, 10, 15, 30, 60, 120, 180, 360, 720)) + tuple(
    timedelta(days=d) for d in (1, 2, 7, 14, 28, 56, 91, 182, 364)
)
EDGE = 40  # a label this close to an end of the axis is anchored inside the chart
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

    width = FIVE_MINUTES if granularity == "5m" else ONE_DAY

    def coordinates(index: int, top: float, maximum: float) -> str:
        pairs: list[str] = []
        for point in series:
            y = y_of(point[index], top, maximum)
            pairs.append(f"{x_of(point[0])},{y}")
            pairs.append(f"{x_of(point[0] + width)},{y}")
        return " ".join(pairs)

    def y_ticks(top: float, maximum: float, label, *, whole: bool) -> list[Tick]:
        # The middle line only where it is a value the axis can have (no 0.5 requests).
        shares = (0, 0.5, 1) if not whole or (maximum / 2).is_integer() else (0, 1)
        return [
            Tick(y_of(int(maximum * share), top, maximum), label(maximum * share))
            for share in shares
        ]

    panels = [
        Panel(
            name="Requests",
            top=tops[0],
            bottom=tops[0] + PANEL_HEIGHT,
            lines=[Line("requests", "requests", coordinates(1, tops[0], requests_max))],
            y_ticks=y_ticks(tops[0], requests_max, format_count, whole=True),
        ),
        Panel(
            name=f"Bytes ({unit})",
            top=tops[1],
            bottom=tops[1] + PANEL_HEIGHT,
            lines=[
                Line("response-bytes", "response bytes", coordinates(2, tops[1], bytes_max)),
                Line("request-bytes", "request bytes", coordinates(3, tops[1], bytes_max)),
            ],
            y_ticks=y_ticks(
                tops[1],
                bytes_max,
                lambda v: format_count(round(v / unit_size, 1)),
                whole=unit_size == 1,
            ),
        ),
    ]
    x_ticks = [
        Tick(
            x_of(moment),
            label,
            "start"
            if x_of(moment) < LEFT + EDGE
            else "end"
            if x_of(moment) > WIDTH - RIGHT - EDGE
            else "middle",
        )
        for moment, label in time_ticks(start, end, tz, granularity)
    ]
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


def time_ticks(
    start: datetime, end: datetime, tz: tzinfo, granularity: str
) -> list[tuple[datetime, str]]:
    """Labelled moments on round local times within [start, end], at most X_TICKS of them."""
    span = end - start
    smallest = FIVE_MINUTES if granularity == "5m" else ONE_DAY
    step = next(
        (s for s in _TIME_STEPS if s >= smallest and span / s <= X_TICKS - 1), _TIME_STEPS[-1]
    )
    local_start = start.astimezone(tz)
    origin = local_start.replace(hour=0, minute=0, second=0, microsecond=0)
    moment = origin + math.ceil((local_start - origin) / step) * step
    ticks: list[tuple[datetime, str]] = []
    last_day = None
    while moment <= end and len(ticks) < X_TICKS:
        local = moment.astimezone(tz)
        if step >= ONE_DAY:
            label = f"{local:%Y-%m-%d}"
        elif local.date() != last_day:
            label = f"{local:%m-%d %H:%M}"  # the date where a day starts, then times
        else:
            label = f"{local:%H:%M}"
        last_day = local.date()
        ticks.append((moment, label))
        moment += step
    return ticks


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
