"""PNG charts of rollups for operators who would rather look than read (TRF-7).

Two panels over a shared time axis in the business time zone: requests per
bucket, and bytes per bucket (response and request bytes). matplotlib runs
with the Agg backend, so no display is needed.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from pathlib import Path


def draw_chart(
    points: list[tuple[datetime, int, int, int]],
    *,
    domain: str,
    granularity: str,
    tz: tzinfo,
    out: str | Path,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    times = [point[0].astimezone(tz) for point in points]
    figure, (requests_axis, bytes_axis) = plt.subplots(
        2, 1, sharex=True, figsize=(12, 6.5), constrained_layout=True
    )
    try:
        figure.suptitle(f"{domain} — traffic per {'5 minutes' if granularity == '5m' else 'day'}")
        if not points:
            # In the axes' own coordinates: as data it sat at 1970 on a date axis and
            # collapsed the layout (matplotlib warned on stderr).
            requests_axis.text(
                0.5,
                0.5,
                "no rollups in this range",
                ha="center",
                va="center",
                transform=requests_axis.transAxes,
            )
        style = {"drawstyle": "steps-post"} if granularity == "5m" else {"marker": "o"}
        requests_axis.plot(times, [p[1] for p in points], color="#1f77b4", **style)
        requests_axis.set_ylabel("requests")
        requests_axis.grid(alpha=0.3)
        mib = 1024 * 1024
        bytes_axis.plot(
            times, [p[2] / mib for p in points], color="#d62728", label="response", **style
        )
        bytes_axis.plot(
            times, [p[3] / mib for p in points], color="#2ca02c", label="request", **style
        )
        bytes_axis.set_ylabel("MiB")
        bytes_axis.legend(loc="upper left")
        bytes_axis.grid(alpha=0.3)
        bytes_axis.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M", tz=tz))
        figure.autofmt_xdate()
        figure.savefig(out, format="png", dpi=100)
    finally:
        plt.close(figure)
