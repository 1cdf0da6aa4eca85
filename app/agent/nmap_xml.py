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
    MAX_BANNER_CHARS,
    MAX_SCRIPT_CHARS,
    MAX_SCRIPTS,
    ResultFormatError,
    clip,
    epoch_to_iso,
    iso_utc,
)

# Small chunks: the observations of one chunk are alive together until taken, and a
# chunk's worth of them staying in the CPU caches parses measurably faster than 256 KiB.
CHUNK_BYTES = 16 * 1024
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


# The port being read is a plain list, not an object: a scan has one per open port and the
# list costs one allocation. Its slots:
_TRANSPORT, _NUMBER, _LINE, _STATE, _REASON, _SERVICE, _CPES, _SCRIPTS = range(8)


class NmapXmlReader:
    """Push-style reader: ``feed(chunk)`` returns the observations completed by that chunk."""

    def __init__(self, *, default_observed_at: str | None = None):
        self._parser = expat.ParserCreate()
        self._parser.buffer_text = True
        self._parser.StartElementHandler = self._start
        self._parser.EndElementHandler = self._end
        # Text matters only inside <cpe>: the handler is set there and removed after, so
        # the whitespace between the other elements never calls into Python.
        self._parser.CharacterDataHandler = None
        self._default_time = default_observed_at or iso_utc(datetime.now(UTC))
        self._run_time: str | None = None
        self._root_seen = False
        self._host: _Host | None = None
        self._port: list[Any] | None = None
        self._in_cpe = False
        self._cpe_text: list[str] = []
        self._nmapruns = 0  # open <nmaprun> elements: the document ends when the root closes
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
        port = self._port
        # The elements inside a <port> come first: they are most of a scan's elements.
        if port is not None and name != "host" and self._host is not None:
            if name == "state":
                port[_STATE] = _STATE_MAP.get(attrs.get("state", ""))
                port[_REASON] = attrs.get("reason")
            elif name == "service":
                port[_SERVICE] = attrs
            elif name == "cpe":
                self._in_cpe = True
                self._cpe_text = []
                self._parser.CharacterDataHandler = self._cpe_text.append
            elif name == "script":
                scripts = port[_SCRIPTS]
                if scripts is None:
                    scripts = port[_SCRIPTS] = {}
                if len(scripts) < MAX_SCRIPTS:
                    script_id = attrs.get("id")
                    if script_id:
                        scripts[script_id] = attrs.get("output", "")
            elif name == "nmaprun":
                self._nmapruns += 1
            return
        if not self._root_seen:
            if name != "nmaprun":
                raise self._error("not an nmap XML document (root element is not nmaprun)", name)
            self._root_seen = True
            self._nmapruns = 1
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
        if name == "nmaprun":
            self._nmapruns += 1
            return
        host = self._host
        if host is None:
            return
        if name == "port":
            transport = attrs.get("protocol", "")
            try:
                number = int(attrs.get("portid", ""))
            except ValueError:
                number = 0
            if not 1 <= number <= 65535:
                raise self._error(f"portid {attrs.get('portid')!r} is not a port number", name)
            self._port = [
                transport, number, self._parser.CurrentLineNumber, None, None, None, None, None
            ]  # fmt: skip
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

    def _end(self, name: str) -> None:
        if name == "port":
            port = self._port
            if port is not None:
                self._port = None
                observation = self._observation(port)
                if observation is not None:
                    self._ready.append(observation)
        elif name == "cpe":
            if self._in_cpe:
                self._in_cpe = False
                self._parser.CharacterDataHandler = None
                port = self._port
                if port is not None:
                    cpe = "".join(self._cpe_text).strip()
                    if port[_CPES] is None:
                        port[_CPES] = [cpe]
                    else:
                        port[_CPES].append(cpe)
        elif name == "host":
            self.hosts += 1
            self._host = None
        elif name == "nmaprun":
            self._nmapruns -= 1
            if self._nmapruns == 0:
                self.finished = True

    def _observation(self, port: list[Any]) -> dict[str, Any] | None:
        host = self._host
        state = port[_STATE]
        transport = port[_TRANSPORT]
        if host is None or state is None or (transport != "tcp" and transport != "udp"):
            return None
        ip = host.ip
        if ip is None:
            raise ResultFormatError(
                "a <port> of a host without an IPv4/IPv6 <address>",
                line=port[_LINE],
                element="port",
                byte_offset=self._parser.CurrentByteIndex,
            )
        # The observation is built here rather than by formats.make_observation (same shape,
        # same key order): this runs once per port of every scan.
        observation: dict[str, Any] = {
            "observed_at": host.observed_at,
            "ip": ip,
            "port": port[_NUMBER],
            "transport": transport,
            "state": state,
        }
        scripts = port[_SCRIPTS]
        service_attrs = port[_SERVICE]
        details: dict[str, Any] = {}
        service: dict[str, str] = {}
        if service_attrs:
            get = service_attrs.get
            name = get("name")
            if name:
                if name == "unknown" or name == "tcpwrapped" or get("method") == "table":
                    name = None  # a guess from the port table, or nothing: the server's default
                elif get("tunnel") == "ssl":
                    name = "https" if name == "http" else f"ssl/{name}"
                # formats.clip(value, 1024), inline: a slice of a shorter text is the text
                if name and (name := name.strip()):
                    service["name"] = name[:1024]
            product = get("product")
            if product and (product := product.strip()):
                service["product"] = product[:1024]
            version = get("version")
            if version and (version := version.strip()):
                service["version"] = version[:1024]
            for key in _DETAIL_KEYS:
                value = get(key)
                if value:
                    details[key] = value
            conf = get("conf")
            if conf and conf.isdigit():
                details["conf"] = int(conf)
            fingerprint = get("servicefp")
        else:
            fingerprint = None
        banner = None
        if scripts:
            raw_banner = scripts.get("banner")
            if raw_banner:
                banner = unescape(raw_banner)
        if not banner and fingerprint:
            banner = banner_from_fingerprint(fingerprint)
        if banner and (banner := clip(banner, MAX_BANNER_CHARS)):
            service["banner"] = banner
        if service:
            observation["service"] = service
        hostname = host.hostname or host.ptr
        if hostname:
            observation["hostname"] = hostname.rstrip(".")[:253]
        if port[_REASON]:
            details["reason"] = port[_REASON]
        if port[_CPES]:
            details["cpe"] = port[_CPES][:8]
        if scripts:
            shown = {}
            for key, value in scripts.items():
                if key != "banner":
                    shown[key] = value[:MAX_SCRIPT_CHARS]
            if shown:
                details["scripts"] = shown
        if details:
            observation["details"] = details
        return observation

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
