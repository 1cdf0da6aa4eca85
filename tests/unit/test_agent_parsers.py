"""Result-file parsers on real nmap output and masscan/naabu files (AGT-2, AGT-5).

The nmap fixtures under tests/fixtures/agent were written by nmap 7.93 on this
machine against loopback listeners (tests/support/listeners.py): ``-sV`` with
the banner and http-title scripts, an IPv6 run, and 300 open plus 20 closed
ports on one host. masscan cannot send raw packets on the loopback interface
here, so its files are written by hand in masscan 1.3's ``-oJ`` layout (and
the older comma-first layout); naabu's lines follow its ``-json`` output.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from app.agent.formats import ResultFormatError
from app.agent.json_lines import read_masscan_json, read_naabu_jsonl
from app.agent.nmap_xml import NmapXmlReader, banner_from_fingerprint, read_nmap_xml
from tests.support.certificates import make_certificate
from tests.support.listeners import BANNER

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent"


def _nmap(name: str, chunk: int | None = None) -> list[dict]:
    data = (FIXTURES / name).read_bytes()
    if chunk is None:
        return list(read_nmap_xml(io.BytesIO(data)))
    return list(read_nmap_xml(data[i : i + chunk] for i in range(0, len(data), chunk)))


def test_service_detection_output_maps_services_banners_cpes_and_scripts():
    found = {o["port"]: o for o in _nmap("nmap-sv-loopback.xml")}
    assert len(found) == 4
    by_state = sorted(o["state"] for o in found.values())
    assert by_state == ["closed", "open", "open", "open"]
    services = {o["service"].get("name") for o in found.values() if "service" in o}
    assert services == {"http", "https", "smtp"}
    http = next(o for o in found.values() if o.get("service", {}).get("name") == "http")
    assert http["service"] == {"name": "http", "product": "SimpleHTTPServer", "version": "0.6"}
    assert http["details"]["cpe"] == ["cpe:/a:python:simplehttpserver:0.6"]
    assert http["details"]["extrainfo"].startswith("Python 3")
    assert http["details"]["scripts"] == {"http-title": "netmap test"}
    tls = next(o for o in found.values() if o.get("service", {}).get("name") == "https")
    assert tls["details"]["tunnel"] == "ssl"
    smtp = next(o for o in found.values() if o.get("service", {}).get("name") == "smtp")
    assert smtp["service"]["banner"] == BANNER.strip()  # UTF-8 bytes nmap wrote as \xHH
    assert all(o["ip"] == "127.0.0.1" and o["transport"] == "tcp" for o in found.values())
    assert all(o["observed_at"].endswith("Z") for o in found.values())


def test_chunk_boundaries_do_not_change_the_result():
    whole = _nmap("nmap-sv-loopback.xml")
    assert _nmap("nmap-sv-loopback.xml", chunk=7) == whole
    assert _nmap("nmap-many-ports.xml", chunk=113) == _nmap("nmap-many-ports.xml")


def test_ipv6_addresses_are_kept_compressed():
    found = _nmap("nmap-ipv6.xml")
    assert {o["ip"] for o in found} == {"::1"}
    assert sorted(o["state"] for o in found) == ["closed", "open", "open", "open"]


def test_a_host_with_hundreds_of_ports():
    found = _nmap("nmap-many-ports.xml")
    assert len(found) == 320
    assert sum(o["state"] == "open" for o in found) == 300
    assert sum(o["state"] == "closed" for o in found) == 20
    assert len({o["port"] for o in found}) == 320
    # Without -sV nmap only looks names up in its port table: left to the server's default.
    assert all("service" not in o or "name" not in o["service"] for o in found)


def test_a_port_left_out_of_the_version_scan_has_no_product():
    """nmap leaves 9100-9107 out of -sV and writes product="Excluded from version scan"
    from its port table (as real nmap 7.93 does for a listener on 9101): nothing was
    probed, so no service, product or version is observed."""
    document = (
        '<?xml version="1.0"?><nmaprun scanner="nmap" start="1765152000">'
        '<host starttime="1765152000"><address addr="127.0.0.1" addrtype="ipv4"/><ports>'
        '<port protocol="tcp" portid="9101"><state state="open" reason="syn-ack"/>'
        '<service name="jetdirect" product="Excluded from version scan" method="table" '
        'conf="3"/></port></ports></host></nmaprun>'
    )
    (found,) = list(read_nmap_xml(io.BytesIO(document.encode())))
    assert found["port"] == 9101 and found["state"] == "open"
    assert not found.get("service")


def test_filtered_and_closed_filtered_states():
    document = (FIXTURES / "nmap-many-ports.xml").read_text()
    document = document.replace('state="closed"', 'state="filtered"', 1)
    document = document.replace('state="closed"', 'state="closed|filtered"', 1)
    document = document.replace('state="closed"', 'state="unfiltered"', 1)
    found = list(read_nmap_xml(io.BytesIO(document.encode())))
    assert len(found) == 319  # unfiltered says nothing about a service
    assert sum(o["state"] == "filtered" for o in found) == 2


def test_a_truncated_document_yields_the_complete_ports_then_names_the_cut():
    data = (FIXTURES / "nmap-many-ports.xml").read_bytes()
    cut = data.index(b"<port ", len(data) // 2) + 20  # inside a <port> start tag
    reader = NmapXmlReader()
    observations = reader.feed(data[:cut])
    assert 100 < len(observations) < 320
    with pytest.raises(ResultFormatError) as caught:
        reader.close()
    error = caught.value
    assert error.line is not None and error.line > 1
    assert error.byte_offset is not None and 0 < error.byte_offset <= cut
    assert "malformed XML" in error.message
    assert f"line {error.line}" in str(error) and "byte offset" in str(error)


def test_not_an_nmap_document_and_a_bad_port_name_the_element():
    with pytest.raises(ResultFormatError) as caught:
        list(read_nmap_xml(io.BytesIO(b"<?xml version='1.0'?>\n<html></html>")))
    assert caught.value.element == "html" and caught.value.line == 2
    document = (
        b'<nmaprun start="1796058252"><host><address addr="127.0.0.1" addrtype="ipv4"/>'
        b'<ports>\n<port protocol="tcp" portid="99999"><state state="open"/></port></ports>'
        b"</host></nmaprun>"
    )
    with pytest.raises(ResultFormatError) as caught:
        list(read_nmap_xml(io.BytesIO(document)))
    assert caught.value.element == "port" and caught.value.line == 2
    assert caught.value.byte_offset == document.index(b'<port protocol="tcp" portid="99999"')


def test_script_output_is_clipped_and_hostnames_are_used():
    long_output = "x" * 5000
    document = (
        '<nmaprun start="1796058252"><host endtime="1796058300">'
        '<address addr="::ffff:7f00:1" addrtype="ipv6"/>'
        '<address addr="00:11:22:33:44:55" addrtype="mac"/>'
        '<hostnames><hostname name="ptr.example.test" type="PTR"/>'
        '<hostname name="www.example.test" type="user"/></hostnames>'
        '<ports><port protocol="tcp" portid="22"><state state="open" reason="syn-ack"/>'
        '<service name="ssh" product="OpenSSH" version="9.2p1" method="probed" conf="10">'
        "<cpe>cpe:/a:openbsd:openssh:9.2p1</cpe></service>"
        f'<script id="ssh-hostkey" output="{long_output}"/></port></ports></host></nmaprun>'
    )
    (found,) = read_nmap_xml(io.BytesIO(document.encode()))
    assert found["hostname"] == "www.example.test"
    assert found["ip"] == "::ffff:7f00:1"
    assert found["observed_at"] == "2026-11-30T17:05:00Z"
    assert len(found["details"]["scripts"]["ssh-hostkey"]) == 1024
    assert found["service"] == {"name": "ssh", "product": "OpenSSH", "version": "9.2p1"}


def test_banner_from_an_unrecognised_services_fingerprint():
    fingerprint = (
        "SF-Port9999-TCP:V=7.93%I=7%D=11/30%Time=6B0DAC92%P=x86_64-pc-linux-gnu%r(NULL,"
        '10,"hello\\x20w\\xc3\\xb6rld\\r\\n")%r(GenericLines,2,"\\r\\n");'
    )
    assert banner_from_fingerprint(fingerprint) == "hello wörld"


def test_masscan_json_states_banners_ipv6_and_udp():
    found = list(read_masscan_json((FIXTURES / "masscan-1.3.json").open("rb")))
    assert len(found) == 6
    assert [o["ip"] for o in found[:4]] == ["127.0.0.1", "127.0.0.1", "::1", "127.0.0.2"]
    assert found[3]["transport"] == "udp"
    assert found[4]["service"] == {"name": "ssh", "banner": "SSH-2.0-OpenSSH_9.2p1 Debian-2 ü"}
    assert "name" not in found[5]["service"]  # masscan's "title" grabber is no service name
    assert found[0]["observed_at"] == "2026-11-30T17:04:12Z"
    older = list(read_masscan_json((FIXTURES / "masscan-1.0-comma-first.json").open("rb")))
    assert [(o["port"], o["state"]) for o in older] == [(80, "open"), (81, "closed")]


def test_masscan_json_written_on_one_line_reads_as_masscan_writes_it():
    """A valid masscan array on one line (``jq -c``), with one record or several, gives
    the same observations as masscan's record-a-line layout."""
    layout = (FIXTURES / "masscan-1.3.json").read_bytes()
    records = json.loads(layout)
    one_line = json.dumps(records).encode() + b"\n"
    assert list(read_masscan_json(io.BytesIO(one_line))) == list(
        read_masscan_json(io.BytesIO(layout))
    )
    single = json.dumps(records[:1]).encode()
    assert [o["port"] for o in read_masscan_json(io.BytesIO(single))] == [8080]
    assert list(read_masscan_json(io.BytesIO(b"[]"))) == []
    # What is not an array of records is still refused, naming the problem.
    for data, message in (
        (b'[null, 5, "x"]', "a record must be a JSON object"),
        (b'[{"ip": "127.0.0.1", "ports": []}] trailing', "not valid JSON"),
        (b'[{"ip": "127.0.0.1", "ports": []}, {"ip": ', "not valid JSON"),
    ):
        with pytest.raises(ResultFormatError) as caught:
            list(read_masscan_json(io.BytesIO(data)))
        assert message in str(caught.value), (data, str(caught.value))


