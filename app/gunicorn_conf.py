"""Gunicorn settings for the web process (used by the Procfile and `netmap up`).

Values come from the same settings as everything else, so one TOML file (or a
platform's environment: ``PORT``, ``WEB_CONCURRENCY``, ``DATABASE_URL``)
configures the whole deployment. Threads serve slow scanners' uploads without
needing one process per connection; connections stay in each worker's pool.

Before anything imports ``prometheus_client`` this module makes sure
``PROMETHEUS_MULTIPROC_DIR`` names an empty directory (a fresh temporary one
when the operator set none, removed again when the server exits): every worker
then writes its samples there and ``/metrics`` adds them up, whichever worker
answers the scrape. The master refuses to start on an unmigrated database.

The worker class is gthread with request heads read by its event loop
(``app.gunicorn_worker``), so slow clients do not hold threads. gunicorn's
control socket (25.1+) defaults to one path per user (``~/.gunicorn``), which
two instances on one host would take from each other: it lives under the data
directory, and is turned off when that path is too long for a Unix socket. The master's
pid is written there too (``run/web/<bind>.pid``) for the resource sampler.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile

_created_metrics_dir: str | None = None
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    if "prometheus_client" in sys.modules:
        # Too late: metrics already chose single-process values, /metrics would show one worker.
        raise RuntimeError(
            "prometheus_client was imported before app.gunicorn_conf could set "
            "PROMETHEUS_MULTIPROC_DIR; set it in the environment instead"
        )
    _created_metrics_dir = tempfile.mkdtemp(prefix="netmap-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _created_metrics_dir

from app.config import load_settings  # noqa: E402 - after the metrics directory is chosen

_settings, _check = load_settings()

bind = os.environ.get("NETMAP_BIND") or (
    f"[{_settings.server.host}]:{_settings.server.port}"
    if ":" in _settings.server.host
    else f"{_settings.server.host}:{_settings.server.port}"
)
workers = _settings.server.web_workers
threads = _settings.server.web_threads
worker_class = "app.gunicorn_worker.HeadBufferingThreadWorker"
http_protocols = "h1"  # the head-buffering worker speaks HTTP/1.x; HTTP/2 ends at the proxy
timeout = _settings.server.request_timeout_seconds
# Unix socket paths are limited to ~107 bytes (sun_path).
_control_socket = _settings.data_dir / "run" / "gunicorn.ctl"
if len(str(_control_socket).encode()) <= 100:
    control_socket = str(_control_socket)
else:
    control_socket_disable = True
# The master's pid, under this instance's data directory: the runner's resource sampler
# reads it to find this instance's web processes (not another instance's on the host).
# One file per master (named by its bind address): a second web process of the same
# instance on this host must not find the first one's file and refuse to start.
try:
    _settings.web_pid_dir.mkdir(parents=True, exist_ok=True)
    pidfile = str(_settings.web_pid_dir / (re.sub(r"[^A-Za-z0-9.-]+", "_", bind) + ".pid"))
except OSError:
    pass  # a read-only data directory: the sampler then sees no web processes on this host
# A platform's grace period after SIGTERM is typically 30 s: finish in-flight requests within it.
graceful_timeout = 25
# Requests are logged as structured events by the app itself.
accesslog = None
errorlog = "-"


def on_starting(server):
    # In the master, once: say where the bind address and worker count came from, and refuse
    # an unmigrated database here (one clear line) rather than in every worker's boot.
    from app.migrations import SchemaNotCurrent, require_schema_at_head
    from app.observability import configure_logging, emit

    configure_logging()
    sources = _check.configured_sources()
    emit(
        "WebServerStarting",
        bind=bind,
        bind_source="environment:NETMAP_BIND"
        if os.environ.get("NETMAP_BIND")
        else sources.get("server.port", "default"),
        workers=workers,
        workers_source=sources.get("server.web_workers", "default"),
        metrics_dir_created=_created_metrics_dir is not None,
        value_sources=sources,
    )
    if _settings.database.url:
        try:
            require_schema_at_head(_settings.database.url)
        except SchemaNotCurrent as exc:
            emit("WebServerRefused", reason=str(exc))
            # Gunicorn prints a RuntimeError as "Error: …" and exits with status 1.
            raise RuntimeError(str(exc)) from None


def post_worker_init(worker):
    # The app is loaded: what is alive now lives as long as the worker (app.heap says why).
    from app.heap import settle_heap

    settle_heap()


def child_exit(server, worker):
    # Drop the dead worker's metric files so gauges do not linger (prometheus multiprocess mode).
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


def worker_exit(server, worker):
    # In the worker process, after it stopped serving: drain renderer generations and reap
    # their worker processes, so none outlives the web worker that started it.
    from app.modules.service import close_all_services

    close_all_services()


def on_exit(server):
    # Only the directory this module created; an operator's own directory is theirs to manage.
    if _created_metrics_dir is not None:
        shutil.rmtree(_created_metrics_dir, ignore_errors=True)


# Gunicorn's own messages in the product's log format (JSON lines, or text on a terminal).
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "app.observability.line_formatter"}},
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "stream": "ext://sys.stderr",
        }
    },
    # Gunicorn merges this over its defaults key by key, and its default root logger names a
    # handler ("console") this dict replaces: without our own root entry it cannot start.
    "root": {"level": "INFO", "handlers": ["stderr"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["stderr"], "propagate": False},
        "gunicorn.access": {"level": "WARNING", "handlers": ["stderr"], "propagate": False},
    },
}
