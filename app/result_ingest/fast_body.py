"""The common upload body, checked in one tight loop, not a pydantic model per item (ING-13).

pydantic spends tens of µs on an observation (a model, a nested service model and
Python validators per field), and a scanner sends thousands per batch. The
usual body — plain observations of the documented shape, no DNS records — is
checked here with plain type and range tests, and the result is the very
``UploadBody`` pydantic would build (same values, same fields-set).

This path only ever *accepts*. Anything it does not recognise as surely valid —
a missing or unknown field, a value pydantic would coerce or refuse, a
timestamp not in the plain RFC 3339 form, DNS records, a lone surrogate, a
non-finite number, deep nesting, a type JSON does not produce — makes
:func:`fast_upload` return ``None``, and ``parse.parse_upload`` validates the body
with pydantic as before: every refusal keeps its exact message and item. A
unit test holds the two paths to the same result.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any, get_args

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from app.json_input import check_json_values
from app.result_ingest.model import (
    MAX_STRING,
    ObservationIn,
    ServiceIn,
    UploadBody,
    escape_nul,
    escape_nul_deep,
)
from app.search.ids import CANONICAL_IPV4, stored_ip

# Only the plain RFC 3339 form, with ranges pydantic also accepts (its parser is
# stricter than ``fromisoformat`` on some forms; those take the pydantic path).
_TIMESTAMP = re.compile(
    r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
    r"T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?"
    r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
)
_SURROGATE = re.compile("[\ud800-\udfff]")

_OBSERVATION_FIELDS = tuple(ObservationIn.model_fields)
_OBSERVATION_KEYS = frozenset(_OBSERVATION_FIELDS)
_SERVICE_FIELDS = tuple(ServiceIn.model_fields)
_SERVICE_KEYS = frozenset(_SERVICE_FIELDS)
_TRANSPORTS = frozenset(get_args(ObservationIn.model_fields["transport"].annotation))
_STATES = frozenset(get_args(ObservationIn.model_fields["state"].annotation))
_LISTS = ("observations", "dns_records")
# Far below MAX_JSON_DEPTH: a document nested this deep takes the exact path.
_MAX_DOCUMENT_DEPTH = 16
_JSON_SCALARS = (str, int, float, bool, type(None))


def _built(model: type[BaseModel], values: dict[str, Any], given: set[str]) -> Any:
    """The instance ``model.model_validate`` returns for already valid ``values`` (every
    field, in declaration order): what ``model_construct`` does, without its per-call
    field bookkeeping, which would cost as much as the checks above it."""
    instance = model.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", given)
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance


def _clean(text: str) -> bool:
    return text.isascii() or _SURROGATE.search(text) is None


def _short(value: Any, max_length: int | None) -> bool:
    """A strict string pydantic keeps (length in characters) and the JSON walk passes."""
    return type(value) is str and (max_length is None or len(value) <= max_length) and _clean(value)


def _document(value: Any) -> tuple[bool, bool, bool]:
    """(acceptable, holds a float, holds a NUL) for a ``tls``/``http``/``details`` document."""
    floats = nul = False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > _MAX_DOCUMENT_DEPTH:
            return False, floats, nul
        if type(item) is dict:
            for key in item:
                if type(key) is not str or not _clean(key):
                    return False, floats, nul
                nul = nul or "\x00" in key
            children = item.values()
        else:
            children = item
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind is str:
                if not _clean(child):
                    return False, floats, nul
                nul = nul or "\x00" in child
            elif kind is float:
                if not math.isfinite(child):
                    return False, floats, nul
                floats = True
            elif kind not in _JSON_SCALARS:
                return False, floats, nul
    return True, floats, nul


def _service(value: Any) -> tuple[bool, ServiceIn | None]:
    if value is None:
        return True, None
    if type(value) is not dict or not value.keys() <= _SERVICE_KEYS:
        return False, None
    values: dict[str, Any] = {}
    for name in _SERVICE_FIELDS:
        text = value.get(name)
        if text is not None:
            if not _short(text, None if name == "banner" else MAX_STRING):
                return False, None
            text = escape_nul(text)
        values[name] = text
    return True, _built(ServiceIn, values, set(value))


def _moment(text: Any) -> datetime | None:
    if type(text) is not str or _TIMESTAMP.fullmatch(text) is None:
        return None
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _observation(
    raw: Any, moments: dict[Any, datetime], services: dict[Any, ServiceIn]
) -> tuple[ObservationIn | None, bool]:
    """(the validated observation or None when unsure, holds a float); ``moments`` and
    ``services`` remember the batch's timestamps and services (a batch repeats a few
    many times)."""
    if type(raw) is not dict or not raw.keys() <= _OBSERVATION_KEYS:
        return None, False
    observed_at, ip, port = raw.get("observed_at"), raw.get("ip"), raw.get("port")
    moment = moments.get(observed_at) if type(observed_at) is str else None
    if moment is None:
        moment = _moment(observed_at)
        if moment is None:
            return None, False
        moments[observed_at] = moment
    if type(ip) is not str:
        return None, False
    if CANONICAL_IPV4.fullmatch(ip) is None:
        if "%" in ip or not _clean(ip):
            return None, False
        try:
            ip = stored_ip(ip)
        except ValueError:
            return None, False
    if type(port) is not int or not 1 <= port <= 65535:
        return None, False
    transport = raw.get("transport", "tcp")
    state = raw.get("state", "open")
    if type(transport) is not str or transport not in _TRANSPORTS:
        return None, False
    if type(state) is not str or state not in _STATES:
        return None, False
    service_raw = raw.get("service")
    if service_raw is None:
        service = None
    else:
        # Services repeat across a batch's hosts; the models are frozen, so one serves all.
        key = tuple(service_raw.items()) if type(service_raw) is dict else None
        try:
            service = services.get(key) if key is not None else None
        except TypeError:  # an unhashable value: not a valid service anyway
            return None, False
        if service is None:
            ok, service = _service(service_raw)
            if not ok:
                return None, False
            if key is not None:
                services[key] = service
    hostname = raw.get("hostname")
    if hostname is not None:
        if not _short(hostname, 253):
            return None, False
        hostname = escape_nul(hostname)
    tags = raw.get("tags")
    if tags is None:
        if "tags" in raw:
            return None, False
        tags = []
    elif type(tags) is not list or not all(_short(tag, 256) for tag in tags):
        return None, False
    else:
        tags = list(tags)
    floats = False
    documents = []
    for name in ("tls", "http", "details"):
        document = raw.get(name)
        if document is not None:
            if type(document) is not dict:
                return None, False
            ok, has_float, has_nul = _document(document)
            if not ok:
                return None, False
            floats = floats or has_float
            if has_nul:  # else the decoded document is kept as it is: nothing to escape
                document = escape_nul_deep(document)
        documents.append(document)
    values = {
        "observed_at": moment,
        "ip": ip,
        "port": port,
        "transport": transport,
        "state": state,
        "service": service,
        "hostname": hostname,
        "tags": tags,
        "tls": documents[0],
        "http": documents[1],
        "details": documents[2],
    }
    return _built(ObservationIn, values, set(raw)), floats


def fast_upload(raw: dict[str, Any]) -> tuple[UploadBody, bool] | None:
    """(the body, whether it is free of floats) when surely valid, else None."""
    observations = raw.get("observations")
    if type(observations) is not list or not observations or raw.get("dns_records", []) != []:
        return None
    envelope = {key: value for key, value in raw.items() if key not in _LISTS}
    if check_json_values(envelope, allow_nul=True):
        return None
    try:
        head = UploadBody.model_validate(envelope)
    except PydanticValidationError:
        return None
    items = []
    float_free = True
    moments: dict[Any, datetime] = {}
    services: dict[Any, ServiceIn] = {}
    for item in observations:
        observation, floats = _observation(item, moments, services)
        if observation is None:
            return None
        items.append(observation)
        float_free = float_free and not floats
    values = dict(head.__dict__)
    values["observations"] = items
    given = set(head.model_fields_set) | {name for name in _LISTS if name in raw}
    return _built(UploadBody, values, given), float_free
