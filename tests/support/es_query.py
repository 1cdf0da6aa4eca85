"""The query, sort, aggregation and mapping subset of the Elasticsearch simulator.

Field values are compared by their mapped type, as Elasticsearch does: ``ip``
in its binary order (IPv4 as IPv4-mapped IPv6), dates as instants
(``date_nanos`` sort values are epoch nanoseconds), numbers as numbers.
``IndexMapping.check`` rejects what a cluster would reject at index time
(bad IPs, out-of-range integers, unparsable dates, unknown fields under
``dynamic: strict``).
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# -- field types and values -----------------------------------------------------------


def _ip_sort_key(value: str) -> bytes:
    address = ipaddress.ip_address(value)
    if address.version == 4:
        address = ipaddress.IPv6Address(b"\x00" * 10 + b"\xff\xff" + address.packed)
    return address.packed


def _ip_text(key: bytes) -> str:
    address = ipaddress.IPv6Address(key)
    mapped = address.ipv4_mapped
    return str(mapped if mapped is not None else address)


def _parse_date(value: Any) -> datetime:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC)
    moment = datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class MappingError(Exception):
    def __init__(self, error_type: str, reason: str):
        super().__init__(reason)
        self.error_type, self.reason = error_type, reason


@dataclass
class IndexMapping:
    """Field types by dotted path, plus which objects are strict or disabled."""

    types: dict[str, str] = field(default_factory=dict)
    strict: set[str] = field(default_factory=set)  # object paths with dynamic: strict ("" = root)
    disabled: set[str] = field(default_factory=set)  # objects stored but not indexed
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, mappings: dict[str, Any]) -> IndexMapping:
        mapping = cls(raw=mappings)
        mapping._walk(mappings, "")
        return mapping

    def _walk(self, node: dict[str, Any], path: str, strict: bool = False) -> None:
        # Sub-objects inherit "dynamic" unless they set their own.
        if "dynamic" in node:
            strict = node["dynamic"] == "strict"
        if strict:
            self.strict.add(path)
        if node.get("enabled") is False:
            self.disabled.add(path)
            return
        for name, child in (node.get("properties") or {}).items():
            child_path = f"{path}.{name}" if path else name
            kind = child.get("type", "object" if "properties" in child else None)
            if kind in (None, "object", "nested"):
                self._walk(child, child_path, strict)
            else:
                self.types[child_path] = kind

    def check(self, source: dict[str, Any]) -> None:
        self._check_object(source, "")

    def _check_object(self, value: dict[str, Any], path: str) -> None:
        if path in self.disabled:
            return
        for name, item in value.items():
            child = f"{path}.{name}" if path else name
            if child in self.types:
                for single in item if isinstance(item, list) else [item]:
                    self._check_value(child, single)
            elif isinstance(item, dict) and (child in self.disabled or self._has_children(child)):
                self._check_object(item, child)
            elif path in self.strict:
                raise MappingError(
                    "strict_dynamic_mapping_exception",
                    f"[1:1] mapping set to strict, dynamic introduction of [{name}] "
                    f"within [{path or '_doc'}] is not allowed",
                )
            elif isinstance(item, dict):
                self._check_object(item, child)

    def _has_children(self, path: str) -> bool:
        prefix = path + "."
        return any(t.startswith(prefix) for t in self.types)

    def _check_value(self, path: str, value: Any) -> None:
        if value is None:
            return
        kind = self.types[path]
        try:
            if kind == "ip":
                ipaddress.ip_address(value)
            elif kind in ("long", "integer", "short", "byte"):
                limit = {"integer": 2**31, "short": 2**15, "byte": 2**7, "long": 2**63}[kind]
                if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                    raise ValueError(f"[{value}] is not an integer")
                number = int(value)
                if not -limit <= number < limit:
                    raise ValueError(f"value [{value}] is out of range for an {kind}")
            elif kind in ("date", "date_nanos"):
                _parse_date(value)
            elif kind == "boolean" and not isinstance(value, bool):
                raise ValueError("not a boolean")
        except (ValueError, TypeError) as exc:
            raise MappingError(
                "document_parsing_exception",
                f"[1:1] failed to parse field [{path}] of type [{kind}]: {exc}",
            ) from None

    def kind(self, path: str) -> str:
        return self.types.get(path, "keyword")


def field_values(source: dict[str, Any], path: str) -> list[Any]:
    node: Any = source
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return []
        node = node[part]
    if node is None:
        return []
    return list(node) if isinstance(node, list) else [node]


def comparable(kind: str, value: Any) -> Any:
    if kind == "ip":
        return _ip_sort_key(str(value))
    if kind in ("date", "date_nanos"):
        return _parse_date(value)
    if kind in ("long", "integer", "short", "byte", "double", "float", "scaled_float"):
        return float(value) if kind in ("double", "float") else int(value)
    return str(value) if not isinstance(value, bool) else value


def sort_value(kind: str, key: Any) -> Any:
    """What Elasticsearch returns in ``sort``/``after_key`` for a field value."""
    if kind == "ip":
        return _ip_text(key)
    if kind == "date":
        return int(key.timestamp() * 1000)
    if kind == "date_nanos":
        return int(key.timestamp()) * 1_000_000_000 + key.microsecond * 1000
    return key


def from_sort_value(kind: str, value: Any) -> Any:
    if kind == "date_nanos" and isinstance(value, int):
        return datetime.fromtimestamp(value // 1_000_000_000, UTC).replace(
            microsecond=value % 1_000_000_000 // 1000
        )
    return comparable(kind, value)


def _wildcard_regex(pattern: str, case_insensitive: bool) -> re.Pattern[str]:
    out, escaped = [], False
    for ch in pattern:
        if escaped:
            out.append(re.escape(ch))
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out) + r"\Z", re.DOTALL | (re.IGNORECASE if case_insensitive else 0))


class QueryError(Exception):
    pass


def _field_and_spec(body: dict[str, Any], value_key: str) -> tuple[str, dict[str, Any]]:
    ((name, spec),) = body.items()
    if not isinstance(spec, dict):
        spec = {value_key: spec}
    return name, spec


def matches(
    query: dict[str, Any] | None,
    source: dict[str, Any],
    mapping: IndexMapping,
    document_id: str | None = None,
) -> bool:
    """Whether ``source`` (the document ``document_id``) matches the query (the subset of
    the DSL netmap uses)."""
    if not query:
        return True
    ((kind, body),) = query.items()
    if kind == "match_all":
        return True
    if kind == "match_none":
        return False
    if kind == "bool":
        for clause in ("filter", "must"):
            for sub in as_list(body.get(clause)):
                if not matches(sub, source, mapping, document_id):
                    return False
        for sub in as_list(body.get("must_not")):
            if matches(sub, source, mapping, document_id):
                return False
        should = as_list(body.get("should"))
        if should:
            default = 0 if (body.get("filter") or body.get("must")) else 1
            needed = int(body.get("minimum_should_match", default))
            if sum(matches(sub, source, mapping, document_id) for sub in should) < needed:
                return False
        return True
    if kind == "term":
        name, spec = _field_and_spec(body, "value")
        return _term(mapping.kind(name), field_values(source, name), spec["value"], spec)
    if kind == "terms":
        ((name, wanted),) = body.items()
        field_kind = mapping.kind(name)
        exact, others = _terms_lookup(field_kind, wanted)
        values = field_values(source, name)
        if any(comparable(field_kind, v) in exact for v in values):
            return True
        return any(_term(field_kind, values, w, {}) for w in others)
    if kind == "range":
        name, spec = _field_and_spec(body, "gte")
        field_kind = mapping.kind(name)
        for value in field_values(source, name):
            current = comparable(field_kind, value)
            ok = True
            for op, bound in spec.items():
                if op not in ("gt", "gte", "lt", "lte"):
                    continue
                limit = comparable(field_kind, bound)
                ok = (
                    ok
                    and {
                        "gt": current > limit,
                        "gte": current >= limit,
                        "lt": current < limit,
                        "lte": current <= limit,
                    }[op]
                )
            if ok:
                return True
        return False
    if kind == "wildcard":
        name, spec = _field_and_spec(body, "value")
        regex = _wildcard_regex(spec["value"], bool(spec.get("case_insensitive")))
        return any(regex.match(str(v)) for v in field_values(source, name))
    if kind == "exists":
        return bool(field_values(source, body["field"]))
    if kind == "ids":
        if document_id is None:
            raise QueryError("an ids query needs the document's id")
        return document_id in as_list(body.get("values"))
    raise QueryError(f"unsupported query [{kind}]")


# A query is matched against every document of an index: a ``terms`` list is turned into
# a set once per request (the list object is the key; kept so its id is not reused).
_TERMS_CACHE: dict[tuple[int, str], tuple[list[Any], frozenset[Any], list[Any]]] = {}


def _terms_lookup(field_kind: str, wanted: list[Any]) -> tuple[frozenset[Any], list[Any]]:
    """The set of exact values of a ``terms`` list, and the rest (CIDR blocks)."""
    key = (id(wanted), field_kind)
    cached = _TERMS_CACHE.get(key)
    if cached is not None and cached[0] is wanted:
        return cached[1], cached[2]
    others = [w for w in wanted if field_kind == "ip" and isinstance(w, str) and "/" in w]
    exact = frozenset(comparable(field_kind, w) for w in wanted if w not in others)
    if len(_TERMS_CACHE) > 256:
        _TERMS_CACHE.clear()
    _TERMS_CACHE[key] = (wanted, exact, others)
    return exact, others


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _term(field_kind: str, values: list[Any], wanted: Any, spec: dict[str, Any]) -> bool:
    if field_kind == "ip":
        if isinstance(wanted, str) and "/" in wanted:
            network = ipaddress.ip_network(wanted, strict=False)
            return any(_ip_in(v, network) for v in values)
        key = _ip_sort_key(str(wanted))
        return any(_ip_sort_key(str(v)) == key for v in values)
    if spec.get("case_insensitive"):
        return any(str(v).lower() == str(wanted).lower() for v in values)
    target = comparable(field_kind, wanted)
    return any(comparable(field_kind, v) == target for v in values)


def _ip_in(value: Any, network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    address = ipaddress.ip_address(str(value))
    if address.version == 6 and address.ipv4_mapped is not None and network.version == 4:
        address = address.ipv4_mapped
    return address.version == network.version and address in network


def sort_field(spec: Any) -> tuple[str, str]:
    if isinstance(spec, str):
        return spec, "asc"
    ((name, order),) = spec.items()
    if isinstance(order, dict):
        order = order.get("order", "asc")
    return name, order


def sort_missing(spec: Any) -> Any:
    """A sort's custom ``missing`` value (``None``: missing values sort last)."""
    if isinstance(spec, dict):
        ((_name, order),) = spec.items()
        if isinstance(order, dict) and order.get("missing") not in (None, "_last", "_first"):
            return order["missing"]
    return None


