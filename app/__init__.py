"""netmap: the backend of a network-mapping (attack-surface) platform.

``create_app(settings)`` is the Flask factory used by gunicorn (``wsgi.py``),
``netmap up`` and the tests. It never starts background work (that is the
runner's job, ``jobs/``) with one exception the product requires: the report
renderer's selection refresh (MOD-3), a daemon thread per process that keeps
this process on the published renderer revision. ``close_app`` drains and
closes it (gunicorn ``worker_exit``, atexit and the tests call it).
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from app.config import ConfigError, ConfigProblem, Settings, load_settings

# app.observability is imported inside the functions below, not here: importing this package
# (which `gunicorn -c python:app.gunicorn_conf` does first) must not import prometheus_client,
# because the metric value class is chosen at that import, and the gunicorn config has to set
# PROMETHEUS_MULTIPROC_DIR before it for /metrics to add up every worker's samples.
if TYPE_CHECKING:
    from flask import Flask
    from sqlalchemy.engine import Engine

# Flask, werkzeug and SQLAlchemy are imported inside the functions: ``import app.<pkg>``
# runs this file, and the scanner agent (app.agent) must load without the server stack.

__all__ = ["close_app", "create_app"]

_REQUEST_ID_HEADER = "X-Request-ID"


def create_app(
    settings: Settings | None = None,
    *,
    engine: Engine | None = None,
    modules: str = "background",
) -> Flask:
    """The Flask app. ``modules``: "background" (default: apply the renderer selection now and
    refresh it every ``refresh_seconds``), "manual" (apply now, no thread: tests drive
    ``refresh_once()`` themselves) or "off" (no renderer in this process)."""
    from flask import Flask
    from werkzeug.middleware.proxy_fix import ProxyFix

    from app.observability import configure_logging, emit

    if modules not in {"background", "manual", "off"}:
        raise ValueError(f"modules must be background, manual or off, not {modules!r}")

    configure_logging()
    loaded_check = None
    if settings is None:
        from app.ops.config_check import emit_check, full_check, startup_event_level

        settings, loaded_check = load_settings()
        startup_check = full_check(settings, loaded_check)
        emit_check(startup_check, "web")
        emit(
            "ConfigSources",
            level=startup_event_level(logging.INFO),
            process="web",
            value_sources=loaded_check.configured_sources(),
        )
        if not startup_check.ok:
            raise ConfigError(startup_check)
    if not settings.security.secret_key:
        from app.config import ConfigCheck

        raise ConfigError(
            ConfigCheck(
                errors=(
                    ConfigProblem(
                        "security.secret_key",
                        "",
                        "required by the web server (set NETMAP_SECRET_KEY or use `netmap up`)",
                    ),
                )
            )
        )

    from app import db

    if engine is None:
        url = settings.database.url
        if not url:
            from app import embedded

            url = embedded.start(settings.data_dir).url
        from app.migrations import require_schema_at_head

        # Refuse to serve an unmigrated database: say which command fixes it (SchemaNotCurrent).
        require_schema_at_head(url)
        engine = db.create_engine(url, settings.database, application_name="netmap-web")
    db.set_engine(engine)

    app = Flask("netmap")
    from app.http.json_provider import OrjsonProvider

    app.json = OrjsonProvider(app)
    app.config.update(
        SECRET_KEY=settings.security.secret_key,
        SESSION_COOKIE_NAME="netmap_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.security.session_cookie_secure,
        PERMANENT_SESSION_LIFETIME=timedelta(hours=settings.security.session_lifetime_hours),
        MAX_CONTENT_LENGTH=settings.ingest.max_body_bytes,
        RATELIMIT_STORAGE_URI=settings.security.ratelimit_storage_uri,
        RATELIMIT_HEADERS_ENABLED=True,
    )
    from app.http import context

    app.extensions[context.SETTINGS] = settings
    from app import cursors

    cursors.use_secret(settings.security.secret_key)
    app.extensions[context.CONFIG_CHECK] = loaded_check
    if settings.security.trusted_proxy_count:
        n = settings.security.trusted_proxy_count
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=n, x_proto=n, x_host=n)  # type: ignore[method-assign]

    from app.http import register_blueprints
    from app.http.error_handlers import register_error_handlers
    from app.http.ratelimit import limiter
    from app.http.response_headers import install_response_security
    from app.identity.login_throttle import open_login_throttle

    limiter.init_app(app)
    app.extensions[context.LOGIN_THROTTLE] = open_login_throttle(
        settings.security.ratelimit_storage_uri
    )
    # The stores are opened here, before any request, not lazily on first use: two request
    # threads racing an unlocked "open if missing" would each open one and leak the other.
    # Opening connects to nothing (clients connect on their first call).
    from app.object_store import open_object_store
    from app.search import open_store

    app.extensions[context.STORE] = open_store(settings)
    app.extensions[context.OBJECT_STORE] = open_object_store(settings)
    from app.http.upload_gate import UploadGate

    app.extensions[context.UPLOAD_GATE] = UploadGate(
        settings.server.upload_concurrency, settings.server.upload_wait_seconds
    )
    from app import web  # the console: an entry point beside the API, not part of it

    register_error_handlers(app, page=web.unmatched_address_page)
    register_blueprints(app)

    app.register_blueprint(web.blueprint)
    _install_request_hooks(app)
    from app.http.requests import check_query_parameters

    app.before_request(check_query_parameters)
    install_response_security(app)
    from app.projection.metrics import register_outbox_metrics

    register_outbox_metrics()
    from app.ops.resources import register_resource_metrics

    register_resource_metrics()
    from app.analysis.metrics import register_analysis_metrics

    register_analysis_metrics()
    from app.alerts.metrics import register_alert_metrics

    register_alert_metrics()
    if modules != "off":
        from app.modules.service import ReportRenderService

        # Database failures here are start-up errors; a broken release is not (MOD-7).
        service = ReportRenderService(settings)
        app.extensions[context.REPORT_RENDER] = service
        service.start(background=modules == "background")
    return app


def close_app(app: Flask) -> None:
    """Drain and close what the app started: the renderer generations and their workers,
    and the search store (its Elasticsearch client and bulk threads, or page threads)."""
    from app.http import context

    service = app.extensions.pop(context.REPORT_RENDER, None)
    if service is not None:
        service.close()
    store = app.extensions.pop(context.STORE, None)
    if store is not None:
        store.close()
    objects = app.extensions.pop(context.OBJECT_STORE, None)
    if objects is not None:
        objects.close()


def _install_request_hooks(app: Flask) -> None:
    from flask import g, request

    from app import observability
    from app.observability import span

    @app.before_request
    def _start_request() -> None:
        g.request_started = time.perf_counter()
        incoming = request.headers.get(_REQUEST_ID_HEADER, "")
        g.request_id = (
            incoming if 0 < len(incoming) <= 64 and incoming.isprintable() else uuid.uuid4().hex
        )
        g.request_span = span(request_id=g.request_id)
        g.request_span.__enter__()

    @app.after_request
    def _finish_request(response):
        started = g.pop("request_started", None)
        if started is not None:
            route = request.url_rule.rule if request.url_rule is not None else "unmatched"
            observability.HTTP_REQUEST_SECONDS.labels(
                request.method, route, f"{response.status_code // 100}xx"
            ).observe(time.perf_counter() - started)
        response.headers[_REQUEST_ID_HEADER] = g.get("request_id", "")
        return response

    @app.teardown_request
    def _end_span(_exc: BaseException | None) -> None:
        request_span = g.pop("request_span", None)
        if request_span is not None:
            request_span.__exit__(None, None, None)
