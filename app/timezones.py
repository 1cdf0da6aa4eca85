"""Parsing of configured time zones (fixed UTC offsets or IANA names).

Only traffic rollups use a business time zone; everything else is UTC.
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

_OFFSET = re.compile(r"^(?:UTC)?([+-])(\d{1,2}):?(\d{2})?$")


# Files of a system's zone database that ZoneInfo opens but that are not IANA zones: the
# host's own setting, tzcode's placeholder and its template of rules.
_NOT_ZONES = frozenset({"localtime", "Factory", "posixrules", "posix", "right"})


@functools.lru_cache(maxsize=1)
def _iana_names() -> frozenset[str]:
    return frozenset(
        name
        for name in available_timezones()
        if name not in _NOT_ZONES and not name.startswith(("posix/", "right/"))
    )


def is_iana_zone(name: object) -> bool:
    """True for a real IANA zone name (``Europe/Berlin``, ``UTC``), not for other files a
    zone database holds (``localtime``, ``Factory``, ``posixrules``)."""
    return isinstance(name, str) and name in _iana_names()


def parse_timezone(value: str) -> tzinfo:
    """``+08:00``, ``UTC+8``, ``-0530``, ``UTC`` or an IANA name such as ``Asia/Shanghai``."""
    text = value.strip()
    if text.upper() in {"UTC", "Z", "+00:00"}:
        return UTC
    match = _OFFSET.match(text.upper())
    if match:
        sign, hours, minutes = match.group(1), int(match.group(2)), int(match.group(3) or 0)
        if hours > 14 or minutes >= 60:
            raise ValueError("must be a UTC offset between -14:00 and +14:00 or an IANA zone name")
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if sign == "-" else delta)
    try:
        if not is_iana_zone(text):
            raise ValueError(text)
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            "must be a UTC offset such as +08:00 or an IANA zone name such as Asia/Shanghai"
        ) from None
