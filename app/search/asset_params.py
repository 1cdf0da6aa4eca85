"""One asset search from its parameters: ``GET /api/assets``, the console's Assets page
and an asset export all turn the same names into the same ``AssetQuery``.

An export stores the parameters it was asked with and builds its query here again in
the runner, so the file holds exactly the assets the page listed (its durations fixed
at the request's moment, ``now``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from datetime import datetime

from app.errors import Forbidden, ValidationError
from app.parameters import datetime_param, int_param, text_param
from app.search.asset_sort import asset_sort
from app.search.ids import stored_ip
from app.search.port import ASSET_STATUS_FILTERS, AssetQuery
from app.search.query_language import MAX_QUERY_CHARS, And, Text, parse_query

MAX_TEXT = 200
# The parameters that choose assets and their order (not the page: limit, cursor), as
# ``GET /api/assets`` names them. ``search`` (a saved search) is the caller's own and is
# resolved by the HTTP layer into its query's text.
ASSET_PARAMETERS = (
    "scope",
    "ip",
    "cidr",
    "port",
    "transport",
    "service",
    "product",
    "q",
    "status",
    "first_seen_from",
    "first_seen_to",
    "last_seen_from",
    "last_seen_to",
    "sort",
    "order",
)


def asset_query_from_params(
    params: Mapping[str, str],
    *,
    owner_id: int,
    may_search_global: bool,
    queries: Sequence[str] = (),
    now: datetime | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> AssetQuery:
    """The asset query ``params`` ask for. ``queries`` are search-language texts ANDed
    before ``q`` (a saved search's, an export's ``query``); durations in them are
    relative to ``now``. Bad values are a 400 naming the parameter."""
    scope = params.get("scope") or "user"
    if scope not in ("user", "global"):
        raise ValidationError(
            "scope must be 'user' or 'global'",
            code="invalid_parameter",
            details={"parameter": "scope"},
        )
    if scope == "global" and not may_search_global:
        raise Forbidden("only admins can search the global asset view", code="forbidden")
    transport = text_param(params, "transport", MAX_TEXT)
    if transport is not None and transport not in ("tcp", "udp"):
        raise ValidationError(
            "transport must be tcp or udp",
            code="invalid_parameter",
            details={"parameter": "transport"},
        )
    ip, cidr = _addresses(params)
    status = params.get("status") or "open"
    if status not in ASSET_STATUS_FILTERS:
        raise ValidationError(
            "status must be one of " + ", ".join(ASSET_STATUS_FILTERS),
            code="invalid_parameter",
            details={"parameter": "status"},
        )
    texts = [*queries]
    q = text_param(params, "q", MAX_QUERY_CHARS)
    if q is not None:
        texts.append(q)
    text, where, names_status = search_language(texts, now=now)
    if names_status and not params.get("status"):
        status = "all"  # the query's own status clause decides
    # Unknown values are a 400 naming the parameter (WEB-12); the order defaults per sort.
    order = asset_sort(text_param(params, "sort", MAX_TEXT), text_param(params, "order", MAX_TEXT))
    return AssetQuery(
        scope=scope,
        owner_id=owner_id if scope == "user" else None,
        ip=ip,
        cidr=cidr,
        port=int_param(params, "port", minimum=1, maximum=65535),
        transport=transport,
        service=text_param(params, "service", MAX_TEXT),
        product=text_param(params, "product", MAX_TEXT),
        text=text,
        where=where,
        first_seen_from=datetime_param(params, "first_seen_from"),
        first_seen_to=datetime_param(params, "first_seen_to"),
        last_seen_from=datetime_param(params, "last_seen_from"),
        last_seen_to=datetime_param(params, "last_seen_to"),
        status=status,
        limit=limit,
        cursor=cursor,
        sort=order.sort,
        order=order.order,
    )


def search_language(
    texts: Sequence[str], *, now: datetime | None = None
) -> tuple[str | None, object | None, bool]:
    """Search-language texts ANDed (docs/search-language.md): (free text, parsed tree,
    whether they name a status). Bare words alone, in one text, stay one free-text
    substring, as ``q`` always meant; anything else is the parsed tree. A text that does
    not parse is a 400 naming the column and what was expected there."""
    parts = [parse_query(text, now=now) for text in texts]
    if not parts:
        return None, None, False
    if len(parts) == 1 and parts[0].plain_text is not None:
        plain = parts[0].plain_text
        if len(plain) > MAX_TEXT:
            raise ValidationError(
                f"q is longer than {MAX_TEXT} characters",
                code="invalid_parameter",
                details={"parameter": "q"},
            )
        return plain, None, False
    nodes = [
        Text(part.plain_text) if part.plain_text is not None else part.node
        for part in parts
        if part.node is not None
    ]
    names_status = any(part.names_status for part in parts)
    if not nodes:
        return None, None, names_status
    return None, nodes[0] if len(nodes) == 1 else And(tuple(nodes)), names_status


def _addresses(params: Mapping[str, str]) -> tuple[str | None, str | None]:
    ip, cidr = text_param(params, "ip", MAX_TEXT), text_param(params, "cidr", MAX_TEXT)
    # A zone identifier (fe80::1%eth0) names an interface of the asking host, not an
    # asset; Python parses it, PostgreSQL's inet does not.
    for name, value in (("ip", ip), ("cidr", cidr)):
        if value is not None and "%" in value:
            raise ValidationError(
                f"{name} must not carry an IPv6 zone identifier",
                code="invalid_parameter",
                details={"parameter": name},
            )
    try:
        if ip is not None:
            # As results store it (an IPv4-mapped address as the IPv4 host), as the host
            # page reads it.
            ip = stored_ip(str(ipaddress.ip_address(ip)))
    except ValueError:
        raise ValidationError(
            "ip must be an IPv4 or IPv6 address",
            code="invalid_parameter",
            details={"parameter": "ip"},
        ) from None
    try:
        if cidr is not None:
            cidr = str(ipaddress.ip_network(cidr, strict=False))
    except ValueError:
        raise ValidationError(
            "cidr must be a network such as 192.0.2.0/24",
            code="invalid_parameter",
            details={"parameter": "cidr"},
        ) from None
    return ip, cidr
