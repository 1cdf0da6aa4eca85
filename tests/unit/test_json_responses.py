"""Response JSON (app.http.json_provider): orjson's body means what Flask's provider wrote."""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from flask import Flask
from flask.json.provider import DefaultJSONProvider
from hypothesis import given
from hypothesis import strategies as st

from app.http.json_provider import OrjsonProvider


@dataclasses.dataclass
class Point:
    x: int
    seen: datetime


class Colour(str, enum.Enum):  # noqa: UP042 - the (str, Enum) mix-in as older code writes it
    RED = "red"


def _apps(debug: bool = False) -> tuple[Flask, Flask]:
    fast, plain = Flask("fast"), Flask("plain")
    fast.json = OrjsonProvider(fast)
    plain.json = DefaultJSONProvider(plain)
    fast.debug = plain.debug = debug
    return fast, plain


def _bodies(value, debug: bool = False) -> tuple[bytes, bytes]:
    fast, plain = _apps(debug)
    with fast.app_context():
        ours = fast.json.response(value).get_data()
    with plain.app_context():
        flasks = plain.json.response(value).get_data()
    return ours, flasks


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(_JSON)
def test_any_json_value_reads_back_as_flasks_body_does(value):
    ours, flasks = _bodies({"items": [value], "next_cursor": None})
    assert json.loads(ours) == json.loads(flasks)


def test_keys_are_sorted_and_separators_compact_as_before():
    ours, flasks = _bodies({"b": 1, "a": [1, 2], "c": {"z": None, "y": "é"}})
    assert ours == b'{"a":[1,2],"b":1,"c":{"y":"\xc3\xa9","z":null}}\n'
    assert flasks == b'{"a":[1,2],"b":1,"c":{"y":"\\u00e9","z":null}}\n'
    assert json.loads(ours) == json.loads(flasks)


@pytest.mark.parametrize(
    "value",
    [
        {"when": datetime(2026, 12, 1, 6, 30, tzinfo=UTC), "day": date(2026, 12, 1)},
        {"point": Point(1, datetime(2026, 12, 1, tzinfo=UTC))},
        {"id": uuid.UUID("12345678-1234-5678-1234-567812345678"), "price": Decimal("1.50")},
        {"colour": Colour.RED},  # a str subclass: Flask's way, whatever that is
        {"huge": 2**70},  # beyond 64 bits: orjson refuses, the json module writes it
        {"lone": "\ud800"},  # a lone surrogate: orjson refuses
        {1: "integer key"},  # not text: orjson refuses, the json module converts
    ],
)
def test_values_orjson_would_write_differently_are_written_as_flask_writes_them(value):
    ours, flasks = _bodies(value)
    assert ours == flasks


def test_debug_mode_keeps_flasks_indented_output():
    ours, flasks = _bodies({"b": 1, "a": 2}, debug=True)
    assert ours == flasks and b"\n  " in ours
