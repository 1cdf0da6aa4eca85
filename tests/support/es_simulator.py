"""An Elasticsearch protocol simulator: a real HTTP server speaking the REST subset netmap uses.

It is the Elasticsearch edge in tests (STO-2) and a stand-in cluster for
benchmarks and manual trials (``python -m tests.support.es_simulator --port N``).
It answers the official client with the response shapes and headers it expects
(``X-Elastic-Product: Elasticsearch``, compatible-with content types) for:

* ``GET /`` (cluster info with a version), ``GET /_cluster/health``;
* stored scripts (``PUT/GET /_scripts/<id>``) and index templates
  (``PUT /_index_template/<name>``), index creation/existence/deletion;
* ``POST /_bulk`` with ``index``, ``create``, ``update`` (stored script with
  ``upsert``, or ``doc``/``doc_as_upsert``) and ``delete``; documents are checked
  against the index mapping (``ip``, numbers, dates, ``dynamic: strict``);
* ``_refresh`` (near-real-time: searches see only refreshed documents),
  ``_count``, ``_search`` with ``bool``/``term``/``terms``/``range``/``wildcard``
  queries, sorting with ``search_after``, ``track_total_hits``, ``_source`` field
  lists, and ``terms`` and ``composite`` aggregations (``terms`` and hourly
  ``date_histogram`` sources);
* ``POST /<index>/_delete_by_query`` run to completion: ``max_docs`` (URL or body),
  ``conflicts`` (``abort``: 409 with the conflict in ``failures``; ``proceed``:
  counted in ``version_conflicts``), ``refresh``, ``scroll_size`` (``batches``);
  sliced and background requests are refused as not simulated.

Stored scripts are not interpreted: a script whose id ends in
``merge-endpoint`` runs ``app.search.documents.merge_endpoints`` (the rule the
Painless script implements), so the simulator checks the adapter's protocol,
while the Painless text itself is exercised against a real cluster when
``NETMAP_TEST_ES_URL`` is set.

Fault injection (``inject(Fault(...))`` in process, ``POST /_simulator/faults``
standalone): a status (429, 5xx) on the nth matching request, per-item bulk
failures, delays longer than the client timeout (by default the request is
still applied, as a real cluster finishes work the client gave up on), dropped
connections, and refresh/count/search shard failures. ``requests`` records
every request line and body size so tests can check what was actually sent.

This module is the HTTP face; the cluster state lives in ``es_cluster`` and
the query/aggregation/mapping subset in ``es_query``.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.es_cluster import (
    DEFAULT_VERSION,
    ERROR_TYPES,
    ApiFailure,
    Fault,
    RecordedRequest,
    SimulatedCluster,
)
from tests.support.es_query import IndexMapping, QueryError

__all__ = ["EsSimulator", "Fault", "RecordedRequest", "SimulatedCluster", "main"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes; without TCP_NODELAY, Nagle's algorithm and
    # delayed ACKs add ~40 ms to every keep-alive request.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the request log is in ``cluster.requests``."""

    def _dispatch(self) -> None:
        cluster = self.server.cluster
        line_bytes = len(self.requestline.encode("latin-1"))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parsed = urllib.parse.urlsplit(self._proxied_path())
        segments = [urllib.parse.unquote(s) for s in parsed.path.split("/") if s]
        params = dict(urllib.parse.parse_qsl(parsed.query))
        endpoint = segments[-1] if segments and segments[-1].startswith("_") else "*index*"
        record = {
            "method": self.command,
            "target": self.path,
            "line_bytes": line_bytes,
            "body_bytes": len(body),
            "endpoint": endpoint,
        }
        if line_bytes > cluster.max_initial_line_length:
            self._record(record, 400)
            self._send(
                400,
                ApiFailure(
                    400,
                    "too_long_http_line_exception",
                    f"An HTTP line is larger than {cluster.max_initial_line_length} bytes.",
                ).body(),
            )
            return
        refused = self._refuse_compatibility(cluster.version)
        if refused is not None:
            self._record(record, 400)
            self._send(400, refused.body())
            return
        fault = None if segments[:1] == ["_simulator"] else cluster.next_fault(endpoint)
        with cluster.lock:
            cluster.in_flight[endpoint] = cluster.in_flight.get(endpoint, 0) + 1
            peak = max(cluster.peak_in_flight.get(endpoint, 0), cluster.in_flight[endpoint])
            cluster.peak_in_flight[endpoint] = peak
        try:
            outcome = self._answer(fault, segments, params, body)
        finally:
            with cluster.lock:
                cluster.in_flight[endpoint] -= 1
        if outcome is None:
            self._record(record, None)
            self._drop()
            return
        status, payload = outcome
        self._record(record, status)
        self._send(status, payload)

    def _proxied_path(self) -> str:
        """The path as the cluster sees it: a proxy in front strips ``base_path`` (``/es``).

        The request line recorded (and limited) is still the one the client sent.
        """
        base = self.server.base_path
        if base and (self.path == base or self.path.startswith((base + "/", base + "?"))):
            return self.path[len(base) :] or "/"
        return self.path

    def _refuse_compatibility(self, version: str) -> ApiFailure | None:
        """Like a cluster: ``compatible-with`` must name this major or the one before."""
        major = int(version.split(".")[0])
        for header in ("Accept", "Content-Type"):
            found = re.search(r"compatible-with=(\d+)", self.headers.get(header, ""))
            if found and int(found.group(1)) not in (major, major - 1):
                return ApiFailure(
                    400,
                    "media_type_header_exception",
                    f"Invalid media-type value on headers [{header}]: {header} version must be "
                    f"either version {major} or {major - 1}, but found {found.group(1)}",
                )
        return None

    def _answer(
        self, fault: Fault | None, segments: list[str], params: dict[str, str], body: bytes
    ) -> tuple[int, Any] | None:
        """The status and body to send, or ``None`` to drop the connection."""
        action = fault.action if fault is not None else None
        if fault is not None and action == "status":
            error_type = fault.error_type or ERROR_TYPES.get(fault.status, "exception")
            return fault.status, ApiFailure(fault.status, error_type, "injected failure").body()
        if fault is not None and action == "drop" and not fault.apply:
            return None
        if fault is not None and action == "delay":
            # A slow cluster: the work happens late, even if the client gave up meanwhile.
            time.sleep(fault.seconds)
        try:
            status, payload = self._route(segments, params, body)
        except ApiFailure as exc:
            return exc.status, exc.body()
        except (QueryError, ValueError, KeyError, TypeError) as exc:
            failure = ApiFailure(400, "parsing_exception", f"{type(exc).__name__}: {exc}")
            return 400, failure.body()
        if action == "drop":
            return None
        if action == "shard_failure" and status == 200:
            payload = _with_shard_failure(payload)
        if action == "mangle_items" and status == 200:
            payload = {**payload, "items": payload["items"][:-1]}
        return status, payload

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _dispatch

    def _record(self, record: dict[str, Any], status: int | None) -> None:
        with self.server.cluster.lock:
            self.server.cluster.requests.append(RecordedRequest(status=status, **record))

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send(self, status: int, payload: Any) -> None:
        accept = self.headers.get("Accept", "")
        compatible = re.search(r"compatible-with=(\d+)", accept)
        content_type = (
            f"application/vnd.elasticsearch+json;compatible-with={compatible.group(1)}"
            if compatible
            else "application/json"
        )
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("X-Elastic-Product", "Elasticsearch")
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _json(self, body: bytes) -> dict[str, Any]:
        if not body:
            return {}
        try:
            value = json.loads(body)
        except ValueError:
            raise ApiFailure(400, "parsing_exception", "request body is not JSON") from None
        if not isinstance(value, dict):
            raise ApiFailure(400, "parsing_exception", "request body must be an object")
        return value

    def _route(self, segments: list[str], params: dict[str, str], body: bytes) -> tuple[int, Any]:
        cluster = self.server.cluster
        method = self.command
        if not segments:
            return 200, {
                "name": "netmap-es-simulator",
                "cluster_name": "netmap-es-simulator",
                "cluster_uuid": cluster.cluster_uuid,
                "version": {
                    "number": cluster.version,
                    "build_flavor": "default",
                    "build_type": "simulator",
                    "lucene_version": "10.0.0",
                    "minimum_wire_compatibility_version": "8.18.0",
                    "minimum_index_compatibility_version": "8.0.0",
                },
                "tagline": "You Know, for Search",
            }
        head = segments[0]
        if head == "_simulator":
            return self._control(segments[1:], body)
        if head == "_cluster" and segments[1:] == ["health"]:
            return 200, {"cluster_name": "netmap-es-simulator", "status": "green"}
        if head == "_scripts" and len(segments) == 2:
            with cluster.lock:
                if method == "PUT" or method == "POST":
                    script = self._json(body).get("script")
                    if not isinstance(script, dict) or "source" not in script:
                        raise ApiFailure(400, "illegal_argument_exception", "must specify a script")
                    cluster.scripts[segments[1]] = script
                    return 200, {"acknowledged": True}
                if segments[1] not in cluster.scripts:
                    return 404, {"_id": segments[1], "found": False}
                return 200, {
                    "_id": segments[1],
                    "found": True,
                    "script": cluster.scripts[segments[1]],
                }
        if head == "_index_template" and len(segments) == 2:
            with cluster.lock:
                if method in ("PUT", "POST"):
                    template = self._json(body)
                    if not template.get("index_patterns"):
                        raise ApiFailure(
                            400, "action_request_validation_exception", "index_patterns is missing"
                        )
                    cluster.templates[segments[1]] = template
                    return 200, {"acknowledged": True}
                if segments[1] not in cluster.templates:
                    raise ApiFailure(
                        404,
                        "resource_not_found_exception",
                        f"index template matching [{segments[1]}] not found",
                    )
                return 200, {
                    "index_templates": [
                        {"name": segments[1], "index_template": cluster.templates[segments[1]]}
                    ]
                }
        if head == "_bulk":
            return 200, cluster.bulk(body, None)
        if len(segments) >= 2 and segments[-1] == "_bulk":
            return 200, cluster.bulk(body, segments[0])
        ignore = params.get("ignore_unavailable") == "true"
        if (
            len(segments) == 1
            and head.startswith("_")
            and head in ("_refresh", "_count", "_search")
        ):
            segments = ["_all", head]
        if len(segments) == 2 and segments[1] == "_refresh":
            with cluster.lock:
                indices = cluster.resolve(segments[0], ignore_unavailable=ignore)
                for index in indices:
                    index.refresh()
            total = len(indices)
            return 200, {"_shards": {"total": total * 2, "successful": total, "failed": 0}}
        if len(segments) == 2 and segments[1] in ("_count", "_search"):
            with cluster.lock:
                indices = cluster.resolve(segments[0], ignore_unavailable=ignore)
            request = self._json(body)
            if segments[1] == "_count":
                result = cluster.search(
                    indices, {"query": request.get("query"), "size": 0, "track_total_hits": True}
                )
                return 200, {
                    "count": result["hits"]["total"]["value"],
                    "_shards": {
                        "total": len(indices),
                        "successful": len(indices),
                        "skipped": 0,
                        "failed": 0,
                    },
                }
            return 200, cluster.search(indices, request)
        if len(segments) == 2 and segments[1] == "_delete_by_query" and method == "POST":
            with cluster.lock:
                indices = cluster.resolve(segments[0], ignore_unavailable=ignore)
            return cluster.delete_by_query(indices, self._json(body), params)
        if len(segments) == 1:
            with cluster.lock:
                if method == "PUT":
                    cluster.create_index(head, self._json(body))
                    return 200, {"acknowledged": True, "shards_acknowledged": True, "index": head}
                if method == "HEAD":
                    return (200 if head in cluster.indices else 404), None
                if method == "DELETE":
                    for index in cluster.resolve(head, ignore_unavailable=ignore):
                        del cluster.indices[index.name]
                    return 200, {"acknowledged": True}
                if method == "GET":
                    found = cluster.resolve(head, ignore_unavailable=ignore)
                    return 200, {
                        i.name: {"mappings": i.mapping.raw, "settings": {"index": i.settings}}
                        for i in found
                    }
        if len(segments) == 2 and segments[1] == "_mapping" and method in ("PUT", "POST"):
            # Adding fields to existing indices; a field whose type would change is refused.
            update = self._json(body)
            with cluster.lock:
                for index in cluster.resolve(head, ignore_unavailable=ignore):
                    raw = dict(index.mapping.raw)
                    properties = dict(raw.get("properties") or {})
                    for name, spec in (update.get("properties") or {}).items():
                        if name in properties and properties[name] != spec:
                            raise ApiFailure(
                                400,
                                "illegal_argument_exception",
                                f"mapper [{name}] cannot be changed",
                            )
                        properties[name] = spec
                    raw["properties"] = properties
                    index.mapping = IndexMapping.from_json(raw)
            return 200, {"acknowledged": True}
        if len(segments) == 3 and segments[1] == "_doc" and method == "GET":
            with cluster.lock:
                (index,) = cluster.resolve(head)
                stored = index.live.get(segments[2])
            if stored is None:
                return 404, {"_index": head, "_id": segments[2], "found": False}
            return 200, {
                "_index": head,
                "_id": segments[2],
                "_version": stored.version,
                "found": True,
                "_source": stored.source,
            }
        raise ApiFailure(
            400, "illegal_argument_exception", f"no handler for [{method} {self.path}]"
        )

    def _control(self, segments: list[str], body: bytes) -> tuple[int, Any]:
        """Fault injection and inspection for the standalone server."""
        cluster = self.server.cluster
        if segments == ["faults"] and self.command == "POST":
            cluster_fault = Fault.from_json(self._json(body))
            with cluster.lock:
                cluster.faults.append(cluster_fault)
            return 200, {"acknowledged": True}
        if segments == ["faults"] and self.command == "DELETE":
            with cluster.lock:
                cluster.faults.clear()
            return 200, {"acknowledged": True}
        if segments == ["requests"]:
            with cluster.lock:
                return 200, {"requests": [r.__dict__ for r in cluster.requests]}
        if segments == ["reset"] and self.command == "POST":
            with cluster.lock:
                cluster.indices.clear()
                cluster.templates.clear()
                cluster.scripts.clear()
                cluster.faults.clear()
                cluster.requests.clear()
            return 200, {"acknowledged": True}
        raise ApiFailure(404, "resource_not_found_exception", "unknown simulator control")


