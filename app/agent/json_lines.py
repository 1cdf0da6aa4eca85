"""Streaming readers of masscan's JSON (``-oJ``) and naabu's JSON lines (AGT-5).

masscan writes a JSON array with one record per line (``[``, ``{…},`` …,
``]``; older versions put the separating comma on the next line), so both
formats are read a line at a time: memory stays flat, and a bad record is
reported with its line number and byte offset. masscan records carry either a
port state (``status``) or a banner (``service``); naabu lines carry one open
port each. masscan lines, a scan's worth of them, are decoded by orjson; json
reads what orjson refuses or might read differently, so the result is json's.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from app.agent.formats import (
    ResultFormatError,
    UnusableTime,
    epoch_to_iso,
    iso_to_utc,
    iso_utc,
    make_observation,
)


def _lines(source: IO[bytes] | Iterable[bytes]) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset of the line, line) of a binary stream."""
    offset = 0
    for number, line in enumerate(source, start=1):
        yield number, offset, line
        offset += len(line)


class _NeedsJson(Exception):
    """A record orjson read may differ from json's reading: read it again with json."""


def _decode_fast(line: bytes, number: int, offset: int) -> tuple[Any, bool]:
    """(record, exact): orjson reads a line several times faster than json. What it refuses
    is read by json, which accepts a little more (NaN, a byte-order mark) and words the
    errors. orjson reads an integer beyond 64 bits as a float where json keeps the integer,
    so a record read by orjson is not ``exact``: its user re-reads it with json on meeting
    a float where it matters (_NeedsJson)."""
    try:
        return orjson.loads(line), False
    except orjson.JSONDecodeError:
        return _decode(line, number, offset), True


