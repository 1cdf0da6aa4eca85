"""Streaming reader of nmap's XML output (``-oX``) into observations (AGT-2, AGT-5).

The document is fed to expat in chunks and every ``<port>`` becomes an
observation when its end tag arrives, so a scan of thousands of hosts with
hundreds of ports each never sits in memory; nothing is built but the current
host's address and names. Expat gives exact line numbers and byte offsets, so
a malformed or truncated document (a killed scan) is reported precisely.

Mapping: ``<state>`` → state (``closed|filtered`` counts as filtered,
``unfiltered`` is skipped: it says nothing about a service), ``<service>`` →
name/product/version, extra info, method, confidence and CPEs into details
(``ssl`` tunnels turn ``http`` into ``https``; a name nmap only looked up in
its port table is left out so the server's own default applies), the
``banner`` script or the raw first response of an unrecognised service →
banner, other scripts' output (clipped) → details, the user-given or PTR host
name → hostname, the host's end time → observed_at.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import IO, Any
from xml.parsers import expat

from app.agent.formats import (
    MAX_SCRIPT_CHARS,
    MAX_SCRIPTS,
    ResultFormatError,
    epoch_to_iso,
    iso_utc,
    make_observation,
)

CHUNK_BYTES = 256 * 1024
_DETAIL_KEYS = ("extrainfo", "ostype", "devicetype", "tunnel", "method")
_STATE_MAP = {
    "open": "open",
    "closed": "closed",
    "filtered": "filtered",
    "open|filtered": "open|filtered",
    "closed|filtered": "filtered",
}
_NULL_PROBE = re.compile(r'r\(NULL,[0-9A-Fa-f]+,"((?:[^"\\]|\\.)*)"\)')
_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]{2}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"0": b"\0", "r": b"\r", "n": b"\n", "t": b"\t"}


def unescape(text: str) -> str:
    """nmap writes non-printable bytes as \\xHH (and \\r, \\n …); back to UTF-8 text."""
    if "\\" not in text:
        return text
    raw = bytearray()
    position = 0
    for escape in _ESCAPE.finditer(text):
        raw += text[position : escape.start()].encode("utf-8")
        code = escape.group(1)
        if len(code) == 3:
            raw += bytes([int(code[1:], 16)])
        else:
            raw += _SIMPLE_ESCAPES.get(code, code.encode("utf-8"))
        position = escape.end()
    raw += text[position:].encode("utf-8")
    return raw.decode("utf-8", "replace")


def banner_from_fingerprint(fingerprint: str | None) -> str | None:
    """The service's unsolicited first response, from an nmap service fingerprint."""
    if not fingerprint:
        return None
    match = _NULL_PROBE.search(fingerprint.replace("\n", "").replace("SF:", ""))
    if not match:
        return None
    return unescape(match.group(1)).strip() or None


class _Host:
    __slots__ = ("hostname", "ip", "observed_at", "ptr", "up")

    def __init__(self, observed_at: str):
        self.ip: str | None = None
        self.hostname: str | None = None
        self.ptr: str | None = None
        self.observed_at = observed_at
        self.up = True


class _Port:
    __slots__ = ("cpes", "line", "port", "reason", "scripts", "service", "state", "transport")

    def __init__(self, transport: str, port: int, line: int):
        self.transport = transport
        self.port = port
        self.line = line
        self.state: str | None = None
        self.reason: str | None = None
        self.service: dict[str, str] = {}
        self.cpes: list[str] = []
        self.scripts: dict[str, str] = {}


