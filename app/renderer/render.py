"""Rendering one report mail: template → sandboxed render → sanitise → inline CSS → validate.

Order matters: the HTML is sanitised (nh3) before CSS is inlined, so style
rules written by the template reach the elements as ``style`` attributes while
scripts, event handlers and foreign URL schemes never survive; css-inline runs
with remote stylesheets off, so rendering never opens a network connection.
Every failure caused by the input is a ``RenderRejected`` (a business error);
anything else is a bug and propagates.

Rendering is bounded in time and size: the template's output is consumed as
it is generated and refused (``output_too_large``) as soon as it passes twice
the HTML limit, before a 200 MB string exists; and a render running longer
than ``RENDER_TIME_BUDGET_SECONDS`` stops with ``render_timeout`` — through an
interval timer where rendering runs on the main thread (the renderer worker),
else through a watchdog thread that raises the timeout in the rendering thread,
so a loop with no output is stopped there too (the builtin renderer runs in the
runner's threads).
"""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import css_inline
import nh3
from jinja2 import TemplateError
from jinja2.sandbox import SecurityError

from .contract import (
    MAX_HTML_BYTES,
    MAX_HTML_SOURCE_CHARS,
    MAX_IMAGES,
    MAX_SUBJECT_SOURCE_CHARS,
    MAX_TEMPLATE_VERSION_CHARS,
    RenderRejected,
    validate_output,
)
from .sandbox import compile_html, compile_text

_ALLOWED_TAGS = set(nh3.ALLOWED_TAGS) | {"style", "tfoot", "font"}
_ALLOWED_ATTRIBUTES = {tag: set(attrs) for tag, attrs in nh3.ALLOWED_ATTRIBUTES.items()}
_ALLOWED_ATTRIBUTES["*"] = {"style", "class", "title", "dir", "lang", "align", "width", "height"}
_ALLOWED_ATTRIBUTES["td"] = _ALLOWED_ATTRIBUTES.get("td", set()) | {"bgcolor", "valign"}
_ALLOWED_ATTRIBUTES["table"] = _ALLOWED_ATTRIBUTES.get("table", set()) | {
    "bgcolor",
    "border",
    "cellpadding",
    "cellspacing",
}
_ALLOWED_ATTRIBUTES["font"] = {"color", "face", "size"}

_CLEANER = nh3.Cleaner(
    tags=_ALLOWED_TAGS,
    clean_content_tags={"script"},
    attributes=_ALLOWED_ATTRIBUTES,
    url_schemes={"http", "https", "mailto", "cid"},
    strip_comments=True,
)
_INLINER = css_inline.CSSInliner(load_remote_stylesheets=False, keep_style_tags=False)

RENDER_TIME_BUDGET_SECONDS = 10.0
MAX_RENDERED_CHARS = MAX_HTML_BYTES * 2


class _OutOfTime(BaseException):
    """Raised into the rendering code by the interval timer or the watchdog.

    A BaseException, so no ``except Exception`` on the way (Jinja's, a filter's)
    takes it for an error of the template and goes on."""


# The watchdog's raises after the first, while the thread is still inside the budget.
RAISE_AGAIN_SECONDS = 0.25
RAISE_AGAIN_TIMES = 40

# CPython's way to raise an exception in another thread; it is delivered at the
# thread's next bytecode, so C code already running (a regex, nh3) finishes first.
_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_set_async_exc.restype = ctypes.c_int


