"""Search views: a task's results (execution projection) and current assets (SCN-5, STO-3).

Results read the execution-endpoint projection, assets the current-asset
projection (PRJ-9), so an execution can be succeeded before its assets
appear. Ownership is checked in a short transaction; the store is queried
after the connection went back to the pool.
"""

from __future__ import annotations

import ipaddress

from flask import Blueprint, jsonify, request

from app.errors import Forbidden, ValidationError
from app.http import context
from app.http.guards import current_user, require_user
from app.http.requests import datetime_arg, int_arg, page_limit
from app.saved_searches import service as saved_searches
from app.scan_control.runs import results_scope
from app.search.asset_sort import asset_sort
from app.search.port import ASSET_STATUS_FILTERS, AssetQuery
from app.search.query_language import MAX_QUERY_CHARS, And, Text, parse_query

blueprint = Blueprint("assets", __name__, url_prefix="/api")

_MAX_TEXT = 200


@blueprint.get("/tasks/<int:task_id>/results")
@require_user
def task_results(task_id: int):
    limit = page_limit(default=100, maximum=1000)
    executions = results_scope(current_user(), task_id, int_arg("run", minimum=1))
    page = context.store().execution_results(
        task_id,
        cursor=request.args.get("cursor") or None,
        limit=limit,
        execution_ids=executions,
    )
    body = {
        "items": [_result_item(doc) for doc in page.items],
        "next_cursor": page.next_cursor,
        "total_ips": page.total_ips,
    }
    if page.total_endpoints is not None:
        body["total_endpoints"] = page.total_endpoints
    return jsonify(body)


def _result_item(doc) -> dict:
    item = doc.public()
    item["execution_id"] = doc.execution_id
    return item


def _text_arg(name: str, maximum: int = _MAX_TEXT) -> str | None:
    value = request.args.get(name)
    if value is None or value == "":
        return None
    if len(value) > maximum:
        raise ValidationError(
            f"{name} is longer than {maximum} characters",
            code="invalid_parameter",
            details={"parameter": name},
        )
    return value


def _address_args() -> tuple[str | None, str | None]:
    ip, cidr = _text_arg("ip"), _text_arg("cidr")
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
            ip = str(ipaddress.ip_address(ip))
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


def asset_query_from_request(user) -> AssetQuery:
    """The asset query the request's parameters ask for (shared with the web console)."""
    scope = request.args.get("scope") or "user"
    if scope not in ("user", "global"):
        raise ValidationError(
            "scope must be 'user' or 'global'",
            code="invalid_parameter",
            details={"parameter": "scope"},
        )
    if scope == "global" and not user.is_admin:
        raise Forbidden("only admins can search the global asset view", code="forbidden")
    transport = _text_arg("transport")
    if transport is not None and transport not in ("tcp", "udp"):
        raise ValidationError(
            "transport must be tcp or udp",
            code="invalid_parameter",
            details={"parameter": "transport"},
        )
    ip, cidr = _address_args()
    status = request.args.get("status") or "open"
    if status not in ASSET_STATUS_FILTERS:
        raise ValidationError(
            "status must be one of " + ", ".join(ASSET_STATUS_FILTERS),
            code="invalid_parameter",
            details={"parameter": "status"},
        )
    text, where, names_status = search_language_arg(user)
    if names_status and not request.args.get("status"):
        status = "all"  # the query's own status clause decides
    # Unknown values are a 400 naming the parameter (WEB-12); the order defaults per sort.
    order = asset_sort(_text_arg("sort"), _text_arg("order"))
    return AssetQuery(
        scope=scope,
        owner_id=user.id if scope == "user" else None,
        ip=ip,
        cidr=cidr,
        port=int_arg("port", minimum=1, maximum=65535),
        transport=transport,
        service=_text_arg("service"),
        product=_text_arg("product"),
        text=text,
        where=where,
        first_seen_from=datetime_arg("first_seen_from"),
        first_seen_to=datetime_arg("first_seen_to"),
        last_seen_from=datetime_arg("last_seen_from"),
        last_seen_to=datetime_arg("last_seen_to"),
        status=status,
        limit=page_limit(default=50, maximum=500),
        cursor=request.args.get("cursor") or None,
        sort=order.sort,
        order=order.order,
    )


def search_language_arg(user=None) -> tuple[str | None, object | None, bool]:
    """``q`` read as the search language (docs/search-language.md), ANDed with the saved
    search ``search=<id>`` of the caller when given: (free text, parsed tree, whether it
    names a status). Bare words alone stay one free-text substring, as ``q`` always
    meant; anything else is the parsed tree. A query that does not parse is a 400 naming
    the column and what was expected there."""
    raw = _text_arg("q", MAX_QUERY_CHARS)
    saved_id = int_arg("search", minimum=1)
    parts = []
    if saved_id is not None:
        row = saved_searches.get_search((user or current_user()).id, saved_id)
        parts.append(parse_query(row.query))
    if raw is not None:
        parts.append(parse_query(raw))
    if not parts:
        return None, None, False
    if len(parts) == 1 and parts[0].plain_text is not None:
        plain = parts[0].plain_text
        if len(plain) > _MAX_TEXT:
            raise ValidationError(
                f"q is longer than {_MAX_TEXT} characters",
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


@blueprint.get("/assets")
@require_user
def assets():
    query = asset_query_from_request(current_user())
    page = context.store().search_assets(query)
    return jsonify({"items": [doc.public() for doc in page.items], "next_cursor": page.next_cursor})


# Facets count at most this many matching assets (``capped`` says more matched), so a
# facet request costs the same at any number of assets.
FACET_SAMPLE = 10_000


def facets_body(facets) -> dict:
    """The JSON of ``AssetFacets`` (``GET /api/assets/facets`` and the dashboard)."""
    return {
        "sampled": facets.sampled,
        "capped": facets.capped,
        "facets": {
            name: [{"value": value, "count": count} for value, count in values]
            for name, values in facets.facets.items()
        },
    }


@blueprint.get("/assets/facets")
@require_user
def asset_facets():
    """Top services, products, ports and certificate issuers of a search (the same
    parameters and ``q`` as ``GET /api/assets``), over at most ``FACET_SAMPLE`` assets."""
    query = asset_query_from_request(current_user())
    size = int_arg("size", minimum=1, maximum=50) or 10
    facets = context.store().asset_facets(query, size=size, sample=FACET_SAMPLE)
    return jsonify(facets_body(facets))
