"""State of the simulated Elasticsearch cluster: indices, templates, scripts, faults.

Near-real-time like a cluster: writes go to ``live`` documents, searches read
the ``searchable`` view that ``_refresh`` copies from them. Bulk items are
applied one by one with the statuses and error bodies a cluster returns.
Delete by query, like a cluster's, finds its documents in the searchable view
and deletes each only if it is still the version that view holds (else a
version conflict: the request stops, or counts it and goes on with
``conflicts=proceed``).
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.search.documents import merge_endpoints
from app.search.encoding import endpoint_from_source, endpoint_source
from app.search.endpoint_facts import searchable_facts
from tests.support.es_query import (
    IndexMapping,
    MappingError,
    aggregate,
    as_list,
    first_key,
    from_sort_value,
    is_after,
    matches,
    missing_last,
    sort_field,
    sort_missing,
    sort_value,
)

DEFAULT_VERSION = "9.1.0"
MAX_INITIAL_LINE_LENGTH = 4096  # Elasticsearch's http.max_initial_line_length default

# -- faults -------------------------------------------------------------------------


@dataclass
class Fault:
    """One injected misbehaviour.

    ``endpoint`` selects requests by their last path segment (``_bulk``,
    ``_refresh``, ``_count``, ``_search``, or ``*``); ``nth`` is the first
    matching request affected, counted from injection (1 = the next one);
    ``times`` how many matching requests in a row.

    actions:
      ``status``         answer ``status`` with an Elasticsearch error body
      ``delay``          sleep ``seconds``, then do the work and answer (the work
                         happens even when the client timed out meanwhile)
      ``drop``           close the connection without an answer (after doing the
                         work when ``apply`` is true)
      ``shard_failure``  answer 200 with ``_shards.failed`` > 0 (refresh/count/search)
      ``item_status``    bulk items whose id is in ``item_ids`` (or every
                         ``every_nth_item``) fail with ``status``/``error_type``
                         (``times`` items in all)
      ``mangle_items``   answer a bulk request with its last item missing
    """

    action: str
    endpoint: str = "*"
    nth: int = 1
    times: int = 1
    status: int = 500
    seconds: float = 0.0
    apply: bool | None = None
    item_ids: frozenset[str] | None = None
    every_nth_item: int | None = None
    error_type: str | None = None
    seen: int = 0
    fired: int = 0

    def matches(self, endpoint: str) -> bool:
        return self.endpoint in ("*", endpoint)

    @property
    def exhausted(self) -> bool:
        return self.fired >= self.times

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        data = dict(data)
        if data.get("item_ids") is not None:
            data["item_ids"] = frozenset(data["item_ids"])
        allowed = {
            "action",
            "endpoint",
            "nth",
            "times",
            "status",
            "seconds",
            "apply",
            "item_ids",
            "every_nth_item",
            "error_type",
        }
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"unknown fault fields: {sorted(unknown)}")
        return cls(**data)


ERROR_TYPES = {
    400: "illegal_argument_exception",
    404: "index_not_found_exception",
    409: "version_conflict_engine_exception",
    429: "es_rejected_execution_exception",
    500: "internal_server_error",
    502: "bad_gateway",
    503: "unavailable_shards_exception",
    504: "gateway_timeout",
}


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    target: str
    line_bytes: int
    body_bytes: int
    endpoint: str
    status: int | None


# -- cluster state ----------------------------------------------------------------------


@dataclass
class StoredDocument:
    source: dict[str, Any]
    version: int
    seq_no: int


@dataclass
class SimulatedIndex:
    name: str
    mapping: IndexMapping
    settings: dict[str, Any]
    live: dict[str, StoredDocument] = field(default_factory=dict)
    searchable: dict[str, StoredDocument] = field(default_factory=dict)
    uuid: str = field(default_factory=lambda: uuid.uuid4().hex[:22])

    def refresh(self) -> None:
        self.searchable = dict(self.live)


class ApiFailure(Exception):
    def __init__(self, status: int, error_type: str, reason: str, **extra: Any):
        super().__init__(reason)
        self.status, self.error_type, self.reason, self.extra = status, error_type, reason, extra

    def body(self) -> dict[str, Any]:
        cause = {"type": self.error_type, "reason": self.reason, **self.extra}
        return {"error": {"root_cause": [cause], **cause}, "status": self.status}


def merge_endpoint_script(document_id: str, existing: dict[str, Any], params: dict[str, Any]):
    """The Python twin of the stored Painless merge script (``merge_endpoints``).

    An empty ``existing`` is a scripted upsert creating the document: it takes
    the incoming version as it is.
    """
    incoming = params["doc"]
    if not existing:
        return dict(incoming)
    merged = merge_endpoints(
        endpoint_from_source(document_id, existing), endpoint_from_source(document_id, incoming)
    )
    result = {**existing, **incoming}
    result.pop("observed", None)  # written only when not empty, as the script does
    result.update(endpoint_source(merged))
    # The typed facts go with the details documents they are read from (none are added
    # to a document written without them, as the script does).
    facts = searchable_facts(merged.details)
    if facts or "facts" in result:
        result["facts"] = facts
    return result


SCRIPT_IMPLEMENTATIONS: dict[str, Callable[[str, dict[str, Any], dict[str, Any]], dict]] = {
    "merge-endpoint": merge_endpoint_script,
}


class SimulatedCluster:
    """Indices, templates, scripts and faults; every method runs under one lock."""

    def __init__(self, version: str = DEFAULT_VERSION):
        self.version = version
        self.lock = threading.RLock()
        self.indices: dict[str, SimulatedIndex] = {}
        self.templates: dict[str, dict[str, Any]] = {}
        self.scripts: dict[str, dict[str, Any]] = {}
        self.faults: list[Fault] = []
        self.requests: list[RecordedRequest] = []
        self.max_initial_line_length = MAX_INITIAL_LINE_LENGTH
        self.in_flight: dict[str, int] = {}
        self.peak_in_flight: dict[str, int] = {}
        self._seq = itertools.count()
        self.cluster_uuid = uuid.uuid4().hex[:22]

    # faults ---------------------------------------------------------------------------

    def next_fault(self, endpoint: str) -> Fault | None:
        """The request-level fault (if any) for the next request to ``endpoint``."""
        with self.lock:
            chosen = None
            for fault in self.faults:
                if fault.action == "item_status" or not fault.matches(endpoint):
                    continue
                fault.seen += 1
                if chosen is None and fault.seen >= fault.nth and not fault.exhausted:
                    fault.fired += 1
                    chosen = fault
            self.faults = [f for f in self.faults if not f.exhausted]
            return chosen

    def item_fault(self, document_id: str, position: int) -> Fault | None:
        """The item fault for this bulk item; each fires for ``times`` items, then is gone."""
        for fault in self.faults:
            if fault.action != "item_status" or fault.exhausted:
                continue
            chosen = (fault.item_ids is not None and document_id in fault.item_ids) or (
                bool(fault.every_nth_item) and position % fault.every_nth_item == 0
            )
            if chosen:
                fault.fired += 1
                return fault
        return None

    # indices --------------------------------------------------------------------------

    def resolve(self, expression: str, *, ignore_unavailable: bool = False) -> list[SimulatedIndex]:
        found: dict[str, SimulatedIndex] = {}
        for part in expression.split(","):
            if not part:
                continue
            if part in ("_all", "*"):
                found.update(self.indices)
            elif "*" in part:
                found.update({n: i for n, i in self.indices.items() if fnmatch.fnmatch(n, part)})
            elif part in self.indices:
                found[part] = self.indices[part]
            elif not ignore_unavailable:
                raise ApiFailure(
                    404,
                    "index_not_found_exception",
                    f"no such index [{part}]",
                    index=part,
                    **{"resource.type": "index_or_alias", "resource.id": part},
                )
        return [found[n] for n in sorted(found)]

    def create_index(self, name: str, body: dict[str, Any] | None = None) -> SimulatedIndex:
        if name in self.indices:
            raise ApiFailure(
                400,
                "resource_already_exists_exception",
                f"index [{name}/{self.indices[name].uuid}] already exists",
                index=name,
            )
        if name != name.lower() or name.startswith(("_", "-", "+")) or not name:
            raise ApiFailure(400, "invalid_index_name_exception", f"Invalid index name [{name}]")
        mappings: dict[str, Any] = {}
        settings: dict[str, Any] = {}
        candidates = [
            t
            for t in self.templates.values()
            if any(fnmatch.fnmatch(name, p) for p in as_list(t.get("index_patterns")))
        ]
        if candidates:
            template = max(candidates, key=lambda t: t.get("priority", 0))
            mappings = json.loads(json.dumps(template.get("template", {}).get("mappings", {})))
            settings = dict(template.get("template", {}).get("settings", {}))
        if body:
            mappings.update(body.get("mappings") or {})
            settings.update(body.get("settings") or {})
        index = SimulatedIndex(name, IndexMapping.from_json(mappings), settings)
        self.indices[name] = index
        return index

    # bulk -----------------------------------------------------------------------------

    def bulk(self, body: bytes, default_index: str | None) -> dict[str, Any]:
        started = time.perf_counter()
        lines = [line for line in body.split(b"\n") if line.strip()]
        items: list[dict[str, Any]] = []
        position = 0
        cursor = 0
        with self.lock:
            while cursor < len(lines):
                try:
                    action_line = json.loads(lines[cursor])
                    ((action, meta),) = action_line.items()
                except (ValueError, AttributeError):
                    raise ApiFailure(
                        400, "illegal_argument_exception", "Malformed action/metadata line"
                    ) from None
                cursor += 1
                source = None
                if action != "delete":
                    if cursor >= len(lines):
                        raise ApiFailure(
                            400, "illegal_argument_exception", "The bulk request must be terminated"
                        )
                    source = json.loads(lines[cursor])
                    cursor += 1
                position += 1
                items.append(
                    {action: self._bulk_item(action, meta, source, default_index, position)}
                )
        took = int((time.perf_counter() - started) * 1000)
        errors = any("error" in next(iter(item.values())) for item in items)
        return {"errors": errors, "took": took, "items": items}

    def _bulk_item(
        self,
        action: str,
        meta: dict[str, Any],
        source: dict[str, Any] | None,
        default_index: str | None,
        position: int,
    ) -> dict[str, Any]:
        index_name = meta.get("_index") or default_index
        document_id = meta.get("_id") or uuid.uuid4().hex
        result: dict[str, Any] = {"_index": index_name, "_id": document_id}
        fault = self.item_fault(document_id, position)
        if fault is not None:
            status = fault.status
            error_type = fault.error_type or ERROR_TYPES.get(status, "exception")
            result.update(
                status=status,
                error={"type": error_type, "reason": f"injected failure for [{document_id}]"},
            )
            return result
        try:
            if index_name is None:
                raise ApiFailure(400, "action_request_validation_exception", "index is missing")
            index = self.indices.get(index_name) or self.create_index(index_name)
            result["_index"] = index.name
            existing = index.live.get(document_id)
            if action in ("index", "create"):
                if action == "create" and existing is not None:
                    raise ApiFailure(
                        409,
                        "version_conflict_engine_exception",
                        f"[{document_id}]: version conflict, document already exists "
                        f"(current version [{existing.version}])",
                    )
                new_source = source or {}
                index.mapping.check(new_source)
                outcome = "created" if existing is None else "updated"
            elif action == "update":
                new_source, outcome = self._update(index, document_id, existing, source or {})
            elif action == "delete":
                if existing is None:
                    result.update(_version=1, result="not_found", status=404)
                    return result
                del index.live[document_id]
                result.update(_version=existing.version + 1, result="deleted", status=200)
                return result
            else:
                raise ApiFailure(400, "illegal_argument_exception", f"Unknown action [{action}]")
        except MappingError as exc:
            result.update(status=400, error={"type": exc.error_type, "reason": exc.reason})
            return result
        except ApiFailure as exc:
            result.update(status=exc.status, error={"type": exc.error_type, "reason": exc.reason})
            return result
        version = (existing.version if existing else 0) + (outcome != "noop")
        if outcome != "noop":
            index.live[document_id] = StoredDocument(new_source, version, next(self._seq))
        stored = index.live[document_id]
        result.update(
            _version=version,
            result=outcome,
            _shards={"total": 2, "successful": 1, "failed": 0},
            _seq_no=stored.seq_no,
            _primary_term=1,
            status=201 if outcome == "created" else 200,
        )
        return result

    def _update(
        self,
        index: SimulatedIndex,
        document_id: str,
        existing: StoredDocument | None,
        body: dict[str, Any],
    ) -> tuple[dict[str, Any], str]:
        if existing is None:
            if "upsert" in body and body.get("scripted_upsert") and "script" in body:
                # The script runs on the upsert document, as on a cluster.
                new_source = self._run_script(document_id, dict(body["upsert"]), body["script"])
            elif "upsert" in body:
                new_source = body["upsert"]
            elif body.get("doc_as_upsert") and "doc" in body:
                new_source = body["doc"]
            else:
                raise ApiFailure(
                    404, "document_missing_exception", f"[{document_id}]: document missing"
                )
            index.mapping.check(new_source)
            return new_source, "created"
        if "script" in body:
            new_source = self._run_script(document_id, existing.source, body["script"])
        elif "doc" in body:
            new_source = {**existing.source, **body["doc"]}
        else:
            raise ApiFailure(400, "action_request_validation_exception", "script or doc is missing")
        index.mapping.check(new_source)
        return new_source, ("noop" if new_source == existing.source else "updated")

    def _run_script(
        self, document_id: str, source: dict[str, Any], script: dict[str, Any]
    ) -> dict[str, Any]:
        script_id = script.get("id")
        if script_id is None:
            raise ApiFailure(400, "illegal_argument_exception", "inline scripts are not simulated")
        if script_id not in self.scripts:
            raise ApiFailure(
                400,
                "resource_not_found_exception",
                f"unable to find script [{script_id}] in cluster state",
            )
        implementation = next(
            (f for suffix, f in SCRIPT_IMPLEMENTATIONS.items() if script_id.endswith(suffix)),
            None,
        )
        if implementation is None:
            raise ApiFailure(400, "illegal_argument_exception", f"script [{script_id}] unknown")
        return implementation(document_id, source, script.get("params") or {})

    # delete by query ----------------------------------------------------------------------

    def delete_by_query(
        self, indices: list[SimulatedIndex], body: dict[str, Any], params: dict[str, str]
    ) -> tuple[int, dict[str, Any]]:
        """``POST /<index>/_delete_by_query`` run to completion (``wait_for_completion``):
        the status and the response a cluster gives, with its honest counts."""
        started = time.perf_counter()
        conflicts = params.get("conflicts", "abort")
        if conflicts not in ("abort", "proceed"):
            raise ApiFailure(
                400,
                "illegal_argument_exception",
                f'conflicts may only be "proceed" or "abort" but was [{conflicts}]',
            )
        if params.get("wait_for_completion", "true") != "true":
            raise ApiFailure(
                400, "illegal_argument_exception", "background tasks are not simulated"
            )
        if params.get("slices", "1") != "1" or "slice" in body:
            raise ApiFailure(400, "illegal_argument_exception", "sliced requests are not simulated")
        max_docs = _max_docs(params.get("max_docs"), body.get("max_docs"))
        scroll_size = int(params.get("scroll_size", 1000))
        query = body.get("query")
        deleted = version_conflicts = total = 0
        failures: list[dict[str, Any]] = []
        with self.lock:
            for index in indices:
                for document_id, seen in list(index.searchable.items()):
                    if max_docs is not None and deleted >= max_docs:
                        break
                    if failures or not matches(query, seen.source, index.mapping, document_id):
                        continue
                    total += 1
                    current = index.live.get(document_id)
                    if current is None or current.seq_no != seen.seq_no:
                        # Changed or deleted since the searchable view was made.
                        version_conflicts += 1
                        if conflicts == "abort":
                            failures.append(_conflict(index, document_id, seen, current))
                        continue
                    del index.live[document_id]
                    deleted += 1
            if params.get("refresh") == "true":
                for index in indices:
                    index.refresh()
        answer = {
            "took": int((time.perf_counter() - started) * 1000),
            "timed_out": False,
            "total": total,
            "deleted": deleted,
            "batches": math.ceil(total / scroll_size),
            "version_conflicts": version_conflicts,
            "noops": 0,
            "retries": {"bulk": 0, "search": 0},
            "throttled_millis": 0,
            "requests_per_second": -1.0,
            "throttled_until_millis": 0,
            "failures": failures,
        }
        return (409 if failures else 200), answer

    # search ---------------------------------------------------------------------------

    def search(self, indices: list[SimulatedIndex], body: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        query = body.get("query")
        # ``timeout``: collection stops once it has run that long, and the answer says
        # ``timed_out`` with what was collected by then (a real shard checks its clock
        # as it collects; here one shard, checked after each document).
        time_limit = _time_value(body.get("timeout"))
        timed_out = False
        hits: list[tuple[SimulatedIndex, str, dict[str, Any]]] = []
        with self.lock:
            for index in indices:
                for document_id, stored in index.searchable.items():
                    if time_limit is not None and time.perf_counter() - started > time_limit:
                        timed_out = True
                        break
                    if matches(query, stored.source, index.mapping, document_id):
                        hits.append((index, document_id, stored.source))
        mapping = indices[0].mapping if indices else IndexMapping()
        sort_spec = [sort_field(s) for s in as_list(body.get("sort"))]
        missing = [sort_missing(s) for s in as_list(body.get("sort"))]
        for (name, order), absent in reversed(list(zip(sort_spec, missing, strict=True))):
            kind = mapping.kind(name)
            hits.sort(
                key=lambda h, n=name, k=kind, m=absent, o=order: missing_last(
                    first_key(k, h[2], n, m), o
                ),
                reverse=(order == "desc"),
            )
        after = body.get("search_after")
        if after is not None:
            keys = [
                from_sort_value(mapping.kind(name), value)
                for (name, _order), value in zip(sort_spec, after, strict=True)
            ]
            hits = [h for h in hits if is_after(h[2], sort_spec, keys, mapping, missing)]
        terminate_after = int(body.get("terminate_after") or 0)
        terminated = bool(terminate_after) and len(hits) > terminate_after
        if terminated:
            # Collection stops after this many documents (one shard here): hits, totals
            # and aggregations see only those.
            hits = hits[:terminate_after]
        size = int(body.get("size", 10))
        response: dict[str, Any] = {
            "took": int((time.perf_counter() - started) * 1000),
            "timed_out": timed_out,
            "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": {"max_score": None, "hits": []},
        }
        if terminate_after:
            response["terminated_early"] = terminated
        track = body.get("track_total_hits", 10_000)
        total = len(hits)
        if track is True:
            response["hits"]["total"] = {"value": total, "relation": "eq"}
        elif track is not False:
            cap = int(track)
            response["hits"]["total"] = (
                {"value": total, "relation": "eq"}
                if total <= cap
                else {"value": cap, "relation": "gte"}
            )
        wanted = _source_filter(body.get("_source", True))
        for index, document_id, source in hits[:size]:
            hit: dict[str, Any] = {"_index": index.name, "_id": document_id, "_score": None}
            if wanted is not False:
                hit["_source"] = (
                    source if wanted is True else {k: v for k, v in source.items() if k in wanted}
                )
            if sort_spec:
                hit["sort"] = [
                    sort_value(mapping.kind(n), first_key(mapping.kind(n), source, n, m))
                    for (n, _o), m in zip(sort_spec, missing, strict=True)
                ]
            response["hits"]["hits"].append(hit)
        aggs = body.get("aggs") or body.get("aggregations")
        if aggs:
            response["aggregations"] = {
                name: aggregate(spec, [h[2] for h in hits], mapping) for name, spec in aggs.items()
            }
        return response


_TIME_UNITS = {"nanos": 1e-9, "micros": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _time_value(value: Any) -> float | None:
    """A search's ``timeout`` (``"300ms"``, ``"2s"``) in seconds; absent or -1: none."""
    if value is None or value in (-1, "-1"):
        return None
    text = str(value)
    for unit in sorted(_TIME_UNITS, key=len, reverse=True):
        number = text.removesuffix(unit)
        if number != text and number.isdigit():
            return int(number) * _TIME_UNITS[unit]
    raise ApiFailure(
        400, "parse_exception", f"failed to parse setting [timeout] with value [{text}]"
    )