@contextmanager
def _thread_time_budget(seconds: float) -> Iterator[None]:
    """``_OutOfTime`` raised in this thread after ``seconds``, if it is still inside.

    A thread cannot take signals, and checking the clock between output chunks misses
    a loop that writes nothing (nested loops over ranges spin for minutes): a watchdog
    raises the timeout into the rendering thread instead. It raises it again every
    ``RAISE_AGAIN_SECONDS`` (``RAISE_AGAIN_TIMES`` at most) while the thread is still
    inside: one that lands where CPython cannot propagate it (a garbage collector
    callback, a ``__del__``) is dropped as "unraisable". The lock keeps it from raising
    once the block is left, and a timeout raised but not yet delivered then is taken
    back; the bound keeps a thread that somehow never leaves from being hit for ever."""
    target = threading.get_ident()
    guard = threading.Lock()
    state = {"inside": True}
    stop = threading.Event()

    def expire() -> None:
        if stop.wait(seconds):
            return
        for _ in range(RAISE_AGAIN_TIMES):
            with guard:
                if not state["inside"]:
                    return
                _set_async_exc(target, ctypes.py_object(_OutOfTime))
            if stop.wait(RAISE_AGAIN_SECONDS):
                return

    watchdog = threading.Thread(target=expire, name="render-watchdog", daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        stop.set()
        while True:
            # A timeout may land here too, before the lock is held: leave only once the
            # watchdog has been told, under its lock, and nothing is pending.
            try:
                with guard:
                    state["inside"] = False
                    _set_async_exc(target, ctypes.py_object())  # NULL: clears a pending one
                break
            except _OutOfTime:
                continue


@contextmanager
def _time_budget(seconds: float) -> Iterator[None]:
    """SIGALRM after ``seconds`` on the main thread, the watchdog elsewhere; either way
    a loop with no output is stopped too."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        with _thread_time_budget(seconds):
            yield
        return

    def expired(_signum: int, _frame: Any) -> None:
        raise _OutOfTime

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _render_bounded(template: Any, variables: dict[str, Any], deadline: float) -> str:
    parts: list[str] = []
    size = 0
    for chunk in template.generate(variables):
        size += len(chunk)
        if size > MAX_RENDERED_CHARS:
            raise RenderRejected(
                "output_too_large",
                f"the template's output passed {MAX_RENDERED_CHARS} characters while rendering",
            )
        if time.monotonic() > deadline:
            raise _OutOfTime
        parts.append(chunk)
    return "".join(parts)


def _check_input(payload: Any) -> tuple[str, str, str, dict[str, Any], dict[str, dict[str, str]]]:
    """Re-check the shape the slot schema promised (the worker trusts nobody)."""
    if not isinstance(payload, dict):
        raise RenderRejected("invalid_input", "render input must be an object")
    template = payload.get("template")
    context = payload.get("context")
    images = payload.get("images", [])
    if not isinstance(template, dict) or not isinstance(context, dict):
        raise RenderRejected("invalid_input", "render input needs template and context objects")
    subject, html, version = (template.get(k) for k in ("subject", "html", "version"))
    if not all(isinstance(v, str) for v in (subject, html, version)):
        raise RenderRejected("invalid_input", "template subject, html and version must be strings")
    if len(subject) > MAX_SUBJECT_SOURCE_CHARS or len(html) > MAX_HTML_SOURCE_CHARS:
        raise RenderRejected("invalid_input", "template source too large")
    if not version or len(version) > MAX_TEMPLATE_VERSION_CHARS:
        raise RenderRejected("invalid_input", "template version must be 1-128 characters")
    if not isinstance(images, list) or len(images) > MAX_IMAGES:
        raise RenderRejected("invalid_input", f"images must be a list of at most {MAX_IMAGES}")
    by_token: dict[str, dict[str, str]] = {}
    for image in images:
        if not isinstance(image, dict) or not isinstance(image.get("token"), str):
            raise RenderRejected("invalid_input", "each image needs a token and a url")
        if not isinstance(image.get("url"), str):
            raise RenderRejected("invalid_input", "each image needs a token and a url")
        by_token[image["token"]] = image
    return subject, html, version, context, by_token


def render(payload: dict[str, Any]) -> dict[str, Any]:
    """Render one mail; raises ``RenderRejected`` for anything wrong with the input."""
    subject_source, html_source, version, context, images = _check_input(payload)
    used: list[str] = []

    def image(token: str) -> str:
        entry = images.get(token)
        if entry is None:
            raise RenderRejected("template_error", f"template references unknown image {token!r}")
        if token not in used:
            used.append(token)
        return entry["url"]

    def image_alt(token: str) -> str:
        entry = images.get(token)
        return "" if entry is None else entry.get("alt", "")

    variables = {**context, "image": image, "image_alt": image_alt}
    deadline = time.monotonic() + RENDER_TIME_BUDGET_SECONDS
    try:
        with _time_budget(RENDER_TIME_BUDGET_SECONDS):
            subject = _render_bounded(compile_text(subject_source), variables, deadline)
            body = _render_bounded(compile_html(html_source), variables, deadline)
    except _OutOfTime:
        raise RenderRejected(
            "render_timeout",
            f"rendering took longer than {RENDER_TIME_BUDGET_SECONDS:g}s; simplify the template",
        ) from None
    except RenderRejected:
        raise
    except SecurityError as exc:
        raise RenderRejected(
            "template_unsafe", f"template rejected by the sandbox: {exc}"
        ) from None
    except TemplateError as exc:
        raise RenderRejected("template_error", f"{type(exc).__name__}: {exc}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
        raise RenderRejected("template_error", f"{type(exc).__name__}: {exc}") from None
    if len(body.encode("utf-8")) > MAX_HTML_BYTES * 2:
        raise RenderRejected("output_too_large", "rendered HTML is far beyond the size limit")
    subject = " ".join(subject.split())  # one header line: collapse newlines and runs of spaces
    clean = _CLEANER.clean(body)
    try:
        inlined = _INLINER.inline(clean)
    except (css_inline.InlineError, ValueError) as exc:
        raise RenderRejected("template_error", f"CSS could not be inlined: {exc}") from None
    output = {
        "subject": subject,
        "html": inlined,
        "template_version": version,
        "images_used": used,
    }
    validate_output(payload, output)
    return output
