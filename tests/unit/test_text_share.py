"""The share of rows a free text is estimated in, from a view's text statistics, as the
planner estimates an ``ILIKE`` (``app.search.postgres_text_share``)."""

from __future__ import annotations

import pytest

from app.search.postgres_text_share import TextStatistics

STATISTICS = TextStatistics(
    null_share=0.0,
    common=(
        ("HTTP/1.1 404\x1fApache Tomcat\x1f", 0.3),
        ("SSH-2.0-OpenSSH_9.6\x1fOpenSSH\x1f", 0.2),
    ),
    # The other half of the rows: ten bounds, two of them Tomcat's.
    bounds=(
        "a\x1fnginx\x1fhost-1",
        "b\x1fnginx\x1fhost-2",
        "c\x1fTomcat 9\x1fhost-3",
        "d\x1fnginx\x1fhost-4",
        "e\x1fnginx\x1fhost-5",
        "f\x1fMySQL\x1fhost-6",
        "g\x1ftomcat 10\x1fhost-7",
        "h\x1fnginx\x1fhost-8",
        "i\x1fnginx\x1fhost-9",
        "j\x1fnginx\x1fhost-10",
    ),
)


@pytest.mark.parametrize(
    ("text", "share"),
    [
        ("TOMCAT", 0.3 + 0.5 * 2 / 10),  # case folded, in common values and in bounds
        ("openssh", 0.2),  # in a common value only
        ("nginx", 0.5 * 7 / 10),  # in bounds only
        ("host-1", 0.5 * 2 / 10),  # host-1 and host-10
        ("quokka", 0.0),
    ],
)
def test_the_share_is_the_common_values_holding_it_and_the_rest_by_the_histogram(text, share):
    assert STATISTICS.share_holding(text) == pytest.approx(share)


def test_a_text_never_matches_across_two_fields():
    # The searched text loses its control characters, as the search's ILIKE pattern does,
    # so "Tomcat\x1fhost" is "Tomcathost", which no field holds.
    assert STATISTICS.share_holding("Tomcat 9\x1fhost-3") == 0.0


def test_rows_without_a_text_and_a_view_without_a_histogram():
    statistics = TextStatistics(null_share=0.25, common=(("nginx", 0.75),), bounds=())
    assert statistics.share_holding("nginx") == pytest.approx(0.75)
    assert statistics.share_holding("tomcat") == 0.0
