"""Decoding untrusted JSON request bodies into values the rest of the code can hold (FND-7).

Python's ``json`` module accepts more than the stores and the database do: the
literals ``NaN``/``Infinity`` (and ``1e999``, which becomes infinity), lone
UTF-16 surrogates written as ``\\ud800`` escapes (which cannot be encoded as
UTF-8 later), NUL characters (which PostgreSQL text and jsonb refuse) and
nesting deep enough to exhaust the interpreter's recursion limit. Every JSON
body goes through :func:`decode_json` and :func:`check_json_values`, so each of
these is a 400 naming where it is, before any route looks at the value.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from typing import Any

import orjson

from app.errors import ValidationError

MAX_JSON_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


# A run of 19 digits may be an integer beyond 64 bits, which orjson turns into a float
# (``json`` keeps it exact): such a body takes the ``json`` path. Shorter integers fit
# 64 bits. The run may sit inside a string too; that only costs the slower decoder.
# (Every digit becomes "0", then one substring search: a regex scan for the run costs
# more than decoding.)
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def _may_hold_long_integer(data: bytes) -> bool:
    return _LONG_DIGITS in data.translate(_DIGITS_TO_ZERO)


def load_stored_json(text: str | bytes) -> Any:
    """A ``json``/``jsonb`` value PostgreSQL returns, decoded as ``json.loads`` decodes it.

    The database engine reads every such column through this (``app.db.create_engine``):
    a results or asset page decodes each row's ``details`` (500 of them at most), and a
    web worker's CPU is shared with the uploads under write load. orjson takes 0.8 µs
    for a small object where ``json.loads`` takes 2.3 µs, and 2.6 against 4.9 for a
    200-byte one. It gives the same values for what it reads; a possible integer
    beyond 64 bits (which it would turn into a float) and whatever it refuses (a
    lone surrogate escape, deep nesting) are read by ``json``, as before.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    # (bytes.translate is a table lookup in C; str.translate costs more than json itself.)
    if not _may_hold_long_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def decode_json(data: bytes) -> Any:
    """The decoded body; a 400 ``invalid_json`` for anything that is not strict JSON.

    orjson decodes several times faster than ``json`` (an upload of 5,000 observations
    is megabytes) and yields the same values for what it accepts: the same strings,
    integers up to 64 bits, correctly rounded floats, the last of duplicate keys. What
    it refuses (NaN, 1e999, lone surrogates, a BOM, UTF-16, deep nesting, anything
    malformed) and what it would change (long integers) is decoded by ``json`` below,
    so every refusal keeps its exact message.
    """
    if data and isinstance(data, bytes | bytearray) and not _may_hold_long_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # decided, with the precise message, by json below
    try:
        return json.loads(
            data or b"null", parse_constant=_refuse_constant, parse_float=_finite_float
        )
    except RecursionError:
        raise ValidationError(
            f"request body is nested deeper than {MAX_JSON_DEPTH} levels",
            code="invalid_json",
            details={"max_depth": MAX_JSON_DEPTH},
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError(
            f"request body is not valid JSON: {str(exc)[:200]}", code="invalid_json"
        ) from None


def _path_text(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path) or "(body)"


def check_json_values(
    value: Any,
    *,
    allow_nul: bool = False,
    max_depth: int = MAX_JSON_DEPTH,
    raw: bytes | None = None,
) -> list[dict[str, Any]]:
    """Problems (``{"path": (...), "message"}``) with depth, numbers and strings in ``value``.

    Iterative on purpose: a recursive walk is what fails on deep input.
    ``allow_nul`` is for callers that escape NUL themselves (uploads).
    ``raw``: the bytes ``value`` was decoded from by :func:`decode_json`, when known
    (lets a body that cannot hold a bad string skip looking at its strings).
    """
    if _surely_clean(value, allow_nul, max_depth, raw):
        return []
    problems: list[dict[str, Any]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack and len(problems) < 100:
        item, path = stack.pop()
        if len(path) > max_depth:
            problems.append({"path": path[: max_depth + 1], "message": "nested too deeply"})
            continue
        if isinstance(item, str):
            message = _string_problem(item, allow_nul)
            if message:
                problems.append({"path": path, "message": message})
        elif isinstance(item, float):
            if not math.isfinite(item):
                problems.append({"path": path, "message": "NaN and Infinity are not JSON numbers"})
        elif isinstance(item, dict):
            for key, child in item.items():
                message = _string_problem(str(key), allow_nul)
                if message:
                    problems.append({"path": (*path, "(key)"), "message": message})
                stack.append((child, (*path, key)))
        elif isinstance(item, list):
            for index, child in enumerate(item):
                stack.append((child, (*path, index)))
    problems.sort(key=lambda p: [str(x) for x in p["path"]])
    return problems


def _strings_surely_clean(raw: bytes) -> bool:
    """Whether text decoded by :func:`decode_json` from ``raw`` surely has no NUL and no lone
    surrogate: in UTF-8 (no NUL byte, so not UTF-16/32) a NUL can only be written as a
    ``\\u`` escape (a raw control character is refused), and a surrogate only as such an
    escape or as the bytes ED A0..ED BF (which ``json.loads`` lets through)."""
    return b"\\u" not in raw and b"\xed" not in raw and b"\x00" not in raw


def _surely_clean(value: Any, allow_nul: bool, max_depth: int, raw: bytes | None = None) -> bool:
    """True when ``value`` has none of the problems :func:`check_json_values` looks for;
    False means "maybe", and the exact walk (which names every place) decides.

    The exact walk builds a path for every string and number: on an upload of thousands
    of observations that costs more than decoding it. Here the C encoder refuses
    non-finite numbers, UTF-8 refuses lone surrogates (keys included) and only the
    containers are walked, for the depth.
    """
    # decode_json already refused non-finite numbers; strings are the expensive part.
    if raw is None or not _strings_surely_clean(raw):
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False, check_circular=False)
            text.encode("utf-8")
        except (ValueError, TypeError, RecursionError):  # UnicodeEncodeError is a ValueError
            return False
        if not allow_nul and "\\u0000" in text:
            return False
    stack: list[tuple[Any, int]] = [(value, 0)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if not children:
            continue
        if depth >= max_depth:  # a child would sit deeper than max_depth
            return False
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return True


def _string_problem(text: str, allow_nul: bool) -> str | None:
    if _SURROGATE.search(text):
        return "contains a lone UTF-16 surrogate (not valid Unicode text)"
    if not allow_nul and "\x00" in text:
        return "must not contain a NUL character"
    return None


def require_clean_json(value: Any, *, allow_nul: bool = False, raw: bytes | None = None) -> None:
    """Raise the 400 for the first problems :func:`check_json_values` finds."""
    problems = check_json_values(value, allow_nul=allow_nul, raw=raw)
    if problems:
        first = problems[0]
        raise ValidationError(
            f"{_path_text(first['path'])}: {first['message']}",
            code="invalid_json",
            details={
                "items": [
                    {"field": _path_text(p["path"]), "message": p["message"]} for p in problems[:20]
                ]
            },
        )


def checked_object(body: Any, fields: Collection[str]) -> dict[str, Any]:
    """``body`` when it is a JSON object holding only ``fields``: a 400 names the body, or
    the first unknown field (``unknown_field``), so a misspelt key is never ignored."""
    if not isinstance(body, dict):
        raise ValidationError("the body must be a JSON object", details={"field": "body"})
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise ValidationError(
            f"unknown field {unknown[0]!r}", code="unknown_field", details={"field": unknown[0]}
        )
    return body


def checked_name(
    value: Any, *, field: str = "name", max_chars: int = 200, code: str | None = None
) -> str:
    """A display name: a string of 1 to ``max_chars`` characters once trimmed, without
    control characters (a name is one line of text on a page, in a mail subject, a log)."""
    if not isinstance(value, str) or not 1 <= len(value.strip()) <= max_chars:
        raise ValidationError(
            f"{field} must be 1-{max_chars} characters", code=code, details={"field": field}
        )
    if has_control_characters(value):
        raise ValidationError(
            f"{field} must not hold control characters", code=code, details={"field": field}
        )
    return value.strip()


def has_control_characters(text: str) -> bool:
    """C0 controls (line breaks and tabs too) and DEL."""
    return any(ch < " " or ch == "\x7f" for ch in text)
