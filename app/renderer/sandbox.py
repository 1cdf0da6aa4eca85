"""The Jinja2 sandbox templates run in: immutable, strict, and bounded.

``ImmutableSandboxedEnvironment`` already refuses private and dunder attributes
(``__class__``), unsafe callables, ``str.format`` tricks and mutation of the
context. On top of it: undefined names are errors (a typo must not mail an
empty report), string/list repetition and powers are capped so one template
cannot allocate gigabytes, and compiled templates are cached by source so the
same published template is parsed once per process.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

from jinja2 import StrictUndefined, Template
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

MAX_REPEAT_RESULT = 100_000
MAX_POWER_EXPONENT = 64


class BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, op: str, left: Any, right: Any) -> Any:
        if op == "*":
            for sequence, count in ((left, right), (right, left)):
                if isinstance(sequence, str | list | tuple) and isinstance(count, int):
                    if len(sequence) * max(count, 0) > MAX_REPEAT_RESULT:
                        raise SecurityError("repetition result too large")
            return operator.mul(left, right)
        if op == "**":
            if isinstance(right, int | float) and abs(right) > MAX_POWER_EXPONENT:
                raise SecurityError("exponent too large")
            return operator.pow(left, right)
        return super().call_binop(context, op, left, right)


def _environment(autoescape: bool) -> BoundedSandbox:
    return BoundedSandbox(
        autoescape=autoescape,
        undefined=StrictUndefined,
        auto_reload=False,
        cache_size=0,  # we cache compiled templates ourselves, keyed by source
        keep_trailing_newline=False,
    )


_HTML_ENV = _environment(autoescape=True)
_TEXT_ENV = _environment(autoescape=False)


@functools.lru_cache(maxsize=128)
def compile_html(source: str) -> Template:
    return _HTML_ENV.from_string(source)


@functools.lru_cache(maxsize=128)
def compile_text(source: str) -> Template:
    return _TEXT_ENV.from_string(source)
