"""The upload body (docs/scanner-protocol.md) and its validation (ING-13).

Validation happens before anything is written: unknown fields, bad addresses,
ports and timestamps, oversized batches and a checksum that does not match the
canonical JSON all answer 400 naming the offending item index and field, and
nothing reaches PostgreSQL or the store.

Text the stores cannot hold is settled here too (ING-15), so a store never
refuses an item validation let through:

* a NUL character (``\u0000``) in free text (service name, product, version,
  banner, hostname, DNS record value, any key or string inside ``tls`` /
  ``http``) is **escaped** as the four characters ``\x00`` — binary banners
  carry NUL bytes and the data is worth keeping; fields with a fixed alphabet
  (tags, addresses, DNS names, upload ids) reject it with a 400 instead;
* a lone UTF-16 surrogate anywhere in the body, NaN or ±Infinity anywhere in
  the body, or JSON nested too deeply (``app.json_input``) answer 400 naming
  where;
* ``protocol_version`` must be the JSON integer 1 (``true`` and ``1.0`` are
  refused), timestamps must be convertible to UTC.

The checksum is always computed over the body as received (before escaping).

The checksum is SHA-256 over the canonical JSON of
``{"observations": […], "dns_records": […]}`` exactly as received (missing
lists count as empty): keys sorted, separators ``,`` and ``:``, UTF-8, no ASCII
escaping. Numbers are rendered as Python's ``json`` renders them, so scanners
should send integers where the schema says integer.
"""

from __future__ import annotations

import ipaddress
import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from app.search.ids import stored_ip
from app.upload_protocol import PROTOCOL_VERSION

UPLOAD_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,128}$"
MAX_BATCH_INDEX = 10_000_000
MAX_STRING = 1024
TAG_PATTERN = re.compile(r"[a-z0-9][a-z0-9._:-]*")
DNS_TYPES = ("A", "AAAA", "CNAME", "MX", "NS", "TXT", "PTR", "SOA", "SRV", "CAA")
NUL_ESCAPE = "\\x00"


# A tls/http/details document's limit, in characters of ``json.dumps(document)``.
MAX_DOCUMENT_JSON = 16384


def _larger_than(document: Any, limit: int) -> bool:
    """``len(json.dumps(document, default=str)) > limit``, measured only when it could be.

    ``json.dumps`` (ASCII escapes, ``", "`` and ``": "``) writes at most three characters
    per byte of orjson's compact UTF-8 (a non-ASCII character: 2-4 bytes against a 6- or
    12-character escape; a separator: 1 byte against 2; a float: as short or shorter). So
    a document whose compact form is within a quarter of the limit is surely within it,
    and the usual one (a few hundred bytes) never pays for the slow encoder."""
    try:
        if len(orjson.dumps(document)) * 4 <= limit:
            return False
    except TypeError:  # an integer beyond 64 bits, a type JSON does not know
        pass
    return len(json.dumps(document, default=str)) > limit


def escape_nul(value: str) -> str:
    """NUL → the four characters ``\\x00`` (neither PostgreSQL text/jsonb nor the store
    accept NUL; escaping keeps what the scanner saw readable)."""
    return value.replace("\x00", NUL_ESCAPE) if "\x00" in value else value


def escape_nul_deep(value: Any) -> Any:
    """``escape_nul`` over every key and string inside a JSON document."""
    if isinstance(value, str):
        return escape_nul(value)
    if isinstance(value, dict):
        return {escape_nul(str(k)): escape_nul_deep(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_nul_deep(v) for v in value]
    return value


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


def _strict_protocol_version(value: Any) -> Any:
    # pydantic's lax mode would take true and 1.0 as 1; the protocol says a JSON integer.
    if type(value) is not int:
        raise ValueError("must be the JSON integer 1")
    return value


Short = Annotated[StrictStr, Field(max_length=MAX_STRING), AfterValidator(escape_nul)]
Text = Annotated[StrictStr, AfterValidator(escape_nul)]
Document = Annotated[dict[str, Any], AfterValidator(escape_nul_deep)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("needs a time zone (e.g. 2026-11-30T06:00:00Z)")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        # 9999-12-31T23:59:59-23:59 is a valid ISO string but not a UTC instant.
        raise ValueError("is outside the range of UTC timestamps") from None


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


class ServiceIn(_Strict):
    name: Short | None = None
    product: Short | None = None
    version: Short | None = None
    banner: Text | None = None  # length bounded by settings (max_banner_bytes)


class ObservationIn(_Strict):
    observed_at: UtcDatetime
    ip: StrictStr
    port: Annotated[StrictInt, Field(ge=1, le=65535)]
    transport: Literal["tcp", "udp"] = "tcp"
    state: Literal["open", "closed", "filtered", "open|filtered"] = "open"
    service: ServiceIn | None = None
    hostname: Annotated[StrictStr, Field(max_length=253), AfterValidator(escape_nul)] | None = None
    tags: list[Annotated[StrictStr, Field(max_length=256)]] = Field(default_factory=list)
    tls: Document | None = None
    http: Document | None = None
    # What the scanner knows beyond the service fields (extra info, CPEs, script output, …).
    details: Document | None = None

    @field_validator("ip")
    @classmethod
    def _ip(cls, value: str) -> str:
        if "%" in value:
            raise ValueError("IPv6 zone identifiers are not accepted")
        try:
            return stored_ip(value)
        except ValueError:
            raise ValueError("not an IPv4 or IPv6 address") from None


class DnsRecordIn(_Strict):
    observed_at: UtcDatetime
    name: Annotated[StrictStr, Field(min_length=1, max_length=253), AfterValidator(_no_nul)]
    type: Literal[DNS_TYPES]  # type: ignore[valid-type]
    value: Annotated[
        StrictStr, Field(min_length=1, max_length=MAX_STRING), AfterValidator(escape_nul)
    ]
    ttl: Annotated[StrictInt, Field(ge=0, le=2_147_483_647)] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        name = value.rstrip(".").lower()
        if not name:
            raise ValueError("must be a DNS name")
        return name

    @model_validator(mode="after")
    def _address_value(self) -> DnsRecordIn:
        # A and AAAA answers become scan targets of a follow-up task: they must be plain
        # addresses of the record's family (no zone identifier).
        if self.type in ("A", "AAAA"):
            try:
                address = ipaddress.ip_address(self.value)
            except ValueError:
                raise ValueError(f"value of an {self.type} record must be an address") from None
            if address.version != (4 if self.type == "A" else 6) or "%" in self.value:
                raise ValueError(f"value is not a plain IPv{4 if self.type == 'A' else 6} address")
            object.__setattr__(self, "value", str(address))
        return self


class UploadBody(_Strict):
    protocol_version: Annotated[
        Literal[PROTOCOL_VERSION], BeforeValidator(_strict_protocol_version)
    ]
    claim_token: UUID
    upload_id: Annotated[StrictStr, Field(pattern=UPLOAD_ID_PATTERN)]
    stream: Literal["main", "dns"] = "main"
    batch_index: Annotated[StrictInt, Field(ge=0, le=MAX_BATCH_INDEX)]
    is_final: StrictBool = False
    checksum: Annotated[StrictStr, Field(pattern=r"^[0-9a-fA-F]{64}$")]
    kind: Literal["ports", "dns"] | None = None
    observations: list[ObservationIn] = Field(default_factory=list)
    dns_records: list[DnsRecordIn] = Field(default_factory=list)

    @property
    def item_count(self) -> int:
        return len(self.observations) + len(self.dns_records)
