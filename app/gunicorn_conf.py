"""Gunicorn settings for the web process (used by the Procfile and `netmap up`).

Values come from the same settings file as everything else, so one TOML file
configures the whole deployment. Threads serve slow scanners' uploads without
needing one process per connection; connections stay in each worker's pool.
"""

from __future__ import annotations

import os

from app.config import load_settings

_settings, _check = load_settings()

bind = os.environ.get("NETMAP_BIND") or f"{_settings.server.host}:{_settings.server.port}"
workers = _settings.server.web_workers
threads = _settings.server.web_threads
worker_class = "gthread"
timeout = _settings.server.request_timeout_seconds
graceful_timeout = 30
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
