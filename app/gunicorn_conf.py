"""Gunicorn settings for the web process (used by the Procfile and `netmap up`).

Values come from the same settings file as everything else, so one TOML file
configures the whole deployment. Threads serve slow scanners' uploads without
needing one process per connection; connections stay in each worker's pool.
The worker class is gthread with request heads read by its event loop
(``app.gunicorn_worker``), so slow clients do not hold threads. gunicorn's
control socket (25.1+) defaults to one path per user (``~/.gunicorn``), which
two instances on one host would take from each other: it lives under the data
directory, and is turned off when that path is too long for a Unix socket.
"""

from __future__ import annotations

import os

from app.config import load_settings

_settings, _check = load_settings()

bind = os.environ.get("NETMAP_BIND") or f"{_settings.server.host}:{_settings.server.port}"
workers = _settings.server.web_workers
threads = _settings.server.web_threads
worker_class = "app.gunicorn_worker.HeadBufferingThreadWorker"
http_protocols = "h1"  # the head-buffering worker speaks HTTP/1.x; HTTP/2 ends at the proxy
timeout = _settings.server.request_timeout_seconds
graceful_timeout = 30
# Unix socket paths are limited to ~107 bytes (sun_path).
_control_socket = _settings.data_dir / "run" / "gunicorn.ctl"
if len(str(_control_socket).encode()) <= 100:
    control_socket = str(_control_socket)
else:
    control_socket_disable = True

# Requests are logged as structured events by the app itself.
accesslog = None
errorlog = "-"


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


# Gunicorn's own messages as JSON lines, like every other log line of the product.
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "app.observability.JsonLineFormatter"}},
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
