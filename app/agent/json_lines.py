"""Streaming readers of masscan's JSON (``-oJ``) and naabu's JSON lines (AGT-5).

masscan writes a JSON array with one record per line (``[``, ``{…},`` …,
``]``; older versions put the separating comma on the next line), so both
formats are read a line at a time: memory stays flat, and a bad record is
reported with its line number and byte offset. masscan records carry either a
port state (``status``) or a banner (``service``); naabu lines carry one open
port each.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import IO, Any

from app.agent.formats import ResultFormatError, epoch_to_iso, iso_utc, make_observation

_MASSCAN_STATES = {"open": "open", "closed": "closed", "filtered": "filtered"}


def _lines(source: IO[bytes] | Iterable[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset of the line, line) of a binary stream."""
    offset = 0
    for number, line in enumerate(source, start=1):
        yield number, offset, line
        offset += len(line)


def _decode(line: bytes, number: int, offset: int) -> Any:
    try:
        return json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        column = getattr(exc, "colno", None)
        raise ResultFormatError(
            f"not valid JSON: {getattr(exc, 'msg', str(exc))}",
            line=number,
            column=column,
            byte_offset=offset + (getattr(exc, "pos", 0) or 0),
        ) from None


def _field_error(message: str, field: str, number: int, offset: int) -> ResultFormatError:
    return ResultFormatError(message, line=number, element=f"field {field}", byte_offset=offset)


_IP_CACHE: dict[Any, str] = {}


def _ip(value: Any, number: int, offset: int) -> str:
    # masscan writes one record per port, so the same address repeats: parse it once.
    cached = _IP_CACHE.get(value)
    if cached is not None:
        return cached
    try:
        compressed = ipaddress.ip_address(str(value)).compressed
    except ValueError:
        raise _field_error(f"ip {value!r} is not an IP address", "ip", number, offset) from None
    if len(_IP_CACHE) >= 4096:
        _IP_CACHE.clear()
    _IP_CACHE[value] = compressed
    return compressed


def _port(value: Any, number: int, offset: int) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise _field_error(f"port {value!r} is not a port number", "port", number, offset)
    return value


def _timestamp(value: Any) -> str | None:
    if value in (None, ""):
        return None
    if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
        return epoch_to_iso(value)
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return iso_utc(moment)


def read_masscan_json(
    source: IO[bytes] | Iterable[bytes], *, default_observed_at: str | None = None
) -> Iterator[dict[str, Any]]:
    """Observations of a masscan ``-oJ`` file: port states and banners, in file order."""
    fallback = default_observed_at or iso_utc(datetime.now(UTC))
    opened = closed = False
    for number, offset, raw in _lines(source):
        line = raw.strip()
        if not opened:
            if not line:
                continue
            if not line.startswith(b"["):
                raise ResultFormatError(
                    "not a masscan JSON file (expected '[')", line=number, byte_offset=offset
                )
            opened = True
            line = line[1:].strip()
        line = line.lstrip(b",").rstrip(b",").strip()
        if not line:
            continue
        if line == b"]":
            closed = True
            continue
        if closed:
            raise ResultFormatError("data after the closing ']'", line=number, byte_offset=offset)
        record = _decode(line, number, offset)
        if not isinstance(record, dict):
            raise ResultFormatError(
                "a record must be a JSON object", line=number, byte_offset=offset
            )
        ip = _ip(record.get("ip"), number, offset)
        observed_at = _timestamp(record.get("timestamp")) or fallback
        ports = record.get("ports")
        if not isinstance(ports, list):
            raise _field_error("ports must be a list", "ports", number, offset)
        for entry in ports:
            if not isinstance(entry, dict):
                raise _field_error("each port must be an object", "ports", number, offset)
            transport = entry.get("proto", "tcp")
            if transport not in ("tcp", "udp"):
                continue  # masscan also reports icmp/sctp; the protocol carries tcp and udp
            port = _port(entry.get("port"), number, offset)
            service = entry.get("service") if isinstance(entry.get("service"), dict) else None
            details: dict[str, Any] = {}
            if entry.get("reason"):
                details["reason"] = str(entry["reason"])
            if isinstance(entry.get("ttl"), int):
                details["ttl"] = entry["ttl"]
            if service is not None:
                yield make_observation(
                    observed_at=observed_at,
                    ip=ip,
                    port=port,
                    transport=transport,
                    state="open",
                    name=_service_name(service.get("name")),
                    banner=str(service.get("banner") or "") or None,
                    details=details or None,
                )
                continue
            state = _MASSCAN_STATES.get(str(entry.get("status", "open")))
            if state is None:
                raise _field_error(
                    f"status {entry.get('status')!r} is not a port state", "status", number, offset
                )
            yield make_observation(
                observed_at=observed_at,
                ip=ip,
                port=port,
                transport=transport,
                state=state,
                details=details or None,
            )
    if not opened:
        raise ResultFormatError("empty file: no masscan records", line=1, byte_offset=0)


def _service_name(name: Any) -> str | None:
    # masscan names its banner grabbers (http, ssl, X509, title); only protocol names are services.
    if not isinstance(name, str) or name in ("X509", "title", "ssl"):
        return None
    return name


def read_naabu_jsonl(
    source: IO[bytes] | Iterable[bytes], *, default_observed_at: str | None = None
) -> Iterator[dict[str, Any]]:
    """Observations of naabu's ``-json`` output: one open port per line."""
    fallback = default_observed_at or iso_utc(datetime.now(UTC))
    seen = False
    for number, offset, raw in _lines(source):
        line = raw.strip()
        if not line:
            continue
        seen = True
        record = _decode(line, number, offset)
        if not isinstance(record, dict):
            raise ResultFormatError("a line must be a JSON object", line=number, byte_offset=offset)
        ip = _ip(record.get("ip") or record.get("host"), number, offset)
        port_value = record.get("port")
        if isinstance(port_value, dict):  # naabu ≥ 2.2 nests {"Port": 80, "Protocol": 0, ...}
            port_value = port_value.get("Port")
        port = _port(port_value, number, offset)
        transport = str(record.get("protocol") or "tcp").lower()
        if transport not in ("tcp", "udp"):
            raise _field_error(
                f"protocol {transport!r} is not tcp or udp", "protocol", number, offset
            )
        host = record.get("host")
        hostname = host if isinstance(host, str) and host and host != record.get("ip") else None
        if hostname:
            try:
                ipaddress.ip_address(hostname)
                hostname = None
            except ValueError:
                pass
        details = {"tls": True} if record.get("tls") is True else None
        yield make_observation(
            observed_at=_timestamp(record.get("timestamp")) or fallback,
            ip=ip,
            port=port,
            transport=transport,
            state="open",
            hostname=hostname,
            details=details,
        )
    if not seen:
        raise ResultFormatError("empty file: no naabu records", line=1, byte_offset=0)


READERS = {
    "masscan-json": read_masscan_json,
    "naabu-jsonl": read_naabu_jsonl,
}


def reader_for(format_name: str):
    """The streaming reader of a result-file format."""
    if format_name == "nmap-xml":
        from app.agent.nmap_xml import read_nmap_xml

        return read_nmap_xml
    try:
        return READERS[format_name]
    except KeyError:
        raise ValueError(f"unknown format {format_name!r}") from None