def test_masscan_bad_record_names_line_and_offset():
    data = (
        b'[\n{"ip": "127.0.0.1", "ports": [{"port": 80, "proto": "tcp"}]},\n'
        b'{"ip": "nope", "ports": []}\n]\n'
    )
    with pytest.raises(ResultFormatError) as caught:
        list(read_masscan_json(io.BytesIO(data)))
    assert caught.value.line == 3
    assert caught.value.byte_offset == data.index(b'{"ip": "nope"')
    assert caught.value.element == "field ip"
    truncated = b'[\n{"ip": "127.0.0.1", "ports": [{"port": 80, "pro'
    with pytest.raises(ResultFormatError) as caught:
        list(read_masscan_json(io.BytesIO(truncated)))
    assert caught.value.line == 2 and "not valid JSON" in caught.value.message
    # Cut at a line's end: every record reads, but the array never closes. It used to
    # import as a whole scan of what was left.
    cut = b'[\n{"ip": "127.0.0.1", "ports": [{"port": 80, "proto": "tcp", "status": "open"}]},\n'
    with pytest.raises(ResultFormatError) as caught:
        list(read_masscan_json(io.BytesIO(cut)))
    assert "closing ']'" in caught.value.message and caught.value.byte_offset == len(cut)


def test_naabu_lines():
    found = list(read_naabu_jsonl((FIXTURES / "naabu.jsonl").open("rb")))
    assert [(o["ip"], o["port"]) for o in found] == [
        ("127.0.0.1", 443),
        ("127.0.0.1", 22),
        ("127.0.0.2", 8443),
    ]
    assert found[0]["hostname"] == "www.example.test"
    assert found[0]["details"] == {"tls": True}
    assert "hostname" not in found[2]  # host equal to the address is no name
    with pytest.raises(ResultFormatError) as caught:
        list(
            read_naabu_jsonl(
                io.BytesIO(b'{"ip":"127.0.0.1","port":22}\n{"ip":"127.0.0.1","port":0}\n')
            )
        )
    assert (caught.value.line, caught.value.byte_offset) == (2, 29)


