"""One host's page (``GET /api/hosts/<ip>``): its ports, names, certificates, the
tasks that covered it and its change timeline (issue 37).

``host_view(user, ip)`` gathers it for the API and the console (``app.web.host_pages``):
the caller's current assets on the address (every status, at most ``MAX_PORTS``) from
the search store, the names the caller's DNS executions resolved to the address, then,
in one short transaction, the caller's executions whose targets hold the address and
the address's latest changes from the analysis. The store is read with no database
connection held.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from flask import Blueprint, jsonify

from app.errors import ValidationError
from app.http import context
from app.http.guards import current_user, require_user
from app.parameters import int_param
from app.result_ingest.dns import names_for_address
from app.scan_control.reads import host_history
from app.search.ids import stored_ip
from app.search.port import AssetQuery

blueprint = Blueprint("hosts", __name__, url_prefix="/api")

MAX_PORTS = 1000
MAX_EXECUTIONS = 50
MAX_CHANGES = 100
MAX_DNS_NAMES = 100


def endpoint_args(args: Mapping[str, str]) -> tuple[str, int, str]:
    """``ip``, ``port`` and ``transport`` (default tcp) of one endpoint's query string:
    the endpoint history's API route and console page read it alike."""
    raw_ip = (args.get("ip") or "").strip()
    if not raw_ip:
        raise ValidationError(
            "ip is required (an IPv4 or IPv6 address)",
            code="invalid_parameter",
            details={"parameter": "ip"},
        )
    ip = host_address(raw_ip)
    port = int_param(args, "port", minimum=1, maximum=65535)
    if port is None:
        raise ValidationError(
            "port is required (1-65535)", code="invalid_parameter", details={"parameter": "port"}
        )
    transport = (args.get("transport") or "tcp").lower()
    if transport not in ("tcp", "udp"):
        raise ValidationError(
            "transport must be tcp or udp",
            code="invalid_parameter",
            details={"parameter": "transport"},
        )
    return ip, port, transport


def host_address(raw: str) -> str:
    """The path's address, normalised as results store it (an IPv4-mapped IPv6 address
    is the IPv4 address it maps); anything else is a 400."""
    if "%" in raw:
        raise ValidationError(
            "the address must not carry an IPv6 zone identifier",
            code="invalid_parameter",
            details={"parameter": "ip"},
        )
    try:
        return stored_ip(str(ipaddress.ip_address(raw)))
    except ValueError:
        raise ValidationError(
            f"{raw[:64]!r} is not an IPv4 or IPv6 address",
            code="invalid_parameter",
            details={"parameter": "ip"},
        ) from None


def _port_item(doc) -> dict[str, Any]:
    item = doc.public()
    details = doc.details if isinstance(doc.details, dict) else {}
    http = details.get("http") if isinstance(details.get("http"), dict) else None
    tls = details.get("tls") if isinstance(details.get("tls"), dict) else None
    item["http"] = http
    item["certificate_sha256"] = tls.get("sha256") if tls else None
    return item


def host_view(user, raw_ip: str) -> dict[str, Any]:
    ip = host_address(raw_ip)
    store = context.store()
    docs, cursor = [], None
    while len(docs) < MAX_PORTS:
        page = store.search_assets(
            AssetQuery(
                scope="user",
                owner_id=user.id,
                ip=ip,
                status="all",
                sort="port",
                order="asc",
                limit=min(500, MAX_PORTS - len(docs)),
                cursor=cursor,
            )
        )
        docs.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    names: dict[str, set[str]] = {}
    certificates: dict[str, dict[str, Any]] = {}
    for doc in docs:
        if doc.hostname:
            names.setdefault(doc.hostname.lower(), set()).add("scan")
        details = doc.details if isinstance(doc.details, dict) else {}
        tls = details.get("tls")
        if isinstance(tls, dict):
            for san in tls.get("sans") or ():
                if isinstance(san, str):
                    names.setdefault(san.lower(), set()).add("certificate")
            key = str(tls.get("sha256") or f"{doc.port}/{doc.transport}")
            entry = certificates.setdefault(key, {**tls, "ports": []})
            entry["ports"].append(doc.port)
    for answer in names_for_address(user.id, ip, limit=MAX_DNS_NAMES):
        names.setdefault(answer["name"].lower().rstrip("."), set()).add("dns")
    executions, changes = host_history(
        user.id, ip, max_executions=MAX_EXECUTIONS, max_changes=MAX_CHANGES
    )
    return {
        "ip": ip,
        "ports": [_port_item(doc) for doc in docs],
        "open_ports": sum(1 for doc in docs if doc.status == "open"),
        "truncated": cursor is not None,
        "hostnames": [
            {"name": name, "sources": sorted(sources)} for name, sources in sorted(names.items())
        ],
        "certificates": list(certificates.values()),
        "executions": executions,
        "changes": changes,
    }


@blueprint.get("/hosts/<path:ip>")
@require_user
def host(ip: str):
    return jsonify(host_view(current_user(), ip))
