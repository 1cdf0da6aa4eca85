"""Streaming reader of nmap's XML output (``-oX``) into observations (AGT-2, AGT-5).

The document is fed to expat in chunks and every ``<port>`` becomes an
observation when its end tag arrives, so a scan of thousands of hosts with
hundreds of ports each never sits in memory; nothing is built but the current
host's address and names (and two bounded caches: the services and port
numbers read before). Expat gives exact line numbers and byte offsets, so
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
    UnusableTime,
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
_TRANSPORT, _NUMBER, _LINE, _STATE, _REASON, _SERVICE, _CPES, _SCRIPTS, _PEM = range(9)
# Scripts whose output becomes the observation's ``http`` document (issue 37).
_HTTP_SCRIPTS = {"http-title": "title", "http-server-header": "server"}
# http-title's words when a page has none: not a title.
_NO_TITLE = ("Site doesn't have a title", "Did not follow redirect")
MAX_PEM_CHARS = 16 * 1024

# Services read before are looked up by their attributes, not derived again: an -sV scan
# repeats a few services over many ports. The cap keeps a scan of many distinct ones flat,
# and long attribute lists (most with a service fingerprint) are not kept at all.
_SERVICE_CACHE_ENTRIES = 512
_SERVICE_CACHE_CHARS = 2048
# portid texts read before, with their numbers (a dictionary look-up is cheaper than int());
# only short texts, and as many as the ports a scan usually asks for, so memory stays flat.
_PORT_NUMBER_CACHE_ENTRIES = 4096


def _attributes(pairs: list[str]) -> dict[str, str]:
    """Expat's ``ordered_attributes`` list as a dictionary (names are unique: expat
    rejects a repeated attribute)."""
    return dict(zip(pairs[::2], pairs[1::2], strict=True))


def _attribute(pairs: list[str], name: str) -> str | None:
    """One attribute of an ordered list; names sit at even positions, values may be
    equal to a name."""
    position = 0
    try:
        while True:
            position = pairs.index(name, position)
            if not position & 1:
                return pairs[position + 1]
            position += 1
    except ValueError:
        return None


def _service_fields(
    service_attrs: dict[str, str],
) -> tuple[dict[str, str], dict[str, Any], str | None]:
    """What a <service> gives an observation: its service fields, its details and the
    fingerprint a banner may come from."""
    get = service_attrs.get
    service: dict[str, str] = {}
    details: dict[str, Any] = {}
    name = get("name")
    if name:
        if name == "unknown" or name == "tcpwrapped" or get("method") == "table":
            name = None  # a guess from the port table, or nothing: the server's default
        elif get("tunnel") == "ssl":
            name = "https" if name == "http" else f"ssl/{name}"
        # formats.clip(value, 1024), inline: a slice of a shorter text is the text
        if name and (name := name.strip()):
            service["name"] = name[:1024]
    # From the port table nothing was probed: nmap then writes, for the ports its version
    # scan leaves out (9100-9107), product="Excluded from version scan", which is no product.
    probed = get("method") != "table"
    product = get("product") if probed else None
    if product and (product := product.strip()):
        service["product"] = product[:1024]
    version = get("version") if probed else None
    if version and (version := version.strip()):
        service["version"] = version[:1024]
    for key in _DETAIL_KEYS:
        value = get(key)
        if value:
            details[key] = value
    conf = get("conf")
    if conf and conf.isdigit():
        details["conf"] = int(conf)
    return service, details, get("servicefp")


def _facts(scripts: dict[str, str], pem: str | None) -> dict[str, Any] | None:
    """The ``tls`` and ``http`` documents of a port's scripts (``ssl-cert``'s PEM,
    ``http-title``, ``http-server-header``); ``None`` when they give nothing."""
    facts: dict[str, Any] = {}
    if pem:
        from app.agent.certificates import certificate_facts

        tls = certificate_facts(pem)
        if tls:
            facts["tls"] = tls
    http: dict[str, str] = {}
    for script_id, key in _HTTP_SCRIPTS.items():
        output = scripts.get(script_id)
        if output:
            text = unescape(output).strip()
            if key == "title" and text.startswith(_NO_TITLE):
                continue
            if text:
                http[key] = clip(text, 1024) or text[:1024]
    if http:
        facts["http"] = http
    return facts or None


class NmapXmlReader:
    """Push-style reader: ``feed(chunk)`` returns the observations completed by that chunk."""

    def __init__(self, *, default_observed_at: str | None = None):
        self._parser = expat.ParserCreate()
        self._parser.buffer_text = True
        # Attributes as a flat [name, value, ...] list: expat builds a list faster than a
        # dictionary, and a port's elements are read by position (nmap writes their
        # attributes in a fixed order) with a look-up by name when the order differs.
        self._parser.ordered_attributes = True
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
        self._script: str | None = None  # the <script> being read inside a port
        self._in_pem = False
        self._pem_text: list[str] = []
        self._pem_append = self._pem_text.append
        # One list for every <cpe>, emptied when one starts (a nested one starts afresh).
        self._cpe_text: list[str] = []
        self._cpe_append = self._cpe_text.append
        self._nmapruns = 0  # open <nmaprun> elements: the document ends when the root closes
        self._ready: list[dict[str, Any]] = []
        self._services: dict[str, tuple[dict[str, str], dict[str, Any], str | None]] = {}
        self._port_numbers: dict[str, int] = {}
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

    def _start(self, name: str, pairs: list[str]) -> None:
        port = self._port
        # The elements inside a <port> come first: they are most of a scan's elements.
        if port is not None and name != "host" and self._host is not None:
            if name == "state":
                # nmap writes state="…" reason="…" first
                if pairs and pairs[0] == "state":
                    port[_STATE] = _STATE_MAP.get(pairs[1])
                    port[_REASON] = (
                        pairs[3]
                        if len(pairs) > 3 and pairs[2] == "reason"
                        else _attribute(pairs, "reason")
                    )
                else:
                    port[_STATE] = _STATE_MAP.get(_attribute(pairs, "state") or "")
                    port[_REASON] = _attribute(pairs, "reason")
            elif name == "service":
                port[_SERVICE] = pairs
            elif name == "cpe":
                self._in_cpe = True
                self._cpe_text.clear()
                self._parser.CharacterDataHandler = self._cpe_append
            elif name == "script":
                scripts = port[_SCRIPTS]
                if scripts is None:
                    scripts = port[_SCRIPTS] = {}
                if len(scripts) < MAX_SCRIPTS:
                    # nmap writes id="…" output="…" first
                    if len(pairs) > 3 and pairs[0] == "id" and pairs[2] == "output":
                        script_id = pairs[1]
                        output = pairs[3]
                    else:
                        script_id = _attribute(pairs, "id")
                        output = _attribute(pairs, "output")
                        if output is None:
                            output = ""
                    if script_id:
                        # Clipped here, so the dictionary can go into the observation as it
                        # is; a banner is clipped after its escapes are read.
                        scripts[script_id] = (
                            output if script_id == "banner" else output[:MAX_SCRIPT_CHARS]
                        )
                    self._script = script_id
            elif name == "elem" and self._script == "ssl-cert" and pairs[:2] == ["key", "pem"]:
                # The certificate itself: read into the tls document (app.agent.certificates).
                self._in_pem = True
                self._pem_text.clear()
                self._parser.CharacterDataHandler = self._pem_append
            elif name == "nmaprun":
                self._nmapruns += 1
            return
        if name == "port" and self._host is not None and self._root_seen:
            # nmap writes protocol="…" portid="…"
            if len(pairs) == 4 and pairs[0] == "protocol" and pairs[2] == "portid":
                transport = pairs[1]
                portid = pairs[3]
            else:
                transport = _attribute(pairs, "protocol")
                if transport is None:
                    transport = ""
                portid = _attribute(pairs, "portid")
            number = self._port_numbers.get(portid)  # type: ignore[arg-type]
            if number is None:
                try:
                    number = int(portid if portid is not None else "")
                except ValueError:
                    number = 0
                if not 1 <= number <= 65535:
                    raise self._error(f"portid {portid!r} is not a port number", name)
                numbers = self._port_numbers
                if len(portid) <= 5 and len(numbers) < _PORT_NUMBER_CACHE_ENTRIES:  # type: ignore[arg-type]
                    numbers[portid] = number  # type: ignore[index]
            self._port = [
                transport, number, self._parser.CurrentLineNumber, None, None, None, None, None,
                None,
            ]  # fmt: skip
            return
        attrs = _attributes(pairs)
        if not self._root_seen:
            if name != "nmaprun":
                raise self._error("not an nmap XML document (root element is not nmaprun)", name)
            self._root_seen = True
            self._nmapruns = 1
            self._run_time = self._epoch(attrs, "start", name)
            return
        if name == "host":
            self._host = _Host(
                self._epoch(attrs, "endtime", name)
                or self._epoch(attrs, "starttime", name)
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
        if name == "address":
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
        elif name == "elem":
            if self._in_pem:
                self._in_pem = False
                self._parser.CharacterDataHandler = None
                port = self._port
                if port is not None:
                    pem = "".join(self._pem_text)
                    port[_PEM] = pem if len(pem) <= MAX_PEM_CHARS else None
        elif name == "script":
            self._script = None
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
        scripts = port[_SCRIPTS]
        pairs = port[_SERVICE]
        if pairs:
            # XML text cannot hold a NUL, so the joined attributes name the list exactly;
            # one string hashes faster than a tuple of them.
            key = "\0".join(pairs)
            fields = self._services.get(key)
            if fields is None:
                fields = _service_fields(_attributes(pairs))
                services = self._services
                if len(key) <= _SERVICE_CACHE_CHARS:
                    if len(services) >= _SERVICE_CACHE_ENTRIES:
                        services.clear()
                    services[key] = fields
            # Copies: each observation owns its dictionaries.
            service = fields[0].copy()
            details = fields[1].copy()
            fingerprint = fields[2]
        else:
            service = {}
            details = {}
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
        if port[_REASON]:
            details["reason"] = port[_REASON]
        # The port's own CPE list and script dictionary go into the observation when
        # nothing is to be left out: no other observation holds them.
        cpes = port[_CPES]
        if cpes:
            details["cpe"] = cpes if len(cpes) <= 8 else cpes[:8]
        if scripts:
            if "banner" not in scripts:
                details["scripts"] = scripts
            else:
                shown = {key: value for key, value in scripts.items() if key != "banner"}
                if shown:
                    details["scripts"] = shown
        hostname = host.hostname or host.ptr
        facts = _facts(scripts, port[_PEM]) if scripts else None
        if facts:
            observation = self._observation_dict(
                host, ip, port, transport, state, service, hostname
            )
            if details:
                observation["details"] = details
            observation.update(facts)
            return observation
        # The observation is built here rather than by formats.make_observation (same shape,
        # same key order): this runs once per port of every scan, and a dictionary made
        # whole is not grown (and resized) key by key.
        if service and details and not hostname:
            return {
                "observed_at": host.observed_at,
                "ip": ip,
                "port": port[_NUMBER],
                "transport": transport,
                "state": state,
                "service": service,
                "details": details,
            }
        observation = self._observation_dict(host, ip, port, transport, state, service, hostname)
        if details:
            observation["details"] = details
        return observation

    def _epoch(self, attrs: dict[str, str], key: str, element: str) -> str | None:
        try:
            return epoch_to_iso(attrs.get(key))
        except UnusableTime as exc:
            raise self._error(f"{key}: {exc}", element) from None

    @staticmethod
    def _observation_dict(host, ip, port, transport, state, service, hostname) -> dict[str, Any]:
        observation: dict[str, Any] = {
            "observed_at": host.observed_at,
            "ip": ip,
            "port": port[_NUMBER],
            "transport": transport,
            "state": state,
        }
        if service:
            observation["service"] = service
        if hostname:
            observation["hostname"] = hostname.rstrip(".")[:253]
        return observation

    # -- feeding ---------------------------------------------------------
    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        self.bytes_read += len(chunk)
        try:
            self._parser.Parse(chunk, False)
        except expat.ExpatError as exc:
            raise self._expat_error(exc) from None
        except (LookupError, ValueError) as exc:
            if isinstance(exc, ResultFormatError):
                raise
            raise self._encoding_error(exc) from None
        return self._take()

    def close(self) -> list[dict[str, Any]]:
        """End of input: a document cut short (a killed scan) is an error, after the
        observations completed before the cut have been returned by ``feed``."""
        try:
            self._parser.Parse(b"", True)
        except expat.ExpatError as exc:
            raise self._expat_error(exc) from None
        except (LookupError, ValueError) as exc:
            if isinstance(exc, ResultFormatError):
                raise
            raise self._encoding_error(exc) from None
        if not self._root_seen:
            raise ResultFormatError("empty document: no nmaprun element", line=1, byte_offset=0)
        return self._take()

    def _encoding_error(self, exc: Exception) -> ResultFormatError:
        # expat asks Python for an encoding it does not know itself: an unknown name
        # (LookupError) or one expat cannot use (multi-byte, ValueError).
        return ResultFormatError(
            f"unsupported XML encoding declaration: {exc}", line=1, byte_offset=0
        )

    def _expat_error(self, exc: expat.ExpatError) -> ResultFormatError:
        element = "port" if self._port is not None else ("host" if self._host else None)
        return ResultFormatError(
            f"malformed XML: {expat.ErrorString(exc.code)}",
            line=exc.lineno,
            column=exc.offset,
            element=element,
            # expat reports -1 for a document with no byte at all (an empty file).
            byte_offset=max(self._parser.ErrorByteIndex, 0),
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