def _with_shard_failure(payload: Any) -> Any:
    if not isinstance(payload, dict) or "_shards" not in payload:
        return payload
    shards = dict(payload["_shards"])
    shards["failed"] = max(1, shards.get("total", 1) - shards.get("successful", 0))
    shards["successful"] = max(0, shards.get("successful", 1) - 1)
    shards["failures"] = [
        {
            "shard": 0,
            "index": None,
            "status": "INTERNAL_SERVER_ERROR",
            "reason": {"type": "exception", "reason": "injected shard failure"},
        }
    ]
    return {**payload, "_shards": shards}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], cluster: SimulatedCluster, base_path: str = ""):
        super().__init__(address, _Handler)
        self.cluster = cluster
        self.base_path = base_path


class EsSimulator:
    """A simulated cluster served on 127.0.0.1 in a background thread."""

    def __init__(self, port: int = 0, *, version: str = DEFAULT_VERSION, base_path: str = ""):
        """``base_path`` (``/es``): served behind a reverse proxy under that path prefix."""
        self.cluster = SimulatedCluster(version=version)
        self.base_path = ("/" + base_path.strip("/")) if base_path.strip("/") else ""
        self._server = _Server(("127.0.0.1", port), self.cluster, self.base_path)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    def start(self) -> EsSimulator:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="es-simulator", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> EsSimulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # test conveniences ---------------------------------------------------------------

    def inject(self, fault: Fault) -> Fault:
        with self.cluster.lock:
            self.cluster.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.cluster.lock:
            self.cluster.faults.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self.cluster.lock:
            return list(self.cluster.requests)

    def requests_to(self, endpoint: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.endpoint == endpoint]

    def peak_in_flight(self, endpoint: str) -> int:
        """The most requests to ``endpoint`` the server was handling at one time."""
        with self.cluster.lock:
            return self.cluster.peak_in_flight.get(endpoint, 0)

    def reset_requests(self) -> None:
        with self.cluster.lock:
            self.cluster.requests.clear()

    def live_source(self, index: str, document_id: str) -> dict[str, Any] | None:
        with self.cluster.lock:
            found = self.cluster.indices.get(index)
            stored = found.live.get(document_id) if found else None
            return None if stored is None else dict(stored.source)

    def index_names(self) -> list[str]:
        with self.cluster.lock:
            return sorted(self.cluster.indices)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=9200, help="0 picks a free port")
    parser.add_argument("--version", default=DEFAULT_VERSION, help="version reported by GET /")
    args = parser.parse_args(list(argv) if argv is not None else None)
    simulator = EsSimulator(args.port, version=args.version)
    print(f"listening on {simulator.url}", flush=True)
    try:
        simulator._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        simulator._server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
