"""Per-application objects the blueprints and console pages need, each read one way.

``create_app`` builds all of them before the first request (settings, search store,
object store, login throttle, renderer service) and ``close_app`` closes them, so no
request ever initialises shared state (two threads racing a lazy "open on first use"
would each open a store and leak one). Blueprints and pages read them only through
these functions, never through ``current_app.config`` / ``current_app.extensions``
(tests/unit/test_http_context.py checks it); tests may install their own
object under the same key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import current_app

from app.config import Settings
from app.search.port import SearchStore

if TYPE_CHECKING:
    from app.config import ConfigCheck
    from app.http.upload_gate import UploadGate
    from app.identity.login_throttle import LoginThrottle
    from app.modules.service import ReportRenderService
    from app.object_store.events import InstrumentedObjectStore

SETTINGS = "netmap.settings"
STORE = "netmap.store"
OBJECT_STORE = "netmap.object_store"
LOGIN_THROTTLE = "netmap.login_throttle"
CONFIG_CHECK = "netmap.config_check"
REPORT_RENDER = "netmap.report_render"
UPLOAD_GATE = "netmap.upload_gate"


def settings() -> Settings:
    """The start-up settings of this app (docs/architecture.md, rule: start-up configuration)."""
    return current_app.extensions[SETTINGS]


def store() -> SearchStore:
    """The configured search store, opened by ``create_app``."""
    return current_app.extensions[STORE]


def object_store() -> InstrumentedObjectStore:
    """The configured object store (exports, report files), opened by ``create_app``."""
    return current_app.extensions[OBJECT_STORE]


def upload_gate() -> UploadGate:
    """This worker's upload slots (``[server] upload_concurrency``), made by ``create_app``."""
    return current_app.extensions[UPLOAD_GATE]


def login_throttle() -> LoginThrottle:
    return current_app.extensions[LOGIN_THROTTLE]


def config_check() -> ConfigCheck | None:
    """The check of the loaded configuration, when ``create_app`` loaded it itself."""
    return current_app.extensions.get(CONFIG_CHECK)


def report_renderer() -> ReportRenderService | None:
    """The renderer service, or None in a process started without one (``modules="off"``)."""
    return current_app.extensions.get(REPORT_RENDER)
