"""The agent's side of the scanner protocol over HTTP (AGT-1).

A thin ``requests`` session with the bearer token. Every call returns a
decoded answer or raises one of three errors the loop acts on: ``LeaseLost``
(409 ``lease_lost``: stop the work, drop the spool), ``RetryLater`` (network
errors, 429, 5xx and 503 with its ``Retry-After``: the same request may be
sent again) and ``Rejected`` (any other 4xx: the request itself is wrong and
repeating it cannot help).
"""

from __future__ import annotations

import http.client
import json
import re
from dataclasses import dataclass
from typing import Any

import orjson
import requests

from app.upload_protocol import PROTOCOL_VERSION, canonical_checksum


class ProtocolError(Exception):
    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class LeaseLost(ProtocolError):
    """The server no longer lets this agent write the execution."""


class ExecutionCancelled(LeaseLost):
    """409 ``execution_cancelled`` (or 404 ``execution_not_found``, its task deleted): the
    execution's run was cancelled; stop and drop it."""


class RetryLater(ProtocolError):
    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class Rejected(ProtocolError):
    """A 4xx answer other than lease_lost: the request will not succeed by repeating it."""


class MalformedClaim(ProtocolError):
    """A claim answer the agent will not act on: an identifier (execution id, claim token)
    missing or not of its format, or the answer not the documented JSON object. The agent
    does not trust the server's identifiers: they name spool paths and request URLs."""


# The server's claim tokens are UUIDs (gen_random_uuid); nothing else reaches a path.
_CLAIM_TOKEN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_KINDS = ("ports", "dns")
_TRANSPORTS = ("tcp", "udp")
_MAX_ID = 2**63 - 1


def _identifier(data: dict[str, Any], key: str, *, default: int | None = None) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_ID:
        raise MalformedClaim(f"claim field {key!r} must be a positive integer, got {value!r:.80}")
    return value


_PROFILE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def _profile(data: dict[str, Any]) -> str:
    """The scan profile the server asks for (``app.agent.profiles``); a name the agent does
    not know falls back to its default there, but a value that is not a short name at all
    is a malformed claim."""
    value = data.get("profile")
    if value is None or value == "":
        return "standard"
    if not isinstance(value, str) or not _PROFILE_NAME.match(value):
        raise MalformedClaim(f"claim field 'profile' must be a profile name, got {value!r:.80}")
    return value


def _string_list(data: dict[str, Any], key: str, default: list[str]) -> list[str]:
    value = data.get(key)
    if value is None:
        return list(default)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MalformedClaim(f"claim field {key!r} must be a list of strings")
    return list(value)


def upload_body(
    *,
    claim_token: str,
    upload_id: str,
    batch_index: int,
    is_final: bool,
    observations: list[dict[str, Any]],
    dns_records: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "protocol_version": PROTOCOL_VERSION,
        "claim_token": claim_token,
        "upload_id": upload_id,
        "stream": "main",
        "batch_index": batch_index,
        "is_final": is_final,
        "checksum": canonical_checksum(observations, dns_records),
        "observations": observations,
        "dns_records": dns_records,
    }


