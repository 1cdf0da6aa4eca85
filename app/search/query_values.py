"""Asset-search filter values both adapters read the same way (same codes, same messages)."""

from __future__ import annotations

import ipaddress

from app.errors import ValidationError
from app.search.ids import normalise_ip


def invalid_parameter(parameter: str, message: str) -> ValidationError:
    return ValidationError(message, code="invalid_parameter", details={"parameter": parameter})


def query_ip(value: str) -> str:
    """The ``ip`` filter, normalised like stored addresses."""
    try:
        return normalise_ip(value)
    except ValueError:
        raise invalid_parameter("ip", f"{value!r} is not an IP address") from None


def query_cidr(value: str) -> str:
    """The ``cidr`` filter as a network (host bits allowed and dropped)."""
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except ValueError:
        raise invalid_parameter("cidr", f"{value!r} is not a CIDR block") from None
