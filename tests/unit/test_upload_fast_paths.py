"""The upload's fast paths give exactly what the exact paths give (ING-13, ING-3, FND-7).

Decoding (orjson, else ``json``), the body (one loop, else pydantic), the checksum
(orjson when float-free, else ``json``), ids (hash state shared by a batch), IPv4
scopes (a boundary table) and observation keys (orjson for flat fields) are each
compared with the path they shortcut, on ordinary and on awkward input.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError as PydanticValidationError

from app import json_input
from app.config import IngestSettings
from app.errors import ValidationError
from app.json_input import decode_json
from app.result_ingest import enrichment
from app.result_ingest.fast_body import fast_upload
from app.result_ingest.model import UploadBody, _larger_than
from app.result_ingest.parse import parse_upload
from app.result_ingest.scope import _AddressCheck, _inside, _networks
from app.search import ids
from app.search.documents import _KEY_ENCODER, NEWEST_FIELDS, newest_fields_key, observation_key
from app.upload_protocol import canonical_checksum
from tests.support.scanner_protocol import checksum as protocol_checksum

NOW = datetime.now(UTC)
AT = (NOW - timedelta(minutes=3)).isoformat()

# JSON values as a scanner could send them in tls/http/details (no NaN: refused anyway).
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


def _checksum(observations):
    try:
        return canonical_checksum(observations, [])
    except (UnicodeEncodeError, ValueError):  # a lone surrogate or NaN: refused before it
        return "0" * 64


def _envelope(observations, **extra):
    return {
        "protocol_version": 1,
        "claim_token": "00000000-0000-0000-0000-000000000001",
        "upload_id": "u-1",
        "batch_index": 3,
        "checksum": _checksum(observations),
        "observations": observations,
        **extra,
    }


VALID_OBSERVATIONS = [
    {"observed_at": AT, "ip": "192.0.2.1", "port": 22},
    {"observed_at": AT.replace("+00:00", "Z"), "ip": "2001:DB8::0:1", "port": 1},
    {"observed_at": "2026-11-30T08:30:00.5+02:30", "ip": "10.0.0.1", "port": 65535},
    {
        "observed_at": AT,
        "ip": "198.51.100.7",
        "port": 443,
        "transport": "udp",
        "state": "open|filtered",
        "service": {"name": "HTTPS", "product": "nginx\x00x", "version": None, "banner": "b\x00"},
        "hostname": "Host.Example.",
        "tags": ["web", "edge:1"],
        "tls": {"subject": "CN=x\x00", "not_after": 1.5, "chain": [{"k\x00": [1, "a"]}]},
        "http": {"status": 200, "headers": {"Server": "nginx"}},
        "details": {"cpe": ["cpe:/a:nginx"], "big": 2**62, "ok": True, "none": None},
    },
    {"observed_at": AT, "ip": "203.0.113.9", "port": 80, "service": {}, "tags": []},
    {"observed_at": AT, "ip": "::ffff:192.0.2.1", "port": 8080, "service": None, "tls": None},
]


def _pydantic(raw):
    return UploadBody.model_validate(raw)


@pytest.mark.parametrize("observation", VALID_OBSERVATIONS)
def test_the_fast_body_is_the_body_pydantic_builds(observation):
    raw = _envelope([observation, dict(observation)])
    fast = fast_upload(raw)
    assert fast is not None
    body, float_free = fast
    exact = _pydantic(raw)
    assert body == exact
    assert body.model_fields_set == exact.model_fields_set
    for mine, theirs in zip(body.observations, exact.observations, strict=True):
        assert mine.model_dump() == theirs.model_dump()
        assert mine.model_fields_set == theirs.model_fields_set
        assert mine.observed_at.tzinfo is UTC and theirs.observed_at.tzinfo is UTC
    assert float_free == (observation is not VALID_OBSERVATIONS[3])  # its tls holds a float


@settings(max_examples=60, deadline=None)
@given(tls=json_values.filter(lambda v: isinstance(v, dict)), details=json_values)
def test_documents_of_any_json_shape_validate_alike(tls, details):
    observation = {"observed_at": AT, "ip": "192.0.2.1", "port": 22, "tls": tls}
    if isinstance(details, dict):
        observation["details"] = details
    raw = _envelope([observation])
    fast = fast_upload(raw)
    try:
        exact = _pydantic(raw)
    except PydanticValidationError:  # pydantic refuses: the fast path must not accept
        assert fast is None
        return
    if fast is not None:  # declining is always allowed (the exact path decides)
        assert fast[0] == exact


@pytest.mark.parametrize(
    "change",
    [
        {"port": True},
        {"port": 22.0},
        {"port": "22"},
        {"port": 0},
        {"ip": "10.0.0.1%eth0"},
        {"ip": "010.0.0.1"},
        {"ip": "not an address"},
        {"observed_at": "2026-11-30T06:00:00"},  # no time zone
        {"observed_at": "2026-11-30 06:00:00Z"},  # another form: pydantic decides
        {"observed_at": 1764482400},
        {"transport": "TCP"},
        {"transport": None},
        {"state": "up"},
        {"service": {"name": "x", "extra": 1}},
        {"service": {"name": ["x"]}},
        {"service": {"name": "x" * 1025}},
        {"hostname": "h" * 254},
        {"hostname": "x\ud800"},
        {"tags": None},
        {"tags": "web"},
        {"tags": ["x" * 257]},
        {"tls": {"a": float("nan")}},
        {"tls": {"a\ud800": 1}},
        {"tls": []},
        {"http": {"deep": json.loads("[" * 20 + "]" * 20)}},
        {"unknown": 1},
    ],
)
def test_anything_unusual_takes_the_exact_path(change):
    observation = {"observed_at": AT, "ip": "192.0.2.1", "port": 22, **change}
    assert fast_upload(_envelope([observation])) is None


@pytest.mark.parametrize(
    "raw",
    [
        _envelope([{"observed_at": AT, "ip": "192.0.2.1", "port": 22}], protocol_version=True),
        _envelope([{"observed_at": AT, "ip": "192.0.2.1", "port": 22}], stream="other"),
        _envelope([{"observed_at": AT, "ip": "192.0.2.1", "port": 22}], extra=1),
        _envelope([{"observed_at": AT, "ip": "192.0.2.1", "port": 22}], upload_id="a\ud800"),
        _envelope(
            [{"observed_at": AT, "ip": "192.0.2.1", "port": 22}],
            dns_records=[{"observed_at": AT, "name": "a.example", "type": "A", "value": "1.2.3.4"}],
        ),
        _envelope([]),
    ],
)
def test_envelopes_the_loop_does_not_handle_take_the_exact_path(raw):
    assert fast_upload(raw) is None


def test_refusals_name_the_same_item_whichever_path_saw_the_body_first():
    good = {"observed_at": AT, "ip": "192.0.2.1", "port": 22}
    bad = {"observed_at": AT, "ip": "192.0.2.1", "port": 70000}
    with pytest.raises(ValidationError) as info:
        parse_upload(_envelope([good] * 5 + [bad]), IngestSettings())
    (item,) = info.value.details["items"]
    assert (item["list"], item["index"], item["field"]) == ("observations", 5, "port")


def test_a_wrong_checksum_is_refused_on_the_fast_path_too():
    raw = _envelope([{"observed_at": AT, "ip": "192.0.2.1", "port": 22}])
    raw["checksum"] = "0" * 64
    with pytest.raises(ValidationError) as info:
        parse_upload(raw, IngestSettings())
    assert info.value.code == "checksum_invalid"


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=6), children, max_size=4)
        ),
        max_leaves=15,
    )
)
def test_the_float_free_checksum_is_the_canonical_one(value):
    # Integers beyond 64 bits included: orjson refuses them, json writes them.
    assert canonical_checksum([value], [], float_free=True) == protocol_checksum([value], [])


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_the_checksum_finds_floats_itself(observation, record):
    # Without float_free, a float anywhere (floats written as json writes them: 1e+16)
    # still gives the canonical checksum; so do tuples, which both encoders write as lists.
    assert canonical_checksum([observation], [record]) == protocol_checksum([observation], [record])
    nested = {"t": (observation, [1e16])}
    assert canonical_checksum([nested], []) == protocol_checksum([nested], [])


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_decoding_gives_what_json_gives(value):
    data = json.dumps({"v": value}, ensure_ascii=bool(random.getrandbits(1))).encode()
    decoded = decode_json(data)
    assert decoded == json.loads(data)
    assert json.dumps(decoded, sort_keys=True) == json.dumps(json.loads(data), sort_keys=True)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": 123456789012345678901234567890}',
        b'{"a": -9223372036854775809}',
        b'{"a": 18446744073709551616}',
        b'{"a": 9223372036854775807, "b": -9223372036854775808}',
        b'{"a": "1234567890123456789012"}',
        b'{"a": 1.5e300, "b": -0.0, "c": 1e16}',
        b'{"a": 1, "a": 2}',
        b"",
    ],
)
def test_numbers_and_edge_cases_decode_exactly(data):
    decoded = decode_json(data)
    assert decoded == json.loads(data or b"null")
    assert repr(decoded) == repr(json.loads(data or b"null"))


def _outcome(data):
    try:
        return decode_json(data)
    except ValidationError as exc:
        return (exc.code, exc.message, exc.details)


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": NaN}',
        b'{"a": 1e999}',
        b'{"a": "\\ud800"}',  # json takes it; the value walk names it later
        b'\xef\xbb\xbf{"a": 1}',
        '{"a": 1}'.encode("utf-16"),
        b'{"a": 1,}',
        b'{"a": "\xff"}',
        b"[" * 5000 + b"]" * 5000,
        b'{"a": [1, 2.5, "x"]}',
    ],
)
def test_what_orjson_refuses_is_decided_by_json_as_before(data, monkeypatch):
    fast = _outcome(data)
    # The json path alone (what every body took before): the reference.
    monkeypatch.setattr(json_input, "_may_hold_long_integer", lambda _data: True)
    assert fast == _outcome(data)


def test_ipv4_scopes_from_the_table_match_ipaddress():
    rng = random.Random(7)
    checks = {rng.getrandbits(32) for _ in range(20000)}
    for start in enrichment._IPV4_STARTS:
        checks.update(v for v in range(start - 2, start + 3) if 0 <= v < 2**32)
    for value in checks:
        address = ipaddress.IPv4Address(value)
        assert enrichment._ipv4_scope(str(address)) == enrichment._scope_of(address), address
    assert enrichment.address_scope("2001:db8::1") == "private"
    assert enrichment.address_scope("8.8.8.8") == "global"


def test_batch_ids_are_the_single_ids():
    assert ids.fact_ids(5, "u:1", "dns", 7, 3) == [
        ids.fact_id(5, "u:1", "dns", 7, p) for p in range(3)
    ]
    # Addresses and ports repeat (each is encoded once per batch), in every combination.
    endpoints = [
        ("10.0.0.1", 443, "tcp"),
        ("2001:db8::1", 53, "udp"),
        ("10.0.0.1", 80, "tcp"),
        ("10.0.0.2", 443, "tcp"),
        ("10.0.0.1", 443, "udp"),
        ("10.0.0.1", 443, "tcp"),
    ]
    assert ids.execution_endpoint_ids(9, endpoints) == [
        ids.execution_endpoint_id(9, *endpoint) for endpoint in endpoints
    ]


def _encoder_key(values):
    canonical = _KEY_ENCODER.encode(
        {k: (list(values.get(k) or ()) if k == "tags" else values.get(k)) for k in NEWEST_FIELDS}
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@settings(max_examples=100, deadline=None)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "state": st.none() | st.text(),
            "banner": st.none() | st.text(),
            "tags": st.lists(st.text(max_size=5), max_size=3),
            "details": st.dictionaries(st.text(max_size=5), json_values, max_size=3),
        },
    )
)
def test_observation_keys_are_the_encoders(values):
    assert observation_key(values) == _encoder_key(values)


@settings(max_examples=100, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "state": st.none() | st.text(),
            "service": st.none() | st.text(max_size=5),
            "product": st.none() | st.text(max_size=5),
            "version": st.none() | st.text(max_size=5),
            "banner": st.none() | st.text(),
            "hostname": st.none() | st.text(max_size=5),
            "tags": st.lists(st.text(max_size=5), max_size=3),
            "details": st.dictionaries(st.text(max_size=5), json_values, max_size=3),
        }
    )
)
def test_keys_of_fields_in_the_hashed_shape_are_the_encoders(fields):
    # Ingest hands its documents' fields over as built (newest_fields_key), not copied.
    assert newest_fields_key(fields) == _encoder_key(fields) == observation_key(fields)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.text(max_size=6), json_values, max_size=4)
    | st.dictionaries(st.text(max_size=3), st.text(max_size=40), min_size=1, max_size=30),
    st.integers(min_value=0, max_value=400),
)
def test_the_document_size_limit_is_the_encoders(document, limit):
    # Whatever the quick bound, the answer is exactly what json.dumps's length says,
    # right at the edges too (limits near the document's own size).
    size = len(json.dumps(document, default=str))
    for edge in (limit, size - 1, size, size // 3, size // 4):
        assert _larger_than(document, edge) == (size > edge)


def test_the_document_size_limit_measures_what_orjson_refuses():
    huge = {"n": 2**70, "pad": "x" * 100}
    assert _larger_than(huge, 50) is True
    assert _larger_than(huge, 1000) is False
    assert _larger_than({"é": "é" * 1000}, 4000) is True  # ASCII escapes: 6 characters each


def test_the_scope_check_of_dotted_quads_is_the_parsed_one():
    networks = _networks(["10.0.0.0/8", "192.0.2.128/25", "2001:db8::/32", "example.com"])
    check = _AddressCheck(networks)
    for address in ("10.1.2.3", "11.0.0.0", "192.0.2.127", "192.0.2.128", "192.0.2.255"):
        assert check(address) == _inside(address, networks), address
    assert check("2001:db8::5") and not check("2001:db9::5")
