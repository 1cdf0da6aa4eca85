"""A batch is encoded once, by orjson, for the spool and the request (AGT-3, ING-3).

What the server decodes must be the batch the agent checksummed: the server checks
the canonical checksum of the decoded lists, so the encoding may differ from the
canonical form but never in content.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from app.agent.client import encode_body, upload_body
from app.agent.json_lines import read_masscan_json
from app.agent.nmap_xml import read_nmap_xml
from app.agent.spool import ExecutionSpool
from app.upload_protocol import canonical_checksum

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent"


def _body(observations: list[dict]) -> dict:
    return upload_body(
        claim_token="t" * 32,
        upload_id="agent-1-1-abc",
        batch_index=0,
        is_final=True,
        observations=observations,
        dns_records=[],
    )


def test_decoded_batches_carry_the_checksummed_content():
    observations = list(read_nmap_xml((FIXTURES / "nmap-sv-loopback.xml").open("rb")))
    observations += list(read_masscan_json((FIXTURES / "masscan-1.3.json").open("rb")))
    observations.append(
        {"observed_at": "2026-11-30T17:04:12Z", "ip": "127.0.0.1", "port": 1, "transport": "tcp",
         "state": "open", "service": {"banner": "ü \u2028 \x01 \"q\" \\ 😀"}}
    )  # fmt: skip
    body = _body(observations)
    decoded = json.loads(encode_body(body))
    assert decoded == body
    assert canonical_checksum(decoded["observations"], decoded["dns_records"]) == body["checksum"]


def test_an_integer_beyond_64_bits_is_encoded_by_json():
    big = 123456789012345678901234567890
    observations = list(
        read_masscan_json(
            io.BytesIO(f'[\n{{"ip":"10.0.0.1","ports":[{{"port":80,"ttl":{big}}}]}}\n]'.encode())
        )
    )
    body = _body(observations)
    data = encode_body(body)
    assert str(big).encode() in data and json.loads(data) == body


def test_the_spool_keeps_the_bytes_that_are_sent(tmp_path):
    body = _body(list(read_nmap_xml((FIXTURES / "nmap-ipv6.xml").open("rb"))))
    data = encode_body(body)
    directory = tmp_path / "execution-1-1-6f1c1f0e"
    directory.mkdir()
    spool = ExecutionSpool(directory, tmp_path)
    spool.write_batch(0, body, data)
    assert spool.batch_path(0).read_bytes() == data
    assert list(spool.batches()) == [(0, body)]
    spool.write_batch(1, body)  # encoded by the spool when not given
    assert spool.batch_path(1).read_bytes() == data
