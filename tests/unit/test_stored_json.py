"""``load_stored_json``: what the engine decodes json/jsonb columns with reads the same
values as ``json.loads``, through orjson where orjson reads them alike."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.json_input import load_stored_json

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@given(JSON_VALUES)
def test_reads_what_json_reads(value):
    text = json.dumps(value)
    decoded = load_stored_json(text)
    assert decoded == json.loads(text)
    assert type(decoded) is type(json.loads(text))
    assert load_stored_json(text.encode()) == decoded


@pytest.mark.parametrize(
    "text",
    [
        '{"n": 123456789012345678901234567890}',  # beyond 64 bits: stays an exact int
        '{"n": -9223372036854775809}',
        "[1e400]",  # json reads infinity; orjson refuses it
        '{"s": "\\ud800"}',  # a lone surrogate escape: json keeps it
        '{"deep": ' + "[" * 600 + "]" * 600 + "}",
    ],
)
def test_values_orjson_reads_differently_or_refuses_go_to_json(text):
    assert load_stored_json(text) == json.loads(text)
    assert repr(load_stored_json(text)) == repr(json.loads(text))
