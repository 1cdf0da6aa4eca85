"""Property: the open set after analysis equals the set recomputed from all sightings (ANA-3).

For random sequences of executions of one owner (random scopes of addresses,
ports and transports, random sightings inside them, some failed, finish times
in an order unrelated to creation), an endpoint is open exactly when the last
event about it, by finish time, was a sighting, where the events are the
sightings of every execution and the absences inside the scope of every
succeeded one. The analysis computes it incrementally in SQL; the test
recomputes it from scratch in Python.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.analysis import Scans
from tests.support.search_documents import BASE_TIME

ADDRESSES = ("10.4.0.1", "10.4.0.2", "10.4.0.3")
PORTS = (22, 80)
TRANSPORTS = ("tcp", "udp")
UNIVERSE = [(ip, port, t) for ip in ADDRESSES for port in PORTS for t in TRANSPORTS]

execution_strategy = st.fixed_dictionaries(
    {
        "targets": st.sets(st.sampled_from(ADDRESSES), min_size=1),
        "ports": st.sets(st.sampled_from(PORTS), min_size=1),
        "transports": st.sets(st.sampled_from(TRANSPORTS), min_size=1),
        "seen": st.sets(st.integers(0, len(UNIVERSE) - 1)),
        "succeeded": st.booleans(),
        "finish": st.integers(0, 10_000),
    }
)


def _in_scope(execution: dict, endpoint: tuple[str, int, str]) -> bool:
    ip, port, transport = endpoint
    return (
        ip in execution["targets"]
        and port in execution["ports"]
        and transport in execution["transports"]
    )


def _recomputed(executions: list[dict]) -> set[tuple[str, int, str]]:
    last: dict[tuple[str, int, str], bool] = {}
    for execution in sorted(executions, key=lambda e: (e["finish"], e["order"])):
        seen = execution["sightings"]
        for endpoint in seen:
            last[endpoint] = True
        if execution["succeeded"]:
            for endpoint in UNIVERSE:
                if _in_scope(execution, endpoint) and endpoint not in seen:
                    if endpoint in last:
                        last[endpoint] = False
    return {endpoint for endpoint, is_open in last.items() if is_open}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(execution_strategy, min_size=1, max_size=5, unique_by=lambda e: e["finish"]))
# One statement per execution, and slices of two endpoints (staged, several statements).
@pytest.mark.parametrize("slice_endpoints", [250_000, 2])
def test_open_set_equals_recomputation_from_all_sightings(
    pg_scans: Scans, slice_endpoints: int, executions
) -> None:
    pg_scans = Scans(
        settings=pg_scans.settings.replace(analysis={"slice_endpoints": slice_endpoints}),
        store=pg_scans.store,
    )
    owner = pg_scans.owner()
    for order, execution in enumerate(executions):
        execution["order"] = order
        # Sightings lie inside the execution's scope (a scanner reports what it scanned).
        execution["sightings"] = {
            UNIVERSE[i] for i in execution["seen"] if _in_scope(execution, UNIVERSE[i])
        }
        if not execution["succeeded"]:
            execution["sightings"] = set()  # a failed execution publishes nothing
        pg_scans.scan(
            owner,
            sorted(execution["targets"]),
            sorted(execution["sightings"]),
            ports=",".join(str(p) for p in sorted(execution["ports"])),
            transports=sorted(execution["transports"]),
            status="succeeded" if execution["succeeded"] else "failed",
            finished_at=BASE_TIME + timedelta(seconds=execution["finish"]),
        )
    pg_scans.settle()
    assert pg_scans.open_set(owner) == _recomputed(executions)
    seen_ever = set().union(*(e["sightings"] for e in executions))
    assert pg_scans.gone_set(owner) == seen_ever - _recomputed(executions)
