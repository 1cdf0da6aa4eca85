"""The text/plain part of a report mail: the HTML's text, a line per block."""

from __future__ import annotations

from app.reports.delivery import plain_text
from app.reports.templates import DEFAULT_HTML


def test_a_line_break_inside_a_cell_is_a_space_and_blocks_are_lines():
    html = "<h1>Weekly</h1><table><tr><td>Changed / gone</td><td>0 /\n  0 /\n0</td></tr></table>"
    assert plain_text(html) == "Weekly\nChanged / gone 0 / 0 / 0\n"


def test_the_default_templates_figures_stay_on_their_lines():
    # The default template breaks its source lines inside the changed/gone/reappeared cell.
    assert "/\n{{ stats.changes.reappeared }}" in DEFAULT_HTML
    html = (
        DEFAULT_HTML.replace("{{ stats.changes.changed }}", "1")
        .replace("{{ stats.changes.gone }}", "2")
        .replace("{{ stats.changes.reappeared }}", "3")
    )
    lines = plain_text(html).splitlines()
    assert any(line.endswith("1 / 2 / 3") for line in lines), lines
