"""An execution analysed in slices gives exactly the change set of one statement (ANA-2).

``[analysis] slice_endpoints`` bounds each analysis statement; an execution with
more sightings is staged and worked through in address slices, and a rescan that
finds many endpoints absent is sliced by the owner's endpoints in scope. Here the
same scan history of two owners is analysed with slices far larger than any
execution (one statement each) and with slices of three endpoints, over both
search stores, and everything the analysis writes must agree.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from app.db import transaction
from tests.support.analysis import Scans, hosts, summary_of

NET = "10.6.0.0/28"
PORTS = (22, 80, 443)


def _history(addresses: list[str]) -> list[list[tuple[str, int, str, dict[str, Any]]]]:
    """Three scans of the /28: all new; then changes, absences and new ports; then returns."""
    first = [(ip, port, "tcp", {"service": f"s{port}"}) for ip in addresses for port in PORTS]
    second = [
        (ip, port, "tcp", {"service": "other" if i % 3 == 0 else f"s{port}"})
        for i, ip in enumerate(addresses)
        for port in PORTS
        if not (i % 4 == 1 and port == 80)
    ] + [(addresses[-1], 8443, "tcp", {"service": "https"})]
    third = first[:]
    return [first, second, third]


def _analysed(scans: Scans, owner: int, slice_endpoints: int) -> list[dict[str, Any]]:
    sliced = Scans(
        settings=scans.settings.replace(analysis={"slice_endpoints": slice_endpoints}),
        store=scans.store,
        clock=scans.clock,
    )
    results = []
    for endpoints in _history(hosts(NET, 14)):
        execution = sliced.scan(owner, [NET], endpoints, ports="22,80,443,8443")
        outcomes = sliced.settle()
        results.append(
            {
                "changes": _change_set(execution),
                "summary": _summary(execution),
                "slices": [o.counts.slices for o in outcomes if o.counts is not None],
            }
        )
    results.append({"assets": _assets(owner)})
    return results


def _change_set(execution: int) -> list[tuple[Any, ...]]:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT kind, host(ip), port, transport, old_service, new_service, "
                "old_state, new_state FROM analysis_changes WHERE execution_id = :e"
            ),
            {"e": execution},
        ).all()
    return sorted(tuple(r) for r in rows)


def _summary(execution: int) -> tuple[Any, ...]:
    s = summary_of(execution)
    return (s.new, s.changed, s.gone, s.reappeared, s.absence_checked, s.superseded)


def _assets(owner: int) -> list[tuple[Any, ...]]:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT host(ip), port, transport, status, service FROM analysis_assets "
                "WHERE owner_id = :o"
            ),
            {"o": owner},
        ).all()
    return sorted(tuple(r) for r in rows)


def _staged_rows() -> int:
    with transaction() as conn:
        return int(conn.execute(sa.text("SELECT count(*) FROM analysis_sightings")).scalar_one())


def test_slices_of_three_endpoints_write_what_one_statement_writes(scans: Scans) -> None:
    whole = _analysed(scans, scans.owner(), slice_endpoints=1_000_000)
    sliced = _analysed(scans, scans.owner(), slice_endpoints=3)

    # The history exercised every kind of change.
    kinds = {c[0] for step in whole[:3] for c in step["changes"]}
    assert kinds == {"new", "changed", "gone", "reappeared"}
    for one, many in zip(whole[:3], sliced[:3], strict=True):
        assert many["changes"] == one["changes"]
        assert many["summary"] == one["summary"]
        assert one["slices"] == [1]
        # 42-43 sightings, 3 per slice (plus an address's other ports): many slices.
        assert many["slices"][0] >= 10
    assert sliced[3]["assets"] == whole[3]["assets"]
    assert _staged_rows() == 0  # the staged copies are dropped after each analysis


def test_a_rescan_that_finds_nothing_is_sliced_by_the_endpoints_it_marks_gone(
    pg_scans: Scans,
) -> None:
    owner = pg_scans.owner()
    sliced = Scans(
        settings=pg_scans.settings.replace(analysis={"slice_endpoints": 4}),
        store=pg_scans.store,
    )
    addresses = hosts(NET, 14)
    sliced.scan(owner, [NET], [(ip, 22) for ip in addresses], ports="22")
    sliced.settle()
    execution = sliced.scan(owner, [NET], [], ports="22")
    outcomes = sliced.settle()

    # Fewer sightings than a slice (none): the store's own SQL, no staging, yet the
    # fourteen endpoints in scope are split into slices of four addresses.
    assert [o.counts.slices for o in outcomes if o.counts is not None] == [4]
    summary = summary_of(execution)
    assert (summary.new, summary.gone) == (0, 14)
    assert pg_scans.gone_set(owner) == {(ip, 22, "tcp") for ip in addresses}
