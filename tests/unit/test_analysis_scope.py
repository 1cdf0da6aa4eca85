"""An execution's scope as the change analysis's parameters: networks, ports, bounds."""

from __future__ import annotations

import ipaddress
import uuid
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from app.analysis.changes import (
    BEFORE_ALL_ADDRESSES,
    LAST_ADDRESS,
    ExecutionScope,
    execution_scope,
)
from app.analysis.queue import AnalysisClaim


def claim_for(*, targets: tuple[str, ...]) -> AnalysisClaim:
    return AnalysisClaim(
        execution_id=1, task_id=1, owner_id=1, kind="ports", status="succeeded",
        finished_at=datetime.now(UTC), targets=targets, ports="22,80-81", transports=("TCP",),
        claim_token=uuid.uuid4(), phase="analyse", attempts=1, recovered=False,
        lease_seconds=60, claimed_monotonic=0.0,
    )  # fmt: skip


def test_scope_collapses_overlapping_networks_and_skips_domains() -> None:
    scope = execution_scope(
        claim_for(targets=("10.0.0.0/25", "10.0.0.128/25", "10.0.0.7", "example.com"))
    )
    assert scope.networks == ("10.0.0.0/24",)
    assert scope.ports == "{[22,23),[80,82)}" and scope.transports == ("tcp",)


def test_bounds_put_every_ipv4_address_before_every_ipv6_one() -> None:
    scope = ExecutionScope(networks=("2001:db8::/126", "10.0.0.0/30", "192.0.2.8/29"), ports="{}",
                           transports=("tcp",))  # fmt: skip
    assert scope.address_bounds() == ("10.0.0.0", "2001:db8::3")
    only_v6 = ExecutionScope(networks=("2001:db8::/127",), ports="{}", transports=("tcp",))
    assert only_v6.address_bounds() == ("2001:db8::", "2001:db8::1")


def test_no_network_bounds_the_whole_order() -> None:
    scope = ExecutionScope(networks=(), ports="{}", transports=())
    assert scope.address_bounds() == (BEFORE_ALL_ADDRESSES, LAST_ADDRESS)


_networks = st.lists(
    st.one_of(
        st.builds(
            lambda a, p: ipaddress.ip_network((a, p), strict=False),
            st.integers(0, 2**32 - 1),
            st.integers(16, 32),
        ),
        st.builds(
            lambda a, p: ipaddress.ip_network((a, p), strict=False),
            st.integers(0, 2**128 - 1),
            st.integers(100, 128),
        ),
    ),
    min_size=1,
    max_size=5,
)


@given(_networks)
def test_every_address_of_every_network_lies_within_the_bounds(networks) -> None:
    scope = ExecutionScope(networks=tuple(map(str, networks)), ports="{}", transports=("tcp",))
    low, high = (ipaddress.ip_address(a) for a in scope.address_bounds())

    def order(address):  # PostgreSQL's inet order: family first
        return (address.version, int(address))

    for network in networks:
        assert order(low) <= order(network.network_address)
        assert order(network.broadcast_address) <= order(high)
    assert any(n.network_address == low for n in networks)
    assert any(n.broadcast_address == high for n in networks)
