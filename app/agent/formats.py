"""What every result-file parser yields and how it reports a bad file (AGT-5).

Parsers turn a byte stream into upload-protocol observations, one dict at a
time, so memory stays flat whatever the file size. A malformed file raises
``ResultFormatError`` naming the line, the element or field, and the byte
offset, so an importer can answer 400 with something a person can act on.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

FORMATS = ("nmap-xml", "masscan-json", "naabu-jsonl")
STATES = ("open", "closed", "filtered", "open|filtered")
MAX_BANNER_CHARS = 2048
MAX_SCRIPT_CHARS = 1024
MAX_SCRIPTS = 8


class ResultFormatError(ValueError):
    """A result file that cannot be read; says where."""

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        element: str | None = None,
        byte_offset: int | None = None,
    ):
        self.message = message
        self.line = line
        self.column = column
        self.element = element
        self.byte_offset = byte_offset
        where = []
        if line is not None:
            where.append(f"line {line}")
        if element:
            where.append(f"element <{element}>" if not element.startswith("field") else element)
        if byte_offset is not None:
            where.append(f"byte offset {byte_offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)

    def details(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "column": self.column,
            "element": self.element,
            "byte_offset": self.byte_offset,
        }


def iso_utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


# Times past the year 9999 cannot be represented (nor stored): such an epoch is refused.
MAX_EPOCH_SECONDS = 253402300799.0


class UnusableTime(ValueError):
    """A time in a result file that cannot be read, or is not finite, or is past 9999.
    Refused rather than replaced by the import's time: a file's times date what it found
    (first and last seen, what changed when), so a guess would date it wrongly."""


def epoch_to_iso(value: str | int | float | None) -> str | None:
    """ISO time of an epoch; None for an absent value or 0 (nmap writes 0 for a time it
    did not take); raises UnusableTime for text that is no number, a negative time, a
    NaN, an infinity or a time past 9999 (the reader names where)."""
    if value in (None, ""):
        return None
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        if isinstance(value, int):  # an integer too large for a float
            raise UnusableTime(f"epoch time {str(value)[:40]} is out of range") from None
        raise UnusableTime(f"epoch time {str(value)[:40]!r} is not a number") from None
    if not math.isfinite(seconds) or seconds > MAX_EPOCH_SECONDS:
        raise UnusableTime(f"epoch time {str(value)[:40]!r} is not a finite time before 10000")
    if seconds < 0:
        raise UnusableTime(f"epoch time {str(value)[:40]!r} is before 1970")
    if seconds == 0:  # nmap's "not taken"
        return None
    return iso_utc(datetime.fromtimestamp(seconds, UTC))


def iso_to_utc(moment: datetime) -> str:
    """``iso_utc`` of an aware time, UnusableTime when its offset moves it past the years
    datetime can hold (``9999-12-31T23:59:59-23:59``)."""
    try:
        return iso_utc(moment)
    except (OverflowError, ValueError):
        raise UnusableTime(f"time {moment.isoformat()!r} is out of range in UTC") from None


def clip(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    text = text.strip()
    if not text:
        return None
    return text if len(text) <= limit else text[:limit]


def make_observation(
    *,
    observed_at: str,
    ip: str,
    port: int,
    transport: str,
    state: str,
    name: str | None = None,
    product: str | None = None,
    version: str | None = None,
    banner: str | None = None,
    hostname: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One observation in the upload protocol's shape; empty fields are left out."""
    observation: dict[str, Any] = {
        "observed_at": observed_at,
        "ip": ip,
        "port": port,
        "transport": transport,
        "state": state,
    }
    service: dict[str, str] = {}
    # Plain ifs rather than a loop over pairs: this runs once per port of every scan.
    if name and (name := clip(name, 1024)):
        service["name"] = name
    if product and (product := clip(product, 1024)):
        service["product"] = product
    if version and (version := clip(version, 1024)):
        service["version"] = version
    if banner and (banner := clip(banner, MAX_BANNER_CHARS)):
        service["banner"] = banner
    if service:
        observation["service"] = service
    if hostname:
        observation["hostname"] = hostname.rstrip(".")[:253]
    if details:
        observation["details"] = details
    return observation
