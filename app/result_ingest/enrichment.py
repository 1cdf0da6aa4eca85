"""Normalisation, enrichment and tags of observations (ING-14), and the documents they become.

Each observation is normalised (compressed IP, lower-case host names,
transport), enriched with its address family and scope (private, global, …)
and a default service name from the port when the scanner gave none. Tags are
the scanner's own (already validated) plus derived ones (``ipv6``, ``private``,
``tls``, ``http``, ``udp``). Facts keep the whole normalised observation;
execution-endpoint documents keep the newest-wins fields.
"""

from __future__ import annotations

import bisect
import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.result_ingest.model import DnsRecordIn, ObservationIn, UploadBody
from app.search.documents import (
    GUESSED_AT,
    EndpointDocument,
    FactDocument,
    merge_all,
    newest_fields_key,
)
from app.search.ids import (
    CANONICAL_IPV4,
    FACT_ID_SCHEME,
    execution_endpoint_ids,
    fact_ids,
    ipv4_value,
    parsed_address,
)

# Well-known ports; used only when the scanner did not name the service.
DEFAULT_SERVICES: dict[tuple[str, int], str] = {
    **{
        ("tcp", port): name
        for port, name in {
            21: "ftp",
            22: "ssh",
            23: "telnet",
            25: "smtp",
            53: "domain",
            80: "http",
            110: "pop3",
            111: "rpcbind",
            135: "msrpc",
            139: "netbios-ssn",
            143: "imap",
            389: "ldap",
            443: "https",
            445: "microsoft-ds",
            465: "smtps",
            587: "submission",
            636: "ldaps",
            993: "imaps",
            995: "pop3s",
            1433: "ms-sql-s",
            1521: "oracle",
            2049: "nfs",
            2375: "docker",
            2376: "docker-tls",
            3306: "mysql",
            3389: "ms-wbt-server",
            5432: "postgresql",
            5672: "amqp",
            5900: "vnc",
            6379: "redis",
            6443: "kubernetes-api",
            8080: "http-proxy",
            8443: "https-alt",
            9000: "http-alt",
            9200: "elasticsearch",
            11211: "memcache",
            27017: "mongodb",
        }.items()
    },
    **{
        ("udp", port): name
        for port, name in {
            53: "domain",
            67: "dhcps",
            69: "tftp",
            123: "ntp",
            137: "netbios-ns",
            161: "snmp",
            500: "isakmp",
            1900: "upnp",
            5353: "mdns",
            11211: "memcache",
        }.items()
    },
}
TLS_SERVICES = frozenset({"https", "https-alt", "imaps", "pop3s", "smtps", "ldaps", "docker-tls"})
HTTP_SERVICES = frozenset({"http", "https", "http-proxy", "https-alt", "http-alt"})


def address_scope(ip: str) -> str:
    return _family_and_scope(ip)[1]


@functools.lru_cache(maxsize=65536)
def _family_and_scope(ip: str) -> tuple[int, str]:
    # Remembered per address: an address usually carries several ports of a batch, and
    # for IPv6 the ``is_*`` properties each test network membership.
    if CANONICAL_IPV4.fullmatch(ip):
        return 4, _ipv4_scope(ip)
    address = parsed_address(ip)
    return address.version, _scope_of(address)


# IPv4 scopes without parsing or the ``is_*`` properties (a scan of a /16 brings
# thousands of distinct addresses per batch, and those cost more than the rest of the
# enrichment): the scope can only change where one of the networks those properties
# consult (all held in ``ipaddress._IPv4Constants``) starts or ends, so it is computed
# once, by ``_scope_of`` itself, for each stretch between such boundaries, and an
# address finds its stretch by bisection. A unit test compares it with ``_scope_of``.


def _ipv4_constant_networks() -> list[ipaddress.IPv4Network]:
    networks = []
    for value in vars(ipaddress._IPv4Constants).values():
        for item in value if isinstance(value, list | tuple | frozenset | set) else (value,):
            if isinstance(item, ipaddress.IPv4Network):
                networks.append(item)
            elif isinstance(item, ipaddress.IPv4Address):
                networks.append(ipaddress.IPv4Network(item))
    return networks