def _masscan(*records: str) -> list[dict]:
    return list(read_masscan_json(io.BytesIO(("[\n" + ",\n".join(records) + "\n]\n").encode())))


def test_masscan_numbers_beyond_64_bits_and_json_extensions_read_as_json_reads_them():
    big = 123456789012345678901234567890
    (found,) = _masscan(f'{{"ip":"10.0.0.1","ports":[{{"port":80,"reason":{big},"ttl":{big}}}]}}')
    assert found["details"] == {"reason": str(big), "ttl": big}  # integers, not floats
    (found,) = _masscan('{"ip":"10.0.0.1","ports":[{"port":80,"ttl":64}],"x":NaN}')
    assert found["details"] == {"ttl": 64}
    with pytest.raises(ResultFormatError) as caught:
        _masscan(f'{{"ip":"10.0.0.1","ports":[{{"port":{big}}}]}}')
    assert str(big) in caught.value.message
    bom = read_masscan_json(
        io.BytesIO(b'[\n\xef\xbb\xbf{"ip":"10.0.0.1","ports":[{"port":81}]}\n]')
    )
    assert [o["port"] for o in bom] == [81]


def test_masscan_ports_of_a_record_before_a_bad_one_are_still_returned():
    reader = read_masscan_json(
        io.BytesIO(
            b'[\n{"ip":"10.0.0.1","ports":[{"port":80,"ttl":64},{"port":81,"status":"up"}]}\n]\n'
        )
    )
    assert next(reader)["port"] == 80
    with pytest.raises(ResultFormatError) as caught:
        next(reader)
    assert caught.value.element == "field status" and caught.value.line == 2