class NmapXmlReader:
    """Push-style reader: ``feed(chunk)`` returns the observations completed by that chunk."""

    def __init__(self, *, default_observed_at: str | None = None):
        self._parser = expat.ParserCreate()
        self._parser.buffer_text = True
        self._parser.StartElementHandler = self._start
        self._parser.EndElementHandler = self._end
        self._parser.CharacterDataHandler = self._text
        self._default_time = default_observed_at or iso_utc(datetime.now(UTC))
        self._run_time: str | None = None
        self._root_seen = False
        self._host: _Host | None = None
        self._port: _Port | None = None
        self._in_cpe = False
        self._cpe_text: list[str] = []
        self._depth = 0
        self._ready: list[dict[str, Any]] = []
        self.hosts = 0
        self.bytes_read = 0
        self.finished = False  # saw </nmaprun>

    # -- expat callbacks -------------------------------------------------
    def _error(self, message: str, element: str | None) -> ResultFormatError:
        return ResultFormatError(
            message,
            line=self._parser.CurrentLineNumber,
            column=self._parser.CurrentColumnNumber,
            element=element,
            byte_offset=self._parser.CurrentByteIndex,
        )

    def _start(self, name: str, attrs: dict[str, str]) -> None:
        self._depth += 1
        if not self._root_seen:
            if name != "nmaprun":
                raise self._error("not an nmap XML document (root element is not nmaprun)", name)
            self._root_seen = True
            self._run_time = epoch_to_iso(attrs.get("start"))
            return
        if name == "host":
            self._host = _Host(
                epoch_to_iso(attrs.get("endtime"))
                or epoch_to_iso(attrs.get("starttime"))
                or self._run_time
                or self._default_time
            )
            return
        host = self._host
        if host is None:
            return
        port = self._port
        if port is not None:
            if name == "state":
                raw_state = attrs.get("state", "")
                port.state = _STATE_MAP.get(raw_state)
                port.reason = attrs.get("reason")
            elif name == "service":
                port.service = attrs
            elif name == "cpe":
                self._in_cpe = True
                self._cpe_text = []
            elif name == "script" and len(port.scripts) < MAX_SCRIPTS:
                script_id = attrs.get("id")
                if script_id:
                    port.scripts[script_id] = attrs.get("output", "")
            return
        if name == "port":
            transport = attrs.get("protocol", "")
            try:
                number = int(attrs.get("portid", ""))
            except ValueError:
                number = 0
            if not 1 <= number <= 65535:
                raise self._error(f"portid {attrs.get('portid')!r} is not a port number", name)
            self._port = _Port(transport, number, self._parser.CurrentLineNumber)
        elif name == "address":
            kind = attrs.get("addrtype")
            if kind in ("ipv4", "ipv6"):
                try:
                    host.ip = ipaddress.ip_address(attrs.get("addr", "")).compressed
                except ValueError:
                    raise self._error(
                        f"addr {attrs.get('addr')!r} is not an IP address", name
                    ) from None
        elif name == "hostname":
            kind = attrs.get("type")
            if kind == "user" and not host.hostname:
                host.hostname = attrs.get("name")
            elif kind == "PTR" and not host.ptr:
                host.ptr = attrs.get("name")
        elif name == "status":
            host.up = attrs.get("state", "up") == "up"

    def _text(self, data: str) -> None:
        if self._in_cpe:
            self._cpe_text.append(data)

    def _end(self, name: str) -> None:
        self._depth -= 1
        if name == "cpe" and self._in_cpe:
            self._in_cpe = False
            if self._port is not None:
                self._port.cpes.append("".join(self._cpe_text).strip())
        elif name == "port" and self._port is not None:
            port, self._port = self._port, None
            observation = self._observation(port)
            if observation is not None:
                self._ready.append(observation)
        elif name == "host":
            self.hosts += 1
            self._host = None
        elif name == "nmaprun" and self._depth == 0:
            self.finished = True

    def _observation(self, port: _Port) -> dict[str, Any] | None:
        host = self._host
        if host is None or port.state is None or port.transport not in ("tcp", "udp"):
            return None
        if host.ip is None:
            raise ResultFormatError(
                "a <port> of a host without an IPv4/IPv6 <address>",
                line=port.line,
                element="port",
                byte_offset=self._parser.CurrentByteIndex,
            )
        service = port.service
        name = service.get("name")
        method = service.get("method")
        if name in ("unknown", "tcpwrapped") or method == "table":
            name = None  # a guess from the port table, or nothing: the server's default applies
        if name and service.get("tunnel") == "ssl":
            name = {"http": "https"}.get(name, f"ssl/{name}")
        scripts = port.scripts
        banner = (
            unescape(scripts["banner"]) if scripts.get("banner") else None
        ) or banner_from_fingerprint(service.get("servicefp"))
        details: dict[str, Any] = {}
        if service:
            for key in _DETAIL_KEYS:
                value = service.get(key)
                if value:
                    details[key] = value
            conf = service.get("conf")
            if conf and conf.isdigit():
                details["conf"] = int(conf)
        if port.reason:
            details["reason"] = port.reason
        if port.cpes:
            details["cpe"] = port.cpes[:8]
        if scripts:
            details["scripts"] = {
                key: value[:MAX_SCRIPT_CHARS] for key, value in scripts.items() if key != "banner"
            } or None
            if details["scripts"] is None:
                del details["scripts"]
        return make_observation(
            observed_at=host.observed_at,
            ip=host.ip,
            port=port.port,
            transport=port.transport,
            state=port.state,
            name=name,
            product=service.get("product"),
            version=service.get("version"),
            banner=banner,
            hostname=host.hostname or host.ptr,
            details=details or None,
        )

    # -- feeding ---------------------------------------------------------
    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        self.bytes_read += len(chunk)
        try:
            self._parser.Parse(chunk, False)
        except expat.ExpatError as exc:
            raise self._expat_error(exc) from None
        return self._take()

    def close(self) -> list[dict[str, Any]]:
        """End of input: a document cut short (a killed scan) is an error, after the
        observations completed before the cut have been returned by ``feed``."""
        try:
            self._parser.Parse(b"", True)
        except expat.ExpatError as exc:
            raise self._expat_error(exc) from None
        if not self._root_seen:
            raise ResultFormatError("empty document: no nmaprun element", line=1, byte_offset=0)
        return self._take()

    def _expat_error(self, exc: expat.ExpatError) -> ResultFormatError:
        element = "port" if self._port is not None else ("host" if self._host else None)
        return ResultFormatError(
            f"malformed XML: {expat.ErrorString(exc.code)}",
            line=exc.lineno,
            column=exc.offset,
            element=element,
            byte_offset=self._parser.ErrorByteIndex,
        )

    def _take(self) -> list[dict[str, Any]]:
        ready, self._ready = self._ready, []
        return ready


def read_nmap_xml(
    source: IO[bytes] | Iterable[bytes], *, default_observed_at: str | None = None
) -> Iterator[dict[str, Any]]:
    """Observations of an nmap XML stream (a binary file or an iterable of chunks)."""
    reader = NmapXmlReader(default_observed_at=default_observed_at)
    chunks = iter(lambda: source.read(CHUNK_BYTES), b"") if hasattr(source, "read") else source
    for chunk in chunks:  # type: ignore[union-attr]
        yield from reader.feed(chunk)
    yield from reader.close()