# A \\uD800-\\uDFFF escape: json reads a lone one into a string that cannot be stored.
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def _decode(line: bytes, number: int, offset: int) -> Any:
    try:
        record = json.loads(line)
    except RecursionError:
        raise ResultFormatError(
            "not valid JSON: nested too deeply", line=number, byte_offset=offset
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        column = getattr(exc, "colno", None)
        raise ResultFormatError(
            f"not valid JSON: {getattr(exc, 'msg', str(exc))}",
            line=number,
            column=column,
            byte_offset=offset + (getattr(exc, "pos", 0) or 0),
        ) from None
    if _SURROGATE_ESCAPE.search(line):  # rare: only then is the record walked
        try:
            json.dumps(record, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ResultFormatError(
                f"a string holds a lone UTF-16 surrogate ({exc.object[exc.start]!r})",
                line=number,
                byte_offset=offset,
            ) from None
    return record


def _field_error(message: str, field: str, number: int, offset: int) -> ResultFormatError:
    return ResultFormatError(message, line=number, element=f"field {field}", byte_offset=offset)


_IP_CACHE: dict[Any, str] = {}


def _ip(value: Any, number: int, offset: int) -> str:
    # masscan writes one record per port, so the same address repeats: parse it once.
    hashable = isinstance(value, str | int | float | None)  # a list or object is no address
    cached = _IP_CACHE.get(value) if hashable else None
    if cached is not None:
        return cached
    try:
        compressed = ipaddress.ip_address(str(value)).compressed
    except ValueError:
        raise _field_error(f"ip {value!r} is not an IP address", "ip", number, offset) from None
    if not hashable:
        return compressed
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


_TIMESTAMP_CACHE: dict[str, str | None] = {}


def _timestamp_at(value: Any, number: int, offset: int) -> str | None:
    """``_timestamp``, an unusable time reported as the record's field error."""
    try:
        return _timestamp(value)
    except UnusableTime as exc:
        raise _field_error(str(exc), "timestamp", number, offset) from None


def _timestamp(value: Any) -> str | None:
    # Every record of one second carries the same timestamp text: convert it once.
    if type(value) is str:
        try:
            return _TIMESTAMP_CACHE[value]
        except KeyError:
            pass
        converted = _convert_timestamp(value)
        if len(_TIMESTAMP_CACHE) >= 4096:
            _TIMESTAMP_CACHE.clear()
        _TIMESTAMP_CACHE[value] = converted
        return converted
    return _convert_timestamp(value)


def _convert_timestamp(value: Any) -> str | None:
    if value in (None, ""):
        return None
    if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
        return epoch_to_iso(value)
    unusable = UnusableTime(f"{value!r:.40} is neither an epoch number nor an ISO 8601 time")
    if not isinstance(value, str):
        raise unusable
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        try:  # an epoch with a fraction, as text ("1700000000.25")
            seconds = float(value)
        except ValueError:
            raise unusable from None
        return epoch_to_iso(seconds)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return iso_to_utc(moment)


def read_masscan_json(
    source: IO[bytes] | Iterable[bytes], *, default_observed_at: str | None = None
) -> Iterator[dict[str, Any]]:
    """Observations of a masscan ``-oJ`` file: port states and banners, in file order."""
    fallback = default_observed_at or iso_utc(datetime.now(UTC))
    opened = closed = False
    offset = 0
    number = 0
    # The lines are counted here rather than by _lines: this loop runs once per port.
    for raw in source:
        number += 1
        line_offset = offset
        offset += len(raw)
        line = raw.strip()
        if not opened:
            if not line:
                continue
            if not line.startswith(b"["):
                raise ResultFormatError(
                    "not a masscan JSON file (expected '[')", line=number, byte_offset=line_offset
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
            raise ResultFormatError(
                "data after the closing ']'", line=number, byte_offset=line_offset
            )
        try:
            record, exact = _decode_fast(line, number, line_offset)
        except ResultFormatError:
            # Not one record: several on one line (a whole array written on one line, as
            # by ``jq -c``), or a line that is no JSON at all (the error stands).
            several = _several_records(line, number, line_offset)
            if several is None:
                raise
            records, closed = several
            for record in records:
                found = []
                try:
                    _masscan_record(record, True, number, line_offset, fallback, found)
                except ResultFormatError:
                    yield from found
                    raise
                yield from found
            continue
        found: list[dict[str, Any]] = []
        try:
            try:
                _masscan_record(record, exact, number, line_offset, fallback, found)
            except _NeedsJson:
                found.clear()
                record = _decode(line, number, line_offset)
                _masscan_record(record, True, number, line_offset, fallback, found)
        except ResultFormatError:
            yield from found  # the record's ports before the bad one, as they come
            raise
        yield from found
    # No records at all is a scan that found nothing: masscan then writes an empty file
    # (not "[]"), which is no error of the file's. An array it opened and never closed is
    # a file cut short (a copy that stopped, masscan killed): its records would import
    # as a whole scan, so it is refused like a cut nmap XML file.
    if opened and not closed:
        raise ResultFormatError(
            "the file ends before masscan's closing ']' (cut short?)",
            line=number,
            byte_offset=offset,
        )


def _several_records(line: bytes, number: int, offset: int) -> tuple[list[Any], bool] | None:
    """The records of a line holding more than one (``{…},{…}`` and maybe the closing
    ``]``), and whether it closed the array; None when the line is not that."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None
    decoder = json.JSONDecoder()
    records: list[Any] = []
    position, closed = 0, False
    while position < len(text):
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position == len(text):
            break
        if text[position] == "]":
            if text[position + 1 :].strip():
                return None  # data after the closing bracket
            closed = True
            break
        try:
            value, position = decoder.raw_decode(text, position)
        except (ValueError, RecursionError):
            return None
        records.append(value)
    if len(records) < 2 and not closed:
        return None
    if _SURROGATE_ESCAPE.search(line):
        _decode(b"[" + line.rstrip(b"]").rstrip().rstrip(b",") + b"]", number, offset)
    return records, closed


_MASSCAN_STATES = {"open": "open", "closed": "closed", "filtered": "filtered"}


def _masscan_record(
    record: Any, exact: bool, number: int, offset: int, fallback: str, found: list[Any]
) -> None:
    """The observations of one masscan record (one line), appended to ``found``."""
    if type(record) is not dict:
        raise ResultFormatError("a record must be a JSON object", line=number, byte_offset=offset)
    ip = record.get("ip")
    if not exact and type(ip) is float:
        raise _NeedsJson
    ip = _ip(ip, number, offset)
    observed_at = _timestamp_at(record.get("timestamp"), number, offset) or fallback
    ports = record.get("ports")
    if type(ports) is not list:
        raise _field_error("ports must be a list", "ports", number, offset)
    for entry in ports:
        if type(entry) is not dict:
            raise _field_error("each port must be an object", "ports", number, offset)
        get = entry.get
        transport = get("proto", "tcp")
        if transport != "tcp" and transport != "udp":
            continue  # masscan also reports icmp/sctp; the protocol carries tcp and udp
        port = get("port")
        if type(port) is not int or not 1 <= port <= 65535:
            if not exact and type(port) is float:
                raise _NeedsJson
            port = _port(port, number, offset)
        service = get("service")
        reason = get("reason")
        ttl = get("ttl")
        status = get("status", "open")
        if not exact and (
            type(reason) is float
            or type(ttl) is float
            or type(status) is float
            or (type(service) is dict and type(service.get("banner")) is float)
        ):
            raise _NeedsJson
        details: dict[str, Any] = {}
        if reason:
            details["reason"] = str(reason)
        if isinstance(ttl, int):
            details["ttl"] = ttl
        if type(service) is dict:
            banner = str(service.get("banner") or "") or None
            tls = None
            if service.get("name") == "X509" and banner:
                # masscan's X509 banner is the server's certificate, base64 DER: its facts
                # (the upload's ``tls``, as from nmap's ssl-cert), not the blob, are kept.
                from app.agent.certificates import certificate_facts_base64_der

                tls, banner = certificate_facts_base64_der(banner), None
            observation = make_observation(
                observed_at=observed_at,
                ip=ip,
                port=port,
                transport=transport,
                state="open",
                name=_service_name(service.get("name")),
                banner=banner,
                details=details or None,
            )
            if tls:
                observation["tls"] = tls
            found.append(observation)
            continue
        state = _MASSCAN_STATES.get(str(status))
        if state is None:
            raise _field_error(
                f"status {get('status')!r} is not a port state", "status", number, offset
            )
        # formats.make_observation's shape for a port state without service or name.
        observation = {
            "observed_at": observed_at,
            "ip": ip,
            "port": port,
            "transport": transport,
            "state": state,
        }
        if details:
            observation["details"] = details
        found.append(observation)


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
    for number, offset, raw in _lines(source):
        line = raw.strip()
        if not line:
            continue
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
            observed_at=_timestamp_at(record.get("timestamp"), number, offset) or fallback,
            ip=ip,
            port=port,
            transport=transport,
            state="open",
            hostname=hostname,
            details=details,
        )
    # No records at all: a scan that found nothing (naabu writes no line then).


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