def test_masscan_an_address_that_is_a_list_is_a_format_error():
    with pytest.raises(ResultFormatError) as caught:
        _masscan('{"ip":["10.0.0.1"],"ports":[{"port":80}]}')
    assert caught.value.element == "field ip"


def test_nmap_cpe_text_split_by_a_comment_or_entity_is_joined_and_other_text_ignored():
    document = (
        b'<nmaprun start="1796058252"><host><address addr="10.0.0.1" addrtype="ipv4"/>'
        b'<ports>text <port protocol="tcp" portid="80">more<state state="open"/>'
        b'<service name="http"><cpe> cpe:/a:x<!-- c -->&amp;y </cpe></service>'
        b"</port></ports></host></nmaprun>"
    )
    for chunk in (None, 3):
        source = (
            io.BytesIO(document)
            if chunk is None
            else [document[i : i + chunk] for i in range(0, len(document), chunk)]
        )
        (found,) = read_nmap_xml(source)
        assert found["details"] == {"cpe": ["cpe:/a:x&y"]}


def test_nmap_attributes_in_another_order_read_the_same_and_repeated_services_are_not_shared():
    # The reader takes nmap's attribute order by position and any other order by name.
    def document(port: str, state: str, script: str) -> bytes:
        ports = "".join(
            f"<port {port.format(number)}><state {state}/>"
            '<service name="http" product="nginx" method="probed" conf="10">'
            f"<cpe>cpe:/a:nginx</cpe></service><script {script}/></port>"
            for number in (80, 8080)
        )
        return (
            '<nmaprun start="1796058252"><host><address addr="10.0.0.1" addrtype="ipv4"/>'
            f"<ports>{ports}</ports></host></nmaprun>"
        ).encode()

    nmap_order = document(
        'protocol="tcp" portid="{}"',
        'state="open" reason="syn-ack" reason_ttl="64"',
        'id="http-title" output="Welcome"',
    )
    other_order = document(
        'portid="{}" protocol="tcp"',
        'reason_ttl="64" reason="syn-ack" state="open"',
        'output="Welcome" id="http-title"',
    )
    found = list(read_nmap_xml(io.BytesIO(nmap_order)))
    assert list(read_nmap_xml(io.BytesIO(other_order))) == found
    assert [o["port"] for o in found] == [80, 8080]
    assert found[0]["details"] == {
        "method": "probed",
        "conf": 10,
        "reason": "syn-ack",
        "cpe": ["cpe:/a:nginx"],
        "scripts": {"http-title": "Welcome"},
    }
    # Both ports have the same <service>: each observation still owns its dictionaries.
    found[0]["service"]["banner"] = "changed"
    found[0]["details"]["conf"] = 1
    assert found[1]["service"] == {"name": "http", "product": "nginx"}
    assert found[1]["details"]["conf"] == 10


def _der_base64(certificate) -> str:
    return base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode()


def test_masscan_x509_banners_become_certificate_facts():
    certificate, _ = make_certificate("shop.example.test", days=30, sans=("shop.example.test",))
    record = (
        '{"ip": "192.0.2.7", "timestamp": "1764633600", "ports": [{"port": 443, "proto": "tcp", '
        f'"service": {{"name": "X509", "banner": "{_der_base64(certificate)}"}}}}]}}'
    )
    bad = (
        '{"ip": "192.0.2.8", "timestamp": "1764633600", "ports": [{"port": 443, "proto": "tcp", '
        '"service": {"name": "X509", "banner": "bm90IGEgY2VydGlmaWNhdGU="}}]}'
    )
    found = list(read_masscan_json(io.BytesIO(f"[\n{record},\n{bad}\n]\n".encode())))
    tls = found[0]["tls"]
    assert tls["subject_cn"] == "shop.example.test" and tls["sans"] == ["shop.example.test"]
    assert tls["not_after"] == certificate.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert tls["self_signed"] is True
    assert len(tls["sha256"]) == 64 and tls["key_type"] == "ec"
    # The certificate is the facts, not a banner; one that does not parse is just dropped.
    assert "banner" not in found[0].get("service", {})
    assert "tls" not in found[1] and "banner" not in found[1].get("service", {})


@pytest.mark.parametrize("content", [b"", b"\n", b"  \n\n"])
def test_a_scan_that_found_nothing_reads_as_no_observations(content):
    """masscan writes an empty file when it finds nothing, naabu no line: zero records,
    not a file error (the agent failed such a scan for good, and the import refused it)."""
    assert list(read_masscan_json(io.BytesIO(content))) == []
    assert list(read_naabu_jsonl(io.BytesIO(content))) == []


def test_an_empty_nmap_file_names_its_first_byte_not_minus_one():

    with pytest.raises(ResultFormatError) as caught:
        list(read_nmap_xml(io.BytesIO(b"")))
    assert caught.value.byte_offset == 0 and "byte offset -1" not in str(caught.value)
