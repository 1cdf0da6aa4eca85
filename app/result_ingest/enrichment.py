"""Normalisation, enrichment and tags of observations (ING-14), and the documents they become.

Each observation is normalised (compressed IP, lower-case host names,
transport), enriched with its address family and scope (private, global, …)
and a default service name from the port when the scanner gave none. Tags are
the scanner's own (already validated) plus derived ones (``ipv6``, ``private``,
``tls``, ``http``, ``udp``). Facts keep the whole normalised observation;
execution-endpoint documents keep the newest-wins fields.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.result_ingest.model import DnsRecordIn, ObservationIn, UploadBody
from app.search.documents import EndpointDocument, FactDocument, merge_all, observation_key
from app.search.ids import execution_endpoint_id, fact_id, parsed_address

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
    # Remembered per address: the ``is_*`` properties each test network membership, and
    # an address usually carries several ports.
    address = parsed_address(ip)
    return address.version, _scope_of(address)


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


@dataclass(frozen=True)
class UploadContext:
    execution_id: int
    task_id: int
    owner_id: int
    scanner_id: int | None  # None: an imported file, not a scanner
    upload_id: str
    stream: str
    batch_index: int


def normalise_observation(observation: ObservationIn) -> dict[str, Any]:
    """Normalised and enriched observation; ``tags`` holds the scanner's until ``apply_tags``."""
    service = observation.service
    name = service.name.lower() if service and service.name else None
    default_service = DEFAULT_SERVICES.get((observation.transport, observation.port))
    family, scope = _family_and_scope(observation.ip)
    effective_service = name or default_service
    return {
        "observed_at": observation.observed_at.isoformat(),
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
        "tags": sorted(set(observation.tags)),
        "scanner_tags": sorted(set(observation.tags)),
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
    documents: list[FactDocument] = []
    for position, (observation, values) in enumerate(
        zip(body.observations, normalised, strict=True)
    ):
        documents.append(_fact(context, "observation", position, observation.observed_at, values))
    offset = len(body.observations)
    for i, record in enumerate(body.dns_records):
        documents.append(
            _fact(
                context, "dns_record", offset + i, record.observed_at, normalise_dns_record(record)
            )
        )
    return documents


def _fact(context: UploadContext, kind: str, position: int, observed_at, body: dict[str, Any]):
    return FactDocument(
        id=fact_id(
            context.execution_id, context.upload_id, context.stream, context.batch_index, position
        ),
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


def endpoint_documents(
    context: UploadContext, normalised: Iterable[dict[str, Any]], observed: Iterable[Any]
) -> list[EndpointDocument]:
    """Execution-scope endpoint documents, merged within the batch by id."""
    documents = []
    for values, observed_at in zip(normalised, observed, strict=True):
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
                id=execution_endpoint_id(
                    context.execution_id, values["ip"], values["port"], values["transport"]
                ),
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
                observation_key=observation_key(newest),
            )
        )
    return merge_all(documents)
