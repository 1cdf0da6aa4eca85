"""Change sets and scope-aware absence on real PostgreSQL, over both search stores (ANA-2..4)."""

from __future__ import annotations

from tests.support.analysis import Scans, changes_of, hosts, summary_of

NET = "10.1.0.0/28"


def test_port_closed_between_two_scans_of_a_28_is_one_gone(scans: Scans) -> None:
    owner = scans.owner()
    addresses = hosts(NET, 14)
    first = [(ip, port) for ip in addresses for port in (22, 80)]
    scans.scan(owner, [NET], first, ports="22,80")
    scans.settle()
    assert len(scans.open_set(owner)) == 28

    second = [e for e in first if e != (addresses[3], 80)]
    execution = scans.scan(owner, [NET], second, ports="22,80")
    scans.settle()

    assert [(c.kind, c.ip, c.port) for c in changes_of(execution)] == [("gone", addresses[3], 80)]
    assert scans.gone_set(owner) == {(addresses[3], 80, "tcp")}
    assert len(scans.open_set(owner)) == 27
    gone = scans.assets(owner, "gone")[(addresses[3], 80, "tcp")]
    assert gone.status == "gone" and gone.gone_execution_id == execution
    assert gone.gone_since is not None
    # The global view: no other owner holds the endpoint, so it is gone there too.
    assert set(scans.assets(None, "gone", scope="global")) == {(addresses[3], 80, "tcp")}
    summary = summary_of(execution)
    assert (summary.new, summary.changed, summary.gone, summary.reappeared) == (0, 0, 1, 0)
    assert summary.absence_checked


def test_half_range_scan_marks_nothing_outside_it_gone(scans: Scans) -> None:
    owner = scans.owner()
    addresses = hosts(NET, 14)
    scans.scan(owner, [NET], [(ip, 443) for ip in addresses], ports="443")
    scans.settle()
    # The second scan covers 10.1.0.0/29 only and sees nothing there but .1 and .2.
    execution = scans.scan(
        owner, ["10.1.0.0/29"], [(addresses[0], 443), (addresses[1], 443)], ports="443"
    )
    scans.settle()
    assert scans.gone_set(owner) == {(ip, 443, "tcp") for ip in addresses[2:7]}
    assert all(c.kind == "gone" for c in changes_of(execution))
    assert scans.open_set(owner) == {(ip, 443, "tcp") for ip in addresses[:2] + addresses[7:]}


def test_port_and_transport_outside_the_scope_are_never_gone(scans: Scans) -> None:
    owner = scans.owner()
    ip = "10.1.0.1"
    scans.scan(
        owner,
        [ip],
        [(ip, 22), (ip, 8080), (ip, 53, "udp")],
        ports="22,53,8080",
        transports=("tcp", "udp"),
    )
    scans.settle()
    execution = scans.scan(owner, [ip], [], ports="22", transports=("tcp",))
    scans.settle()
    assert [(c.kind, c.port, c.transport) for c in changes_of(execution)] == [("gone", 22, "tcp")]
    assert scans.open_set(owner) == {(ip, 8080, "tcp"), (ip, 53, "udp")}


def test_failed_dns_and_empty_target_executions_mark_nothing_gone(scans: Scans) -> None:
    owner = scans.owner()
    addresses = hosts(NET, 4)
    scans.scan(owner, [NET], [(ip, 80) for ip in addresses], ports="80")
    scans.settle()
    failed = scans.scan(owner, [NET], [], ports="80", status="failed")
    dns = scans.scan(owner, ["example.com"], [], ports="80", kind="dns")
    domains_only = scans.scan(owner, ["example.org"], [], ports="80")
    outcomes = scans.settle()
    assert [o.result for o in outcomes] == ["completed"] * 3
    for execution in (failed, dns, domains_only):
        assert changes_of(execution) == []
        assert not summary_of(execution).absence_checked
    assert scans.gone_set(owner) == set()
    assert len(scans.open_set(owner)) == 4


def test_new_changed_reappeared_keep_previous_values(scans: Scans) -> None:
    owner = scans.owner()
    ip = "10.1.0.9"
    first = scans.scan(owner, [ip], [(ip, 80, "tcp", {"service": "http", "product": "nginx"})])
    scans.settle()
    assert [(c.kind, c.new_service) for c in changes_of(first)] == [("new", "http")]

    changed = scans.scan(owner, [ip], [(ip, 80, "tcp", {"service": "https"})])
    scans.settle()
    assert [(c.kind, c.old_service, c.new_service) for c in changes_of(changed)] == [
        ("changed", "http", "https")
    ]
    same = scans.scan(owner, [ip], [(ip, 80, "tcp", {"service": "https"})])
    scans.settle()
    assert changes_of(same) == []

    gone = scans.scan(owner, [ip], [])
    scans.settle()
    assert [c.kind for c in changes_of(gone)] == ["gone"]
    assert scans.gone_set(owner) == {(ip, 80, "tcp")}

    back = scans.scan(owner, [ip], [(ip, 80, "tcp", {"service": "https"})])
    scans.settle()
    assert [c.kind for c in changes_of(back)] == ["reappeared"]
    assert scans.open_set(owner) == {(ip, 80, "tcp")}
    doc = scans.assets(owner, "open")[(ip, 80, "tcp")]
    assert doc.gone_since is None and doc.gone_execution_id is None


def test_one_owners_scans_never_touch_another_owners_assets(scans: Scans) -> None:
    alice, bob = scans.owner(), scans.owner()
    addresses = hosts(NET, 3)
    scans.scan(alice, [NET], [(ip, 22) for ip in addresses], ports="22")
    scans.scan(bob, [NET], [(ip, 22) for ip in addresses], ports="22")
    scans.settle()
    bob_scan = scans.scan(bob, [NET], [], ports="22")
    scans.settle()
    assert len(changes_of(bob_scan)) == 3
    assert scans.gone_set(bob) == {(ip, 22, "tcp") for ip in addresses}
    assert scans.gone_set(alice) == set()
    assert len(scans.open_set(alice)) == 3
    # Alice still has them open, so the global view keeps them open.
    assert scans.assets(None, "gone", scope="global") == {}
    assert len(scans.assets(None, "open", scope="global")) == 3
