"""Parsing of configured time zones (fixed UTC offsets or IANA names).

Only traffic rollups use a business time zone; everything else is UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_OFFSET = re.compile(r"^(?:UTC)?([+-])(\d{1,2}):?(\d{2})?$")


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
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            "must be a UTC offset such as +08:00 or an IANA zone name such as Asia/Shanghai"
        ) from None