def _ipv4_scope_table() -> tuple[list[int], list[str]]:
    bounds = {0}
    for network in _ipv4_constant_networks():
        bounds.add(int(network.network_address))
        if int(network.broadcast_address) < 2**32 - 1:
            bounds.add(int(network.broadcast_address) + 1)
    starts = sorted(bounds)
    return starts, [_scope_of(ipaddress.IPv4Address(start)) for start in starts]


def _ipv4_scope(ip: str) -> str:
    """Scope of a canonical dotted quad (``CANONICAL_IPV4``)."""
    return _IPV4_SCOPES[bisect.bisect_right(_IPV4_STARTS, ipv4_value(ip)) - 1]


def _scope_of(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    for scope, flag in (
        ("loopback", address.is_loopback),
        ("link_local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("global", address.is_global),
    ):
        if flag:
            return scope
    return "other"


_IPV4_STARTS, _IPV4_SCOPES = _ipv4_scope_table()


@dataclass(frozen=True)
class UploadContext:
    execution_id: int
    task_id: int
    owner_id: int
    scanner_id: int | None  # None: an imported file, not a scanner
    upload_id: str
    stream: str
    batch_index: int
    fact_ids: int = FACT_ID_SCHEME  # the receipt's scheme (``Reservation.fact_ids``)


@functools.lru_cache(maxsize=4096)
def _iso(moment: datetime) -> str:
    # A batch's observations share few timestamps (a scanner stamps a host's ports alike).
    # Validated timestamps are all in UTC, so equal instants have equal text.
    return moment.isoformat()


def normalise_observation(observation: ObservationIn) -> dict[str, Any]:
    """Normalised and enriched observation; ``tags`` holds the scanner's until ``apply_tags``."""
    service = observation.service
    name = service.name.lower() if service and service.name else None
    default_service = DEFAULT_SERVICES.get((observation.transport, observation.port))
    family, scope = _family_and_scope(observation.ip)
    effective_service = name or default_service
    scanner_tags = sorted(set(observation.tags)) if observation.tags else []
    return {
        "observed_at": _iso(observation.observed_at),
        "ip": observation.ip,
        "port": observation.port,
        "transport": observation.transport,
        "state": observation.state,
        "service": effective_service,
        "service_source": "scanner" if name else ("port" if default_service else None),
        "product": service.product if service else None,
        "version": service.version if service else None,
        "banner": service.banner if service else None,
        "hostname": observation.hostname.rstrip(".").lower() if observation.hostname else None,
        "tags": list(scanner_tags),
        "scanner_tags": scanner_tags,
        "tls": observation.tls,
        "http": observation.http,
        "scanner_details": observation.details,
        "address_family": family,
        "address_scope": scope,
    }


def derived_tags(values: dict[str, Any]) -> set[str]:
    tags = set()
    if values["address_family"] == 6:
        tags.add("ipv6")
    if values["address_scope"] != "global":
        tags.add(values["address_scope"].replace("_", "-"))
    if values["transport"] == "udp":
        tags.add("udp")
    if values["tls"] is not None or values["service"] in TLS_SERVICES:
        tags.add("tls")
    if values["http"] is not None or values["service"] in HTTP_SERVICES:
        tags.add("http")
    return tags


def apply_tags(values: dict[str, Any]) -> dict[str, Any]:
    """The "tags" stage: scanner tags plus derived ones, sorted and unique."""
    values["tags"] = sorted(set(values["scanner_tags"]) | derived_tags(values))
    return values


def normalise_dns_record(record: DnsRecordIn) -> dict[str, Any]:
    value = record.value
    if record.type in ("A", "AAAA"):
        try:
            value = str(ipaddress.ip_address(value))
        except ValueError:
            pass  # kept as given; such answers simply resolve to nothing
    elif record.type in ("CNAME", "NS", "PTR", "MX", "SRV"):
        value = value.rstrip(".").lower()
    return {
        "observed_at": record.observed_at.isoformat(),
        "name": record.name,
        "type": record.type,
        "value": value,
        "ttl": record.ttl,
    }


def fact_documents(
    context: UploadContext, body: UploadBody, normalised: list[dict[str, Any]]
) -> list[FactDocument]:
    items: list[tuple[str, Any, dict[str, Any]]] = [
        ("observation", observation.observed_at, values)
        for observation, values in zip(body.observations, normalised, strict=True)
    ]
    items.extend(
        ("dns_record", record.observed_at, normalise_dns_record(record))
        for record in body.dns_records
    )
    ids = fact_ids(
        context.execution_id,
        context.upload_id,
        context.stream,
        context.batch_index,
        len(items),
        scheme=context.fact_ids,
    )
    return [
        FactDocument(
            id=ids[position],
            kind=kind,
            execution_id=context.execution_id,
            task_id=context.task_id,
            owner_id=context.owner_id,
            scanner_id=context.scanner_id,
            upload_id=context.upload_id,
            stream=context.stream,
            batch_index=context.batch_index,
            position=position,
            observed_at=observed_at,
            body=body,
        )
        for position, (kind, observed_at, body) in enumerate(items)
    ]


# What a sighting's records may each add (the newest record's value where several have one).
_SIGHTING_FIELDS = ("product", "version", "banner", "hostname", "tls", "http", "scanner_details")


def _one_sighting_per_moment(
    ids: list[str], normalised: list[dict[str, Any]], observed: list[Any]
) -> tuple[list[str], list[dict[str, Any]], list[Any]]:
    """Records of one endpoint at the same moment in one batch are one sighting, combined.

    masscan writes a port's state and each banner it grabbed as records of the same
    second. As separate versions they tie on time, and the merge's tie-breaker (a hash)
    could keep the state record's empty details: an X509 banner's certificate was lost.
    Combined, each field is the latest record's that has one, a service a scanner named
    wins over the port's usual one, and the tags are all of theirs."""
    combined: dict[tuple[str, Any], dict[str, Any]] = {}
    for document_id, values, moment in zip(ids, normalised, observed, strict=True):
        key = (document_id, moment)
        have = combined.get(key)
        if have is None:
            combined[key] = values
            continue
        merged = dict(have)
        merged["state"] = values["state"]
        for name in _SIGHTING_FIELDS:
            if values.get(name) is not None:
                merged[name] = values[name]
        if values.get("service_source") == "scanner" or have.get("service_source") != "scanner":
            merged["service"] = values["service"]
            merged["service_source"] = values.get("service_source")
        merged["tags"] = sorted(set(have["tags"]) | set(values["tags"]))
        combined[key] = merged
    return (
        [key[0] for key in combined],
        list(combined.values()),
        [key[1] for key in combined],
    )


def endpoint_documents(
    context: UploadContext, normalised: Iterable[dict[str, Any]], observed: Iterable[Any]
) -> list[EndpointDocument]:
    """Execution-scope endpoint documents, merged within the batch by id.

    ``normalised`` holds validated observations: addresses normalised, transports
    lower-case (their ids are computed without normalising again)."""
    normalised = list(normalised)
    ids = execution_endpoint_ids(
        context.execution_id, ((v["ip"], v["port"], v["transport"]) for v in normalised)
    )
    if len(set(ids)) < len(ids):  # rare: one set lookup per batch otherwise
        ids, normalised, observed = _one_sighting_per_moment(ids, normalised, list(observed))
    documents = []
    for document_id, values, observed_at in zip(ids, normalised, observed, strict=True):
        newest = {
            "state": values["state"],
            "service": values["service"],
            "product": values["product"],
            "version": values["version"],
            "banner": values["banner"],
            "hostname": values["hostname"],
            "tags": values["tags"],
            "details": {
                k: values[k]
                for k in ("tls", "http", "scanner_details", "address_family", "address_scope")
                if values.get(k) is not None
            },
        }
        documents.append(
            EndpointDocument(
                id=document_id,
                scope="execution",
                ip=values["ip"],
                port=values["port"],
                transport=values["transport"],
                first_seen=observed_at,
                first_execution_id=context.execution_id,
                last_seen=observed_at,
                last_execution_id=context.execution_id,
                owner_id=context.owner_id,
                execution_id=context.execution_id,
                task_id=context.task_id,
                state=newest["state"],
                service=newest["service"],
                product=newest["product"],
                version=newest["version"],
                banner=newest["banner"],
                hostname=newest["hostname"],
                tags=tuple(newest["tags"]),
                details=newest["details"],
                observation_key=newest_fields_key(newest),
                # The port's usual service, not named by the scanner: a guess.
                observed={"service": GUESSED_AT} if values.get("service_source") == "port" else {},
            )
        )
    return merge_all(documents)
