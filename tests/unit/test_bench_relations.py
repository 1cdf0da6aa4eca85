"""``phase_relations``: the difference of two pg_statio readings, per 1,000 endpoints."""

from __future__ import annotations

from app.bench.relations import Reading, phase_relations


def test_a_phase_is_the_difference_per_thousand_endpoints_grouped_by_table():
    before = Reading(
        blocks={
            ("search_assets_user", "search_assets_user"): (10, 100),
            ("ix_cert_subject", "search_assets_user"): (5, 50),
            ("search_facts", "search_facts"): (0, 7),
        },
        maintenance={"search_assets_user": 3, "analysis_sightings": 1},
    )
    after = Reading(
        blocks={
            ("search_assets_user", "search_assets_user"): (10, 300),  # 200 hits
            ("ix_cert_subject", "search_assets_user"): (25, 70),  # 20 read, 20 hits
            ("search_facts", "search_facts"): (0, 7),  # untouched: left out
            ("new_index", "search_assets_global"): (2, 0),  # appeared meanwhile
        },
        maintenance={"search_assets_user": 3, "analysis_sightings": 2},
    )
    phase = phase_relations(before, after, 500)
    assert phase["read_per_1k"] == (20 + 2) * 2
    assert phase["touched_per_1k"] == (200 + 40 + 2) * 2
    assert phase["tables"] == {
        "search_assets_user": {"read_per_1k": 40.0, "touched_per_1k": 480.0},
        "search_assets_global": {"read_per_1k": 4.0, "touched_per_1k": 4.0},
    }
    # Most read first, then most touched.
    assert [e["relation"] for e in phase["top"]] == [
        "ix_cert_subject", "new_index", "search_assets_user",
    ]  # fmt: skip
    assert phase["maintained"] == ["analysis_sightings"]
    assert phase_relations(None, after, 500) is None