def first_key(kind: str, source: dict[str, Any], name: str, missing: Any = None) -> Any:
    """The value a document sorts by; a custom ``missing`` value stands in for an absent
    field (and is what the hit's ``sort`` then shows, as in Elasticsearch)."""
    values = field_values(source, name)
    if not values and missing is not None:
        values = [missing]
    return comparable(kind, values[0]) if values else None


def missing_last(key: Any, order: str) -> tuple[int, Any]:
    if key is None:
        return (1, 0) if order == "asc" else (-1, 0)
    return (0, key)


def is_after(
    source: dict[str, Any],
    spec: list[tuple[str, str]],
    keys: list[Any],
    mapping: IndexMapping,
    missing: list[Any] | None = None,
) -> bool:
    missing = missing or [None] * len(spec)
    for (name, order), key, absent in zip(spec, keys, missing, strict=True):
        value = first_key(mapping.kind(name), source, name, absent)
        if value == key:
            continue
        if value is None:
            return True
        return value > key if order == "asc" else value < key
    return False


def aggregate(spec: dict[str, Any], sources: list[dict[str, Any]], mapping: IndexMapping):
    if "composite" in spec:
        body = spec["composite"]
        names, fields, hourly = [], [], []
        for source_spec in body["sources"]:
            ((name, definition),) = source_spec.items()
            names.append(name)
            if "date_histogram" in definition:
                histogram = definition["date_histogram"]
                interval = histogram.get("calendar_interval", histogram.get("fixed_interval"))
                if interval not in ("1h", "hour", "60m"):
                    raise QueryError(f"unsupported date_histogram interval {interval!r}")
                fields.append(histogram["field"])
                hourly.append(True)
            else:
                fields.append(definition["terms"]["field"])
                hourly.append(False)
        kinds = [mapping.kind(f) for f in fields]

        def bucket_values(kind: str, field: str, hour: bool, source: dict[str, Any]) -> list:
            values = [comparable(kind, v) for v in field_values(source, field)]
            if hour:  # the bucket's start: the hour, in UTC (keys are epoch milliseconds)
                values = [v.replace(minute=0, second=0, microsecond=0) for v in values]
            return values

        def key_value(kind: str, hour: bool, value: Any) -> Any:
            return int(value.timestamp() * 1000) if hour else sort_value(kind, value)

        def after_value(kind: str, hour: bool, value: Any) -> Any:
            return (
                datetime.fromtimestamp(value / 1000, UTC) if hour else from_sort_value(kind, value)
            )

        counts: dict[tuple[Any, ...], int] = {}
        for source in sources:
            for combo in itertools.product(
                *[
                    bucket_values(k, f, h, source)
                    for k, f, h in zip(kinds, fields, hourly, strict=True)
                ]
            ):
                counts[combo] = counts.get(combo, 0) + 1
        keys = sorted(counts)
        after = body.get("after")
        if after:
            start = tuple(
                after_value(k, h, after[n]) for k, h, n in zip(kinds, hourly, names, strict=True)
            )
            keys = [k for k in keys if k > start]
        page = keys[: int(body.get("size", 10))]
        buckets = [
            {
                "key": {
                    n: key_value(k, h, v)
                    for n, k, h, v in zip(names, kinds, hourly, combo, strict=True)
                },
                "doc_count": counts[combo],
            }
            for combo in page
        ]
        result: dict[str, Any] = {"buckets": buckets}
        if buckets:
            result["after_key"] = buckets[-1]["key"]
        return result
    if "terms" in spec:
        body = spec["terms"]
        kind = mapping.kind(body["field"])
        counts = {}
        for source in sources:
            for value in {comparable(kind, v) for v in field_values(source, body["field"])}:
                counts[value] = counts.get(value, 0) + 1
        ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        size = int(body.get("size", 10))
        return {
            "doc_count_error_upper_bound": 0,
            "sum_other_doc_count": sum(c for _v, c in ordered[size:]),
            "buckets": [{"key": sort_value(kind, v), "doc_count": c} for v, c in ordered[:size]],
        }
    if "value_count" in spec:
        name = spec["value_count"]["field"]
        return {"value": sum(len(field_values(s, name)) for s in sources)}
    raise QueryError(f"unsupported aggregation {sorted(spec)}")
