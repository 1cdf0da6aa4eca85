"""The fast paths of issue 21 give exactly the answers of the slow ones they skip.

``check_json_values`` first asks the C encoder whether a value is surely clean and
walks every item (building paths) only when it might not be; ``dumps`` writes with
orjson and falls back to ``json`` for what orjson refuses. Both are checked here
against the exact implementation on generated and on hand-picked values.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from app import json_input
from app.json_input import MAX_JSON_DEPTH, check_json_values
from app.search.encoding import _ENCODER, dumps

# Text with lone surrogates and NUL now and then; numbers with NaN and infinities.
text = st.text(alphabet=st.sampled_from(["a", "é", "\x00", "\ud800", "\udfff", "z", " "]))
scalars = st.none() | st.booleans() | st.integers() | st.floats() | text
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=30,
)


def _exact(value, **kwargs):
    original = json_input._surely_clean
    json_input._surely_clean = lambda *args: False
    try:
        return check_json_values(value, **kwargs)
    finally:
        json_input._surely_clean = original


@settings(max_examples=300, deadline=None)
@given(values, st.booleans())
def test_fast_check_answers_like_the_exact_walk(value, allow_nul):
    assert check_json_values(value, allow_nul=allow_nul) == _exact(value, allow_nul=allow_nul)


def _nested(depth: int):
    value: object = "leaf"
    for _ in range(depth):
        value = {"k": [value]}
    return value


def test_depth_limit_is_exact_at_the_boundary():
    for depth in range(MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH + 3):
        value = {"observations": [_nested(depth // 2)] if depth % 2 else _nested(depth // 2)}
        assert check_json_values(value) == _exact(value)
    too_deep = [[[["x"]]]]
    assert check_json_values(too_deep, max_depth=3) == _exact(too_deep, max_depth=3) != []
    assert check_json_values([[["x"]]], max_depth=3) == []


def test_problems_in_keys_and_numbers_are_still_found():
    assert check_json_values({"a\ud800": 1})[0]["path"] == ("(key)",)
    assert check_json_values({"x": [1.0, float("nan")]})[0]["path"] == ("x", 1)
    assert check_json_values({"x": "a\x00"})[0]["path"] == ("x",)
    assert check_json_values({"x": "a\x00"}, allow_nul=True) == []


def test_dumps_writes_what_json_writes():
    moment = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)
    value = {"t": moment, "tags": ("a", "b"), "s": "é\x00\x1f", "n": [1, 2.5, None, True]}
    assert json.loads(dumps(value)) == json.loads(_ENCODER.encode(value))
    assert json.loads(dumps(value))["t"] == "2026-11-30T06:00:00.000000Z"
    # orjson refuses integers beyond 64 bits and non-text keys; json writes them.
    for awkward in ({"big": 2**70}, {1: "one"}):
        assert dumps(awkward) == _ENCODER.encode(awkward)


def _bodies(value) -> list[bytes]:
    """The ways a client may write ``value``: escaped, raw UTF-8 (surrogates as ED xx xx,
    which json.loads lets through) and UTF-16."""
    escaped = json.dumps(value).encode()
    raw = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return [escaped, raw, json.dumps(value).encode("utf-16")]


def _finite(value) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(values.filter(_finite))
def test_check_given_the_raw_body_answers_like_the_exact_walk(value):
    # decode_json refuses non-finite numbers, so only finite values reach the check.
    for body in _bodies(value):
        decoded = json_input.decode_json(body)
        for allow_nul in (False, True):
            assert check_json_values(decoded, allow_nul=allow_nul, raw=body) == _exact(
                decoded, allow_nul=allow_nul
            )


def test_raw_bodies_that_may_hide_a_bad_string_take_the_exact_check():
    for body in (b'{"x": "a\\u0000"}', b'{"x": "\\ud800"}', b'{"x": "\xed\xa0\x80"}'):
        decoded = json_input.decode_json(body)
        assert check_json_values(decoded, raw=body) == _exact(decoded) != []
    plain = b'{"rows": [{"path": "/a", "n": 1}]}'
    assert check_json_values(json_input.decode_json(plain), raw=plain) == []
