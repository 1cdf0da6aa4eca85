"""Which results an execution may upload: its own targets, ports and names (ING-17).

A scanner reports on what it was asked to scan. An observation for an address
outside the execution's targets, a port outside its ports or a transport it
was not asked for, and a DNS record for a name the task did not ask about, are
refused with a 400 naming the item, before anything is written; DNS answers
become the targets of a follow-up task, so an unasked name is how an
arbitrary address would otherwise become a scan target.

A DNS execution's names are its target domains and the names under them
(a zone's hosts), plus the names its CNAME answers lead to (in this batch or
in earlier batches of the execution), since resolving a name means following
its aliases. The DNS sidecar of a port scan may report names freely (host
names of the scanned addresses), but its A/AAAA answers must be addresses the
execution scanned.

An import execution has no scope of its own: its results come from a file the
task's owner uploaded themselves (AGT-7), not from a scanner told what to scan,
so whatever the file holds is accepted (and, never being a scan of a scope, an
import marks nothing gone).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from app.errors import ValidationError
from app.result_ingest.model import DnsRecordIn, UploadBody
from app.search.ids import CANONICAL_IPV4, ipv4_value, parsed_address


def port_ranges(ports: str) -> list[tuple[int, int]]:
    """``"22,80,8000-8100"`` (as stored on the execution) → ranges."""
    ranges = []
    for part in (ports or "").split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        ranges.append((int(low), int(high or low)))
    return ranges


def _networks(targets: Iterable[str]) -> list[Any]:
    networks = []
    for target in targets:
        try:
            networks.append(ipaddress.ip_network(target, strict=False))
        except ValueError:
            continue  # a domain
    return networks


def _domains(targets: Iterable[str]) -> list[str]:
    out = []
    for target in targets:
        try:
            ipaddress.ip_network(target, strict=False)
        except ValueError:
            out.append(target.rstrip(".").lower())
    return out


def _inside(address: str, networks: list[Any]) -> bool:
    ip = parsed_address(address)
    return any(ip.version == n.version and ip in n for n in networks)


class _AddressCheck:
    """``_inside`` for many addresses: a canonical dotted quad (most of what scanners
    send) is compared as an integer with the IPv4 targets' bounds, without parsing,
    and each address is decided once (a host's many ports repeat it; this runs while
    the execution row is locked)."""

    def __init__(self, networks: list[Any]):
        self._networks = networks
        self._v4 = [
            (int(n.network_address), int(n.broadcast_address)) for n in networks if n.version == 4
        ]
        self._verdicts: dict[str, bool] = {}

    def __call__(self, address: str) -> bool:
        verdict = self._verdicts.get(address)
        if verdict is None:
            verdict = self._verdicts[address] = self._decide(address)
        return verdict

    def _decide(self, address: str) -> bool:
        if CANONICAL_IPV4.fullmatch(address) is None:
            return _inside(address, self._networks)
        value = ipv4_value(address)
        return any(first <= value <= last for first, last in self._v4)


def _under(name: str, domains: Iterable[str]) -> bool:
    return any(name == d or name.endswith("." + d) for d in domains)


def allowed_dns_names(
    domains: list[str], records: list[DnsRecordIn], earlier_aliases: Iterable[str]
) -> set[str]:
    """Exact names reachable by CNAME from the asked domains (besides names under them)."""
    allowed = {a.rstrip(".").lower() for a in earlier_aliases}
    changed = True
    while changed:
        changed = False
        for record in records:
            if record.type != "CNAME":
                continue
            target = record.value.rstrip(".").lower()
            if target not in allowed and (_under(record.name, domains) or record.name in allowed):
                allowed.add(target)
                changed = True
    return allowed


def check_scope(
    *,
    kind: str,
    targets: list[str],
    ports: str,
    transports: list[str],
    body: UploadBody,
    earlier_aliases: Iterable[str] = (),
) -> None:
    """Raise a 400 listing every observation or DNS record outside the execution's scope."""
    if kind == "import":
        return
    problems: list[dict[str, Any]] = []
    networks = _networks(targets)
    ranges = port_ranges(ports)
    inside = _AddressCheck(networks)
    ports_in: dict[int, bool] = {}  # each port decided once: one port recurs on many hosts
    for index, observation in enumerate(body.observations):
        ip_ok = inside(observation.ip)
        port = observation.port
        port_ok = ports_in.get(port)
        if port_ok is None:
            port_ok = ports_in[port] = any(low <= port <= high for low, high in ranges)
        transport_ok = not transports or observation.transport in transports
        if ip_ok and port_ok and transport_ok:
            continue
        item = {"list": "observations", "index": index}
        if not ip_ok:
            problems.append(
                {**item, "field": "ip", "message": "address is not among the execution's targets"}
            )
        if not port_ok:
            problems.append(
                {**item, "field": "port", "message": "port is not among the execution's ports"}
            )
        if not transport_ok:
            problems.append(
                {
                    **item,
                    "field": "transport",
                    "message": "transport is not among the execution's transports",
                }
            )
    if body.dns_records:
        if kind == "dns":
            domains = _domains(targets)
            aliases = allowed_dns_names(domains, body.dns_records, earlier_aliases)
            for index, record in enumerate(body.dns_records):
                if not (_under(record.name, domains) or record.name in aliases):
                    problems.append(
                        {
                            "list": "dns_records",
                            "index": index,
                            "field": "name",
                            "message": "the task did not ask about this name",
                        }
                    )
        else:
            for index, record in enumerate(body.dns_records):
                if record.type in ("A", "AAAA") and not _inside(record.value, networks):
                    problems.append(
                        {
                            "list": "dns_records",
                            "index": index,
                            "field": "value",
                            "message": "address is not among the execution's targets",
                        }
                    )
    if problems:
        raise ValidationError(
            "results outside the execution's scope",
            code="out_of_scope",
            details={"items": problems[:100]},
        )
