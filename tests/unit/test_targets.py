"""Target, port and transport parsing (SCN-1) and the scan plan (SCN-2)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.config import ScanSettings
from app.errors import ValidationError
from app.scan_control.creation import validate_task_request
from app.scan_control.planning import plan_executions
from app.target_rules import (
    SPECIAL_USE_CLASSES,
    count_addresses,
    normalise_domain,
    parse_ports,
    parse_targets,
    parse_transports,
)

LIMITS = ScanSettings()
# The parsing properties hold for every address; the special-use policy is tested apart.
EVERY_CLASS = ScanSettings(special_use_targets=SPECIAL_USE_CLASSES)


@given(st.ip_addresses())
def test_any_address_parses_to_its_canonical_form(address):
    parsed, problems = parse_targets([str(address)], EVERY_CLASS)
    assert problems == []
    assert parsed.normalised == [str(address)]
    assert parsed.address_count == 1


@given(st.ip_addresses(v=6))
def test_ipv6_in_any_spelling_normalises_to_compressed(address):
    exploded = address.exploded.upper()
    parsed, problems = parse_targets([exploded], EVERY_CLASS)
    assert problems == []
    assert parsed.normalised == [address.compressed]


@given(st.ip_addresses(v=4), st.integers(min_value=16, max_value=32))
def test_ipv4_networks_match_the_ipaddress_module(address, prefix):
    network = ipaddress.ip_network(f"{address}/{prefix}", strict=False)
    parsed, problems = parse_targets([str(network)], EVERY_CLASS)
    assert problems == []
    expected = str(network.network_address) if prefix == 32 else str(network)
    assert parsed.normalised == [expected]
    assert parsed.address_count == network.num_addresses


@given(st.ip_addresses(v=4), st.integers(min_value=16, max_value=31))
def test_host_bits_set_is_rejected_with_a_suggestion(address, prefix):
    network = ipaddress.ip_network(f"{address}/{prefix}", strict=False)
    if network.network_address == address:
        return
    _, problems = parse_targets([f"{address}/{prefix}"], LIMITS)
    assert len(problems) == 1
    assert f"did you mean {network}" in problems[0].reason


@given(st.text(max_size=40))
@settings(max_examples=300)
def test_arbitrary_text_never_crashes_and_is_either_accepted_or_named(text):
    parsed, problems = parse_targets([text], LIMITS)
    if problems:
        assert problems[0].index in (0, None)
        assert problems[0].reason
    else:
        assert len(parsed.normalised) == 1


def test_every_bad_item_is_named_with_index_and_reason():
    _, problems = parse_targets(
        ["192.0.2.1", "300.1.1.1", "bad_label.example", "192.0.2.1/24", "-x.com", "", 7, "*.a.com"],
        LIMITS,
    )
    by_index = {p.index: p.reason for p in problems}
    assert set(by_index) == {1, 2, 3, 4, 5, 6, 7}
    assert "did you mean 192.0.2.0/24" in by_index[3]
    assert "wildcard" in by_index[7]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Example.COM", "example.com"),
        ("example.com.", "example.com"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("例え.テスト", "xn--r8jz45g.xn--zckzah"),
        ("a-b.c-d.example", "a-b.c-d.example"),
    ],
)
def test_domains_normalise_to_idna_a_labels(raw, expected):
    assert normalise_domain(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "localhost",  # one label
        "-bad.example",
        "bad-.example",
        "under_score.example",
        "a" * 64 + ".example",
        ".".join(["a" * 60] * 5),  # longer than 253
        "example.123",
        "exa mple.com",
        "*.example.com",
        "",
    ],
)
def test_invalid_domains_are_rejected(raw):
    with pytest.raises(ValueError):
        normalise_domain(raw)


def test_duplicates_and_equal_spellings_collapse():
    parsed, problems = parse_targets(
        ["2001:db8::1", "2001:DB8:0::1", "Example.com", "example.com."], LIMITS
    )
    assert problems == []
    assert parsed.normalised == ["2001:db8::1", "example.com"]


def test_zone_ids_are_rejected():
    _, problems = parse_targets(["fe80::1%eth0"], LIMITS)
    assert "zone" in problems[0].reason


def test_address_limit_counts_overlaps_once():
    limits = ScanSettings(max_addresses_per_task=256)
    parsed, problems = parse_targets(["192.0.2.0/24", "192.0.2.0/25", "192.0.2.7"], limits)
    assert problems == []
    assert parsed.address_count == 256
    _, problems = parse_targets(["192.0.2.0/24", "198.51.100.1"], limits)
    assert problems and "257 addresses" in problems[0].reason and problems[0].index is None


def test_huge_ipv6_networks_hit_the_limit_not_memory():
    _, problems = parse_targets(["2001:db8::/32"], LIMITS)
    assert problems and "limit per task" in problems[0].reason


def test_target_count_limit():
    limits = ScanSettings(max_targets_per_task=2)
    _, problems = parse_targets(["192.0.2.1", "192.0.2.2", "192.0.2.3"], limits)
    assert "at most 2 targets" in problems[0].reason


@pytest.mark.parametrize(
    ("raw", "ranges"),
    [
        ("22", [(22, 22)]),
        ("1,65535", [(1, 1), (65535, 65535)]),
        ("80,22,443", [(22, 22), (80, 80), (443, 443)]),
        ("8000-8010, 8005-8020,8021", [(8000, 8021)]),
        (" 1 - 3 ", [(1, 3)]),
        (443, [(443, 443)]),
    ],
)
def test_port_lists_merge_and_sort(raw, ranges):
    parsed, problems = parse_ports(raw, LIMITS)
    assert problems == []
    assert parsed == ranges


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("0", "1-65535"),
        ("65536", "1-65535"),
        ("100-80", "below its start"),
        ("80,,443", "a port or a range"),
        ("http", "a port or a range"),
        ("", "must be a string"),
        (None, "must be a string"),
        ("1-70000", "1-65535"),
    ],
)
def test_bad_ports_are_named(raw, reason):
    _, problems = parse_ports(raw, LIMITS)
    assert problems and reason in problems[0].reason


@given(st.lists(st.tuples(st.integers(1, 65535), st.integers(0, 500)), min_size=1, max_size=20))
def test_port_ranges_cover_exactly_the_union(spans):
    text = ",".join(f"{lo}-{min(lo + width, 65535)}" for lo, width in spans)
    parsed, problems = parse_ports(text, LIMITS)
    assert problems == []
    expected = set()
    for lo, width in spans:
        expected.update(range(lo, min(lo + width, 65535) + 1))
    covered = set()
    for lo, hi in parsed:
        covered.update(range(lo, hi + 1))
    assert covered == expected
    assert all(parsed[i][1] + 1 < parsed[i + 1][0] for i in range(len(parsed) - 1))


def test_port_count_limit():
    _, problems = parse_ports("1-1000", ScanSettings(max_ports_per_task=100))
    assert "at most 100 ports" in problems[0].reason


def test_transports():
    assert parse_transports(None) == (["tcp"], [])
    assert parse_transports(["udp", "tcp", "udp"]) == (["tcp", "udp"], [])
    _, problems = parse_transports(["sctp"])
    assert problems[0].index == 0


def test_task_request_collects_problems_from_every_field():
    with pytest.raises(ValidationError) as info:
        validate_task_request(
            {"name": "", "targets": ["999.1.1.1"], "ports": "0", "transports": ["x"]}, LIMITS
        )
    error = info.value
    assert error.code == "invalid_targets"
    fields = {item["field"] for item in error.details["items"]}
    assert fields == {"name", "targets", "ports", "transports"}


def test_unknown_task_fields_are_rejected():
    with pytest.raises(ValidationError) as info:
        validate_task_request({"name": "x", "targets": ["192.0.2.1"], "ports": "1", "x": 1}, LIMITS)
    assert info.value.code == "unknown_field"
    assert info.value.details == {"field": "x", "fields": ["x"]}


@given(
    st.lists(st.tuples(st.ip_addresses(v=4), st.integers(20, 32)), min_size=1, max_size=8),
    st.sampled_from([1, 16, 100, 256, 1024]),
)
@settings(max_examples=60, deadline=None)
def test_plan_covers_every_address_once_within_the_chunk_size(entries, chunk):
    networks = sorted({str(ipaddress.ip_network(f"{a}/{p}", strict=False)) for a, p in entries})
    parsed, problems = parse_targets(networks, EVERY_CLASS)
    assert problems == []
    planned = plan_executions(parsed, chunk)
    assert all(e.kind == "ports" for e in planned)
    assert all(e.addresses <= chunk for e in planned)
    pieces = [ipaddress.ip_network(t) for e in planned for t in e.targets]
    # Every address exactly once, even when the targets overlap.
    assert sum(p.num_addresses for p in pieces) == parsed.address_count
    assert count_addresses(pieces) == parsed.address_count


def test_domains_get_dns_executions():
    parsed, _ = parse_targets(["192.0.2.1", "example.com", "example.org"], LIMITS)
    planned = plan_executions(parsed, 256)
    assert [(e.kind, e.targets) for e in planned] == [
        ("ports", ("192.0.2.1",)),
        ("dns", ("example.com", "example.org")),
    ]


# --- special-use addresses ([scan] special_use_targets, SCN-7) ---------------------------

REFUSED_BY_DEFAULT = {
    "metadata": [
        "169.254.169.254",
        "::ffff:169.254.169.254",
        "fd00:ec2::254",
        "100.100.100.200",
        "168.63.129.16",
    ],
    "loopback": ["127.0.0.1", "::1", "127.0.0.0/16", "::ffff:127.0.0.1"],
    "link_local": ["169.254.1.1", "fe80::1", "169.254.1.0/24"],
    "multicast": ["224.0.0.1", "ff02::1", "239.0.0.0/16"],
    "broadcast": ["255.255.255.255"],
    "unspecified": ["0.0.0.0", "::"],
}
ALLOWED_BY_DEFAULT = {
    "private": ["10.1.2.3", "172.16.0.0/12", "192.168.1.0/24", "100.64.0.1", "fd00::1"],
}


@pytest.mark.parametrize(
    ("name", "target"),
    [(name, t) for name, targets in REFUSED_BY_DEFAULT.items() for t in targets],
)
def test_special_use_classes_refused_by_default(name, target):
    _, problems = parse_targets([target], LIMITS)
    assert len(problems) == 1 and problems[0].index == 0
    assert name.replace("_", "-") in problems[0].reason
    # Listing the class in the policy allows it (a metadata address also lies in a
    # link-local or private range, which must be allowed as well).
    allowed = ScanSettings(special_use_targets=("loopback", "private", "link_local", name))
    assert parse_targets([target], allowed)[1] == []


def test_a_metadata_address_is_refused_as_metadata_even_where_its_range_is_allowed():
    wide = ScanSettings(special_use_targets=("private", "link_local", "loopback"))
    for target in ("169.254.169.254", "100.100.100.200", "169.254.169.0/24"):
        problems = parse_targets([target], wide)[1]
        assert problems and "metadata" in problems[0].reason, target


@pytest.mark.parametrize(
    ("name", "target"),
    [(name, t) for name, targets in ALLOWED_BY_DEFAULT.items() for t in targets],
)
def test_private_ranges_are_allowed_by_default_and_can_be_refused(name, target):
    assert parse_targets([target], LIMITS)[1] == []
    strict = ScanSettings(special_use_targets=())
    problems = parse_targets([target], strict)[1]
    assert problems and name in problems[0].reason


@pytest.mark.parametrize(
    "target", ["10.0.0.1\n127.0.0.1", "10.0.0.1 8.8.8.8", "exa\x00mple.com", "a\u2028b.com"]
)
def test_control_characters_and_whitespace_inside_a_target_are_refused(target):
    problems = parse_targets([target], EVERY_CLASS)[1]
    assert problems and "control characters or whitespace" in problems[0].reason


def test_a_network_overlapping_a_refused_range_is_refused():
    _, problems = parse_targets(["169.254.0.0/15", "0.0.0.0/1"], LIMITS)
    assert [p.index for p in problems] == [0, 1]


def test_an_unknown_special_use_class_is_a_config_error():
    from app.config import ConfigError, load_settings

    with pytest.raises(ConfigError, match=r"scan\.special_use_targets = 'lan'"):
        load_settings(env={}, overrides={"scan": {"special_use_targets": ["lan"]}})


@pytest.mark.parametrize("target", ["10.0.0.1-5", "10.0.0.1-10.0.0.5", "fe80::1-fe80::9"])
def test_an_address_range_is_refused_not_taken_for_a_host_name(target):
    parsed, problems = parse_targets([target], LIMITS)
    assert parsed.domains == [] and len(problems) == 1
    assert problems[0].reason.startswith("address ranges are not targets; give a CIDR block")


@pytest.mark.parametrize("target", ["0.0.0.0/0", "::/0"])
def test_the_whole_internet_is_refused_for_its_size_not_for_a_special_range_in_it(target):
    _, problems = parse_targets([target], LIMITS)
    assert len(problems) == 1 and problems[0].index == 0
    assert "addresses; the limit per task is" in problems[0].reason
    assert "not scannable" not in problems[0].reason
