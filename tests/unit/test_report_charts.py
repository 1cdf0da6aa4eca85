"""Report charts count endpoints: their count axis has whole-number ticks only."""

from __future__ import annotations

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from app.reports.charts import new_endpoints_figure, report_charts, services_figure


def _visible_ticks(axis, low, high):
    FigureCanvasAgg(axis.figure).draw()
    return [t for t in axis.get_majorticklocs() if low <= t <= high]


@pytest.mark.parametrize("counts", [[], [1], [2, 1], [3], [37, 5, 1]])
def test_count_axes_have_integer_ticks_from_zero(counts):
    services = services_figure([{"name": f"s{i}", "count": c} for i, c in enumerate(counts)])
    per_day = new_endpoints_figure(
        [{"day": f"2026-12-0{i + 1}", "count": c} for i, c in enumerate(counts)]
    )
    for axes, axis, limits in (
        (services.axes[0], services.axes[0].xaxis, services.axes[0].get_xlim()),
        (per_day.axes[0], per_day.axes[0].yaxis, per_day.axes[0].get_ylim()),
    ):
        low, high = limits
        assert low == 0 and high == max([1, *counts])
        ticks = _visible_ticks(axis, low, high)
        assert len(ticks) >= 2, (counts, ticks)
        assert all(float(t).is_integer() for t in ticks), (counts, ticks)
        labels = [t.get_text() for t in axis.get_ticklabels() if t.get_text()]
        assert all("." not in label for label in labels), labels
        assert axes.get_title()


def test_report_charts_are_png_images():
    images = report_charts({"top_services": [], "new_endpoints_per_day": []})
    assert sorted(images) == ["new-endpoints", "services"]
    assert all(png.startswith(b"\x89PNG") for png, _alt in images.values())
