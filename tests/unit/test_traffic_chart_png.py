"""`netmap traffic chart` for a range without rollups draws the empty chart quietly: its
"no rollups" note, placed as data on a date axis, collapsed the layout and matplotlib
warned on stderr with a source path."""

from __future__ import annotations

import warnings
from datetime import UTC

from app.traffic.chart import draw_chart


def test_an_empty_range_draws_without_warnings(tmp_path):
    out = tmp_path / "empty.png"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draw_chart([], domain="www.example.com", granularity="5m", tz=UTC, out=out)
    assert out.read_bytes().startswith(b"\x89PNG")