def encode_body(body: Any) -> bytes:
    """A request body as compact UTF-8 JSON. orjson writes a batch of thousands of
    observations about ten times faster than json; what it refuses (an integer beyond
    64 bits) json writes. The checksum is not taken from these bytes: the server decodes
    them and checks the canonical form (app.upload_protocol)."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class Execution:
    id: int
    task_id: int
    kind: str
    claim_token: str
    lease_expires_at: str
    targets: list[str]
    ports: str
    transports: list[str]
    attempt: int
    profile: str = "standard"  # quick | standard | deep (app.agent.profiles)

    @classmethod
    def from_claim(cls, data: Any) -> Execution:
        """The claim's execution, every identifier checked against its format; raises
        ``MalformedClaim`` naming the first field that is wrong. Targets and ports are
        checked against the target rules by the loop (``app.agent.targets``), which can
        still report a failure for an execution whose identity is sound."""
        if not isinstance(data, dict):
            raise MalformedClaim("the claim's execution is not a JSON object")
        token = data.get("claim_token")
        if not isinstance(token, str) or not _CLAIM_TOKEN.match(token):
            raise MalformedClaim(f"claim_token is not a UUID: {token!r:.80}")
        kind = data.get("kind")
        if kind not in _KINDS:
            raise MalformedClaim(f"claim field 'kind' must be one of {_KINDS}, got {kind!r:.80}")
        lease = data.get("lease_expires_at")
        if not isinstance(lease, str) or len(lease) > 64:
            raise MalformedClaim("claim field 'lease_expires_at' must be a timestamp string")
        ports = data.get("ports") or ""
        if not isinstance(ports, str):
            raise MalformedClaim("claim field 'ports' must be a string")
        transports = _string_list(data, "transports", ["tcp"]) or ["tcp"]
        if any(t not in _TRANSPORTS for t in transports):
            raise MalformedClaim(f"claim field 'transports' must hold tcp/udp: {transports!r:.80}")
        return cls(
            id=_identifier(data, "id"),
            task_id=_identifier(data, "task_id"),
            kind=kind,
            claim_token=token,
            lease_expires_at=lease,
            targets=_string_list(data, "targets", []),
            ports=ports,
            transports=transports,
            attempt=_identifier(data, "attempt", default=1),
            profile=_profile(data),
        )

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _dropped_kept_alive(exc: requests.ConnectionError) -> bool:
    """Whether a request failed because its reused connection was closed under it: the
    server answered nothing (urllib3's "Connection aborted." with the peer's close)."""
    reason = exc.args[0] if exc.args else None
    cause = getattr(reason, "args", ())
    return (
        len(cause) == 2
        and cause[0] == "Connection aborted."
        and isinstance(cause[1], (http.client.RemoteDisconnected, ConnectionResetError))
    )


class ScannerClient:
    def __init__(
        self,
        server: str,
        token: str,
        *,
        timeout: float = 120.0,
        about: dict[str, Any] | None = None,
    ):
        """``about``: what the agent says about itself (``app.agent.about.detect``), sent
        with every claim and lease renewal; None sends nothing."""
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.about = about
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {token}"
        self._session.headers["User-Agent"] = "netmap-agent/1"

    def close(self) -> None:
        self._session.close()

    def _post(
        self, path: str, body: dict[str, Any] | None, data: bytes | None = None
    ) -> requests.Response:
        """``data``: the body already encoded (an upload batch is encoded once, for the spool
        and every sending)."""
        headers = {}
        if data is None and body is not None:
            data = encode_body(body)
        if data is not None:
            headers["Content-Type"] = "application/json"
        try:
            try:
                response = self._session.post(
                    self.server + path, data=data, headers=headers, timeout=self.timeout
                )
            except requests.ConnectionError as exc:
                if not _dropped_kept_alive(exc):
                    raise
                # The server closed the idle kept-alive connection as this request went
                # out on it (its keep-alive timeout): the request was not read. Once
                # more on a new connection, instead of a "claim failed" and a backoff.
                response = self._session.post(
                    self.server + path, data=data, headers=headers, timeout=self.timeout
                )
        except requests.RequestException as exc:
            raise RetryLater(f"{type(exc).__name__}: {exc}") from None
        if response.status_code < 400:
            return response
        try:
            error = response.json().get("error", {})
        except ValueError:
            error = {}
        code = error.get("code")
        message = (
            f"{response.status_code} {code or ''}: {error.get('message') or response.text[:300]}"
        )
        if response.status_code == 409 and code == "lease_lost":
            raise LeaseLost(message, status=409, code=code)
        if response.status_code == 409 and code == "execution_cancelled":
            raise ExecutionCancelled(message, status=409, code=code)
        if response.status_code == 404 and code == "execution_not_found":
            # A deleted task's executions are removed within seconds of the cancel: the
            # protocol says this means the same as execution_cancelled (stop and drop).
            raise ExecutionCancelled(message, status=404, code=code)
        if response.status_code in (408, 429) or response.status_code >= 500:
            raise RetryLater(
                message, retry_after=_retry_after(response), status=response.status_code, code=code
            )
        raise Rejected(message, status=response.status_code, code=code)

    def _with_about(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "agent": self.about} if self.about is not None else body

    def claim(self, kinds: list[str]) -> Execution | None:
        response = self._post("/api/scanner/claim", self._with_about({"kinds": kinds}))
        if response.status_code == 204:
            return None
        try:
            answer = response.json()
        except ValueError:
            raise MalformedClaim(
                f"the claim answer is not JSON: {response.text[:120]!r}", status=200
            ) from None
        if not isinstance(answer, dict) or "execution" not in answer:
            raise MalformedClaim("the claim answer has no 'execution' object", status=200)
        return Execution.from_claim(answer["execution"])

    def renew(self, execution_id: int, claim_token: str) -> str:
        response = self._post(
            f"/api/scanner/executions/{execution_id}/lease",
            self._with_about({"claim_token": claim_token}),
        )
        return response.json()["lease_expires_at"]

    def fail(self, execution_id: int, claim_token: str, reason: str) -> None:
        self._post(
            f"/api/scanner/executions/{execution_id}/fail",
            {"claim_token": claim_token, "reason": reason[:2000]},
        )

    def upload(self, execution_id: int, body: dict[str, Any], data: bytes | None = None) -> int:
        response = self._post(f"/api/scanner/executions/{execution_id}/uploads", body, data)
        return int(response.json().get("saved", 0))
