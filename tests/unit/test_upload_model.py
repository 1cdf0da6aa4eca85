"""The upload body's checksum and validation rules without a database (ING-13)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.config import IngestSettings
from app.errors import ValidationError
from app.result_ingest.parse import parse_upload
from app.upload_protocol import canonical_checksum


def test_checksum_matches_a_hand_written_canonical_form():
    observations = [{"port": 443, "ip": "192.0.2.1", "service": {"banner": "é✓", "name": "x"}}]
    expected_bytes = (
        '{"dns_records":[],"observations":[{"ip":"192.0.2.1","port":443,'
        '"service":{"banner":"é✓","name":"x"}}]}'
    ).encode()
    assert canonical_checksum(observations, []) == hashlib.sha256(expected_bytes).hexdigest()


@given(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=5))
def test_checksum_ignores_key_order(mapping):
    reordered = dict(reversed(list(mapping.items())))
    assert canonical_checksum([mapping], []) == canonical_checksum([reordered], [])


def _body(**overrides):
    now = datetime.now(UTC)
    observations = overrides.pop(
        "observations", [{"observed_at": now.isoformat(), "ip": "2001:DB8::0:1", "port": 22}]
    )
    body = {
        "protocol_version": 1,
        "claim_token": "00000000-0000-0000-0000-000000000001",
        "upload_id": "u-1",
        "batch_index": 0,
        "checksum": canonical_checksum(observations, []),
        "observations": observations,
    }
    body.update(overrides)
    return body


def test_a_valid_body_is_normalised():
    body = parse_upload(_body(), IngestSettings())
    assert body.observations[0].ip == "2001:db8::1"
    assert body.observations[0].observed_at.tzinfo is not None
    assert body.stream == "main" and body.is_final is False


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"protocol_version": 2}, "protocol_version"),
        ({"protocol_version": True}, "protocol_version"),
        ({"protocol_version": 1.0}, "protocol_version"),
        ({"upload_id": "has space"}, "upload_id"),
        ({"batch_index": -1}, "batch_index"),
        ({"batch_index": "1"}, "batch_index"),
        ({"is_final": "true"}, "is_final"),
        ({"stream": "other"}, "stream"),
        ({"claim_token": "nope"}, "claim_token"),
    ],
)
def test_top_level_fields_are_strict(overrides, field):
    with pytest.raises(ValidationError) as info:
        parse_upload(_body(**overrides), IngestSettings())
    assert any(i["field"] == field for i in info.value.details["items"])


def test_observed_at_window_is_configurable():
    old = (datetime.now(UTC) - timedelta(days=10)).isoformat()
    body = _body(observations=[{"observed_at": old, "ip": "192.0.2.1", "port": 1}])
    parse_upload(body, IngestSettings(observed_at_max_age_days=30))
    with pytest.raises(ValidationError) as info:
        parse_upload(body, IngestSettings(observed_at_max_age_days=5))
    assert info.value.details["items"][0] == {
        **info.value.details["items"][0],
        "index": 0,
        "field": "observed_at",
    }


@given(st.text(max_size=30))
def test_nul_escaping_keeps_every_other_character(text):
    from app.result_ingest.model import NUL_ESCAPE, escape_nul

    escaped = escape_nul(text)
    assert "\x00" not in escaped
    assert escaped == text.replace("\x00", NUL_ESCAPE)


def test_nan_infinity_and_surrogates_anywhere_are_refused_with_their_place():
    now = datetime.now(UTC).isoformat()
    for bad, loc in (
        ({"http": {"a": [float("nan")]}}, "http.a.0"),
        ({"tls": {"b": float("inf")}}, "tls.b"),
        ({"hostname": "x\ud800"}, "hostname"),
    ):
        body = _body()  # the checksum of a valid list; the walk runs before the checksum
        body["observations"] = [{"observed_at": now, "ip": "192.0.2.1", "port": 22, **bad}]
        with pytest.raises(ValidationError) as info:
            parse_upload(body, IngestSettings())
        (item,) = info.value.details["items"]
        assert (item["index"], item["field"]) == (0, loc)
