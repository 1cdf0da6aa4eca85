"""Imports answer 400 naming the item for every malformed file, never 500 (AGT-5, AGT-7):
out-of-range and non-finite epoch times, timestamps with extreme offsets, JSON nested far
deeper than any result file, an XML encoding nobody knows, lone surrogates in banners.
A property test per format throws generated bad documents at the real route and accepts
only 400 or success."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.support.scanner_protocol import make_task
from tests.support.settings import make_settings

LIMIT = 4 * 1024 * 1024


@pytest.fixture
def settings(database_url, tmp_path):
    return make_settings(database_url, tmp_path, agent={"import_max_bytes": LIMIT})


def _import(user, task_id: int, data: bytes, fmt: str):
    return user.post(
        f"/api/tasks/{task_id}/imports?format={fmt}",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
        json=None,
    )


def _masscan(record: str) -> bytes:
    return f"[\n{record}\n]\n".encode()


def _masscan_record(timestamp: str = '"1700000000"', banner: str | None = None) -> str:
    if banner is None:
        port = '{"port": 80, "proto": "tcp", "status": "open"}'
    else:
        port = f'{{"port": 80, "proto": "tcp", "service": {{"name": "http", "banner": {banner}}}}}'
    return f'{{"ip": "192.0.2.1", "timestamp": {timestamp}, "ports": [{port}]}}'


def _naabu(timestamp: str) -> bytes:
    return (json.dumps({"ip": "192.0.2.1", "port": 80, "timestamp": timestamp}) + "\n").encode()


NMAP = (
    '<?xml version="1.0" encoding="{encoding}"?>\n<nmaprun start="{start}">'
    '<host starttime="{start}"><address addr="192.0.2.1" addrtype="ipv4"/>'
    '<ports><port protocol="tcp" portid="80"><state state="open"/></port></ports>'
    "</host></nmaprun>\n"
)

BAD = {
    "masscan huge epoch": ("masscan-json", _masscan(_masscan_record('"1e300"'))),
    "masscan huge integer epoch": ("masscan-json", _masscan(_masscan_record("10" * 30))),
    "masscan NaN epoch": ("masscan-json", _masscan(_masscan_record("NaN"))),
    "masscan infinite epoch": ("masscan-json", _masscan(_masscan_record('"inf"'))),
    "masscan -infinite epoch": ("masscan-json", _masscan(_masscan_record("-Infinity"))),
    "masscan lone surrogate banner": (
        "masscan-json",
        _masscan(_masscan_record(banner='"ok \\ud800 then"')),
    ),
    "masscan deep nesting": ("masscan-json", b"[\n" + b"[" * 100_000 + b"]" * 100_000 + b"\n]\n"),
    "naabu deep nesting": ("naabu-jsonl", b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n"),
    "naabu extreme offset": ("naabu-jsonl", _naabu("9999-12-31T23:59:59-23:59")),
    "naabu extreme negative year": ("naabu-jsonl", _naabu("0001-01-01T00:00:00+23:59")),
    "naabu huge epoch": ("naabu-jsonl", _naabu("1e300")),
    "naabu NaN epoch": ("naabu-jsonl", b'{"ip":"192.0.2.1","port":80,"timestamp":NaN}\n'),
    "nmap unknown encoding": (
        "nmap-xml",
        NMAP.format(encoding="x-no-such-encoding", start="1700000000").encode(),
    ),
    "nmap huge epoch": ("nmap-xml", NMAP.format(encoding="UTF-8", start="1e300").encode()),
    "nmap NaN epoch": ("nmap-xml", NMAP.format(encoding="UTF-8", start="nan").encode()),
    "nmap infinite epoch": ("nmap-xml", NMAP.format(encoding="UTF-8", start="inf").encode()),
    "nmap deep nesting": (
        "nmap-xml",
        b'<?xml version="1.0"?><nmaprun>' + b"<x>" * 100_000 + b"</x>" * 100_000 + b"</nmaprun>",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_files_answer_400_naming_the_item(api, case):
    fmt, data = BAD[case]
    user = api.user()
    task = make_task(user, targets=("192.0.2.0/28",), ports="80")
    response = _import(user, task["id"], data, fmt)
    assert response.status_code in (201, 400), (case, response.status_code, response.data[:300])
    if response.status_code == 400:
        error = response.get_json()["error"]
        assert error["code"] == "invalid_import_file"
        assert "line" in error["message"] or "observation" in error["message"], error


UNREADABLE_TIMES = {
    "masscan": ("masscan-json", _masscan(_masscan_record('"yesterday"')), "line"),
    "masscan object": ("masscan-json", _masscan(_masscan_record('{"at": 1}')), "line"),
    "masscan negative": ("masscan-json", _masscan(_masscan_record('"-5"')), "line"),
    "naabu": ("naabu-jsonl", _naabu("last tuesday"), "line"),
    "nmap": ("nmap-xml", NMAP.format(encoding="UTF-8", start="noon").encode(), "start:"),
}


@pytest.mark.parametrize("case", list(UNREADABLE_TIMES))
def test_a_time_that_cannot_be_read_is_refused_not_replaced_by_the_import_time(api, case):
    """A file's times date what it found (first seen, what changed when): an unreadable
    one is a 400 naming where it is, and nothing is imported (it used to become "now")."""
    fmt, data, where = UNREADABLE_TIMES[case]
    user = api.user()
    task = make_task(user, targets=("192.0.2.0/28",), ports="80")
    response = _import(user, task["id"], data, fmt)
    assert response.status_code == 400, (case, response.get_json())
    error = response.get_json()["error"]
    assert error["code"] == "invalid_import_file" and where in error["message"], error
    assert "time" in error["message"], error
    assert user.get(f"/api/tasks/{task['id']}/results").get_json()["items"] == []


# --- property tests: generated bad documents, one per format --------------------------

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=()), max_size=40)
_number = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
)
_scalar = st.one_of(st.none(), st.booleans(), _number, _text)
_json = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "ip",
                    "port",
                    "ports",
                    "timestamp",
                    "proto",
                    "status",
                    "service",
                    "name",
                    "banner",
                    "host",
                    "protocol",
                    "ttl",
                    "reason",
                ]
            ),
            inner,
            max_size=6,
        ),
    ),
    max_leaves=12,
)


def _json_bytes(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


_masscan_docs = st.lists(_json, min_size=1, max_size=4).map(
    lambda records: b"[\n" + b",\n".join(_json_bytes(r) for r in records) + b"\n]\n"
)
_naabu_docs = st.lists(_json, min_size=1, max_size=4).map(
    lambda records: b"".join(_json_bytes(r) + b"\n" for r in records)
)
_attr = st.one_of(_text, _number.map(str), st.sampled_from(["80", "tcp", "open", "192.0.2.1"]))
_nmap_docs = st.builds(
    lambda enc, start, addr, port, proto, state, extra: (
        f'<?xml version="1.0" encoding="{enc}"?><nmaprun start="{start}">'
        f'<host starttime="{start}" endtime="{start}"><address addr="{addr}" addrtype="ipv4"/>'
        f'<ports><port protocol="{proto}" portid="{port}"><state state="{state}"/>'
        f'<service name="{extra}" product="{extra}"/></port></ports></host></nmaprun>'
    ).encode("utf-8", "surrogatepass"),
    st.sampled_from(["UTF-8", "utf-16", "latin-1", "x-unknown", "ascii"]),
    _attr,
    st.one_of(_attr, st.just("192.0.2.1")),
    st.one_of(_attr, st.integers(-5, 70000).map(str)),
    st.one_of(_attr, st.just("tcp")),
    st.one_of(_attr, st.just("open")),
    _attr.map(lambda t: t.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")),
)


@pytest.fixture
def probe(api):
    user = api.user()
    task = make_task(user, targets=("192.0.2.0/28",), ports="1-65535")

    def send(fmt: str, data: bytes) -> None:
        response = _import(user, task["id"], data, fmt)
        assert response.status_code in (201, 400), (response.status_code, data[:300])

    return send


PROPERTY = hsettings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(data=_masscan_docs)
def test_property_masscan_json_is_400_or_success(probe, data):
    probe("masscan-json", data)


@PROPERTY
@given(data=_naabu_docs)
def test_property_naabu_jsonl_is_400_or_success(probe, data):
    probe("naabu-jsonl", data)


@PROPERTY
@given(data=_nmap_docs)
def test_property_nmap_xml_is_400_or_success(probe, data):
    probe("nmap-xml", data)
