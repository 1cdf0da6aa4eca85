"""Password rules (IDN-1): length, not the username, not common, not trivially guessable.

Three checks besides the length rule. A password must not contain the username
(nor its reverse). It must not be a common password: the blocklist shipped in
this package (``common_passwords.txt``) is matched against the password
lower-cased and with leading and trailing digits and punctuation stripped, so
``Password2024!`` counts as ``password``. And it must not be very low-entropy:
an estimate that charges a repeated character, the next step of a sequence
(``abc``, ``321``) or of a keyboard row (``qwe``) one bit, every other
character the bits of its character classes, and a string made of one unit
repeated only for that unit; below ``MIN_ESTIMATED_BITS`` the password is
refused. The estimate is deliberately simple: it refuses the passwords people
type when they do not care, not every weak password.
"""

from __future__ import annotations

import math
import string
from functools import lru_cache
from importlib.resources import files

MIN_ESTIMATED_BITS = 36.0
_KEYBOARD_ROWS = ("`1234567890-=", "qwertyuiop[]\\", "asdfghjkl;'", "zxcvbnm,./")
_EDGE_CHARACTERS = string.digits + string.punctuation + " "


@lru_cache(maxsize=1)
def common_passwords() -> frozenset[str]:
    text = files("app.identity").joinpath("common_passwords.txt").read_text(encoding="utf-8")
    return frozenset(
        line.strip().lower() for line in text.splitlines() if line.strip() and line[0] != "#"
    )


def _is_common(password: str) -> bool:
    lowered = password.lower()
    candidates = {lowered, lowered.strip(_EDGE_CHARACTERS), lowered.rstrip(_EDGE_CHARACTERS)}
    blocklist = common_passwords()
    return any(candidate in blocklist for candidate in candidates if candidate)


def _smallest_repeating_unit(text: str) -> str:
    for size in range(1, len(text) // 2 + 1):
        if len(text) % size == 0 and text[:size] * (len(text) // size) == text:
            return text[:size]
    return text


def _pool_bits(text: str) -> float:
    pool = 0
    if any(c in string.ascii_lowercase for c in text):
        pool += 26
    if any(c in string.ascii_uppercase for c in text):
        pool += 26
    if any(c in string.digits for c in text):
        pool += 10
    if any(not c.isascii() for c in text):
        pool += 100
    if any(c.isascii() and not c.isalnum() for c in text):
        pool += 33
    return math.log2(max(pool, 2))


def _continues(previous: str, current: str) -> bool:
    a, b = previous.lower(), current.lower()
    if a == b or abs(ord(a) - ord(b)) == 1:
        return True
    for row in _KEYBOARD_ROWS:
        i, j = row.find(a), row.find(b)
        if i >= 0 and j >= 0 and abs(i - j) == 1:
            return True
    return False


def estimated_bits(password: str) -> float:
    unit = _smallest_repeating_unit(password)
    per_character = _pool_bits(unit)
    bits = 0.0
    for index, character in enumerate(unit):
        if index and _continues(unit[index - 1], character):
            bits += 1.0
        else:
            bits += per_character
    return bits


def password_problem(password: str, username: str | None) -> str | None:
    """Why this password is refused (beyond the length rule), or None."""
    lowered = password.lower()
    if username and len(username) >= 3:
        name = username.lower()
        if name in lowered or name[::-1] in lowered:
            return "must not contain the username"
    if _is_common(password):
        return "is a commonly used password; choose another"
    if estimated_bits(password) < MIN_ESTIMATED_BITS:
        return "is too easy to guess (repeated characters or sequences); choose another"
    return None