def _source_filter(value: Any) -> bool | frozenset[str]:
    """``_source`` of a search: true/false, or the top-level fields to return."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return frozenset([value])
    if isinstance(value, list) and all(isinstance(v, str) and "*" not in v for v in value):
        return frozenset(value)
    raise ApiFailure(400, "illegal_argument_exception", f"_source [{value!r}] is not simulated")


def _max_docs(in_params: str | None, in_body: Any) -> int | None:
    """``max_docs`` from the URL or the body (one value); -1 or absent: every match."""
    values = {int(v) for v in (in_params, in_body) if v is not None}
    if len(values) > 1:
        raise ApiFailure(
            400, "illegal_argument_exception", "[max_docs] set to two different values"
        )
    if not values:
        return None
    (value,) = values
    if value == -1:
        return None
    if value <= 0:
        raise ApiFailure(
            400, "action_request_validation_exception", "maxDocs should be greater than 0"
        )
    return value


def _conflict(
    index: SimulatedIndex, document_id: str, seen: StoredDocument, current: StoredDocument | None
) -> dict[str, Any]:
    now = "the document is deleted" if current is None else f"current seqNo [{current.seq_no}]"
    return {
        "index": index.name,
        "id": document_id,
        "cause": {
            "type": "version_conflict_engine_exception",
            "reason": f"[{document_id}]: version conflict, required seqNo [{seen.seq_no}], "
            f"primary term [1]. {now}",
            "index_uuid": index.uuid,
            "shard": "0",
            "index": index.name,
        },
        "status": 409,
    }
