"""A scanner's side of the upload protocol for tests: bodies with correct checksums."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.api import ScannerClient


def now_iso(offset_seconds: float = 0) -> str:
    return (
        (datetime.now(UTC) + timedelta(seconds=offset_seconds)).isoformat().replace("+00:00", "Z")
    )


def observation(ip: str, port: int = 443, *, observed_at: str | None = None, **extra: Any):
    item: dict[str, Any] = {
        "observed_at": observed_at or now_iso(-60),
        "ip": ip,
        "port": port,
        "transport": "tcp",
        "state": "open",
    }
    item.update(extra)
    return item


def dns_record(name: str, value: str, *, type: str = "A", observed_at: str | None = None):
    return {
        "observed_at": observed_at or now_iso(-60),
        "name": name,
        "type": type,
        "value": value,
        "ttl": 300,
    }


def checksum(observations: list[Any], dns_records: list[Any]) -> str:
    # Written from docs/scanner-protocol.md on purpose, not imported from the server: the test is a
    # second implementation of the contract.
    canonical = json.dumps(
        {"observations": observations, "dns_records": dns_records},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def upload_body(
    claim_token: str,
    batch_index: int,
    observations: list[Any] | None = None,
    *,
    dns_records: list[Any] | None = None,
    upload_id: str = "upload-1",
    stream: str = "main",
    is_final: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    observations = observations or []
    body: dict[str, Any] = {
        "protocol_version": 1,
        "claim_token": claim_token,
        "upload_id": upload_id,
        "stream": stream,
        "batch_index": batch_index,
        "is_final": is_final,
        "checksum": checksum(observations, dns_records or []),
        "observations": observations,
    }
    if dns_records is not None:
        body["dns_records"] = dns_records
    body.update(extra)
    return body


@dataclass
class ClaimedUpload:
    """A scanner holding one claimed execution."""

    scanner: ScannerClient
    execution: dict[str, Any]
    upload_id: str = "upload-1"
    sent: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> int:
        return self.execution["id"]

    @property
    def token(self) -> str:
        return self.execution["claim_token"]

    def post(self, body: dict[str, Any]):
        self.sent.append(body)
        return self.scanner.post(f"/api/scanner/executions/{self.id}/uploads", json=body)

    def batch(self, batch_index: int, observations=None, **kwargs: Any):
        kwargs.setdefault("upload_id", self.upload_id)
        return self.post(upload_body(self.token, batch_index, observations, **kwargs))

    def final(self, batch_index: int, observations=None, **kwargs: Any):
        return self.batch(batch_index, observations, is_final=True, **kwargs)


def make_task(user: Any, targets=("192.0.2.0/28",), ports: str = "22,443") -> dict[str, Any]:
    """Create a task as ``user`` (an API client) and return it; the scanner then claims it."""
    response = user.post(
        "/api/tasks", json={"name": "scan", "targets": list(targets), "ports": ports}
    )
    assert response.status_code == 201, response.get_json()
    return response.get_json()["task"]


def claim(scanner: ScannerClient, **kwargs: Any) -> ClaimedUpload:
    response = scanner.claim(**kwargs)
    assert response.status_code == 200, (response.status_code, response.get_json())
    return ClaimedUpload(scanner=scanner, execution=response.get_json()["execution"])
