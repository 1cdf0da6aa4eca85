"""Validating an upload body: the fast path, then the full pydantic path (ING-3).

``parse_upload`` first tries ``fast_body.fast_upload`` (plain bodies, most uploads) and
otherwise validates with the models of ``model``, listing every problem found. Kept
apart from ``model`` so that the fast path can build those models without an import
loop.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from app.config import IngestSettings
from app.errors import ValidationError
from app.json_input import check_json_values
from app.result_ingest.fast_body import fast_upload
from app.result_ingest.model import (
    MAX_DOCUMENT_JSON,
    TAG_PATTERN,
    UploadBody,
    _larger_than,
)
from app.upload_protocol import canonical_checksum


def _location(loc: tuple[Any, ...]) -> dict[str, Any]:
    """Turn pydantic's ('observations', 3, 'port') into index + field names."""
    item: dict[str, Any] = {"loc": ".".join(str(p) for p in loc)}
    if len(loc) >= 2 and loc[0] in ("observations", "dns_records") and isinstance(loc[1], int):
        item["list"] = loc[0]
        item["index"] = loc[1]
        item["field"] = ".".join(str(p) for p in loc[2:]) or None
    else:
        item["field"] = ".".join(str(p) for p in loc)
    return item


def _fail(items: list[dict[str, Any]], message: str = "invalid upload") -> ValidationError:
    return ValidationError(message, code="invalid_upload", details={"items": items[:100]})


def parse_upload(raw: Any, limits: IngestSettings, *, now: datetime | None = None) -> UploadBody:
    """Validate a decoded JSON body; raises ValidationError listing every problem found."""
    if not isinstance(raw, dict):
        raise _fail([{"field": None, "message": "body must be a JSON object"}])
    fast = fast_upload(raw)
    if fast is None:
        values = check_json_values(raw, allow_nul=True)
        if values:
            raise _fail([{**_location(p["path"]), "message": p["message"]} for p in values])
    observations = raw.get("observations", [])
    dns_records = raw.get("dns_records", [])
    problems: list[dict[str, Any]] = []
    if isinstance(observations, list) and len(observations) > limits.max_observations_per_batch:
        problems.append(
            {
                "field": "observations",
                "message": f"{len(observations)} observations; at most "
                f"{limits.max_observations_per_batch} per batch",
            }
        )
    if isinstance(dns_records, list) and len(dns_records) > limits.max_dns_records_per_batch:
        problems.append(
            {
                "field": "dns_records",
                "message": f"{len(dns_records)} DNS records; at most "
                f"{limits.max_dns_records_per_batch} per batch",
            }
        )
    if problems:
        raise _fail(problems, "batch too large")
    if fast is not None:
        body, float_free = fast
    else:
        float_free = False
        try:
            body = UploadBody.model_validate(raw)
        except PydanticValidationError as exc:
            raise _fail(
                [{**_location(tuple(e["loc"])), "message": e["msg"]} for e in exc.errors()]
            ) from None

    now = now or datetime.now(UTC)
    oldest = now - timedelta(days=limits.observed_at_max_age_days)
    newest = now + timedelta(seconds=limits.observed_at_max_future_seconds)
    for list_name, items in (
        ("observations", body.observations),
        ("dns_records", body.dns_records),
    ):
        for index, item in enumerate(items):
            if not oldest <= item.observed_at <= newest:
                problems.append(
                    {
                        "list": list_name,
                        "index": index,
                        "field": "observed_at",
                        "message": f"outside the accepted window ({oldest.isoformat()} .. "
                        f"{newest.isoformat()})",
                    }
                )
    for index, observation in enumerate(body.observations):
        if len(observation.tags) > limits.max_tags:
            problems.append(
                {
                    "list": "observations",
                    "index": index,
                    "field": "tags",
                    "message": f"at most {limits.max_tags} tags",
                }
            )
        for tag in observation.tags:
            if len(tag) > limits.max_tag_length or not TAG_PATTERN.fullmatch(tag):
                problems.append(
                    {
                        "list": "observations",
                        "index": index,
                        "field": "tags",
                        "message": f"tags are lower-case [a-z0-9._:-], at most "
                        f"{limits.max_tag_length} characters",
                    }
                )
                break
        banner = observation.service.banner if observation.service else None
        if banner is not None and len(banner.encode("utf-8")) > limits.max_banner_bytes:
            problems.append(
                {
                    "list": "observations",
                    "index": index,
                    "field": "service.banner",
                    "message": f"longer than {limits.max_banner_bytes} bytes",
                }
            )
        for facts_name in ("tls", "http", "details"):
            facts = getattr(observation, facts_name)
            if facts is not None and _larger_than(facts, MAX_DOCUMENT_JSON):
                problems.append(
                    {
                        "list": "observations",
                        "index": index,
                        "field": facts_name,
                        "message": f"larger than {MAX_DOCUMENT_JSON} bytes of JSON",
                    }
                )
    if problems:
        raise _fail(problems)
    expected = canonical_checksum(observations, dns_records, float_free=float_free)
    if expected != body.checksum.lower():
        raise ValidationError(
            "checksum does not match the canonical JSON of observations and dns_records",
            code="checksum_invalid",
            details={"field": "checksum"},
        )
    return body
