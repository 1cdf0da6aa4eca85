"""The ``render`` method's input and output: JSON schemas, limits and the self-test sample.

The host's ``ModuleSlot`` validates every call against these schemas, and the
renderer (builtin or worker) validates again, so a release built from another
version of this file cannot hand the host something it did not ask for.

Input (what the report pipeline captures, REP-1 and REP-2): the published template
(subject source, HTML source, template version), the fixed context (report
data: task summary, statistics, period…) and the prepared images (token, URL,
alt text). Output: the rendered subject and HTML, the echoed template version
and the image tokens the template actually referenced (so images a template
does not use are never archived).
"""

from __future__ import annotations

from typing import Any

METHOD_RENDER = "render"
MODULE_NAME = "report-render"
RPC_VERSION = 1

MAX_SUBJECT_SOURCE_CHARS = 2_000
MAX_HTML_SOURCE_CHARS = 256 * 1024
MAX_TEMPLATE_VERSION_CHARS = 128
MAX_IMAGES = 32
MAX_SUBJECT_CHARS = 255
MAX_HTML_BYTES = 512 * 1024
MAX_PAYLOAD_BYTES = 768 * 1024

IMAGE_TOKEN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # noqa: S105 - not a secret

RENDER_INPUT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["template", "context"],
    "properties": {
        "template": {
            "type": "object",
            "additionalProperties": False,
            "required": ["subject", "html", "version"],
            "properties": {
                "subject": {"type": "string", "maxLength": MAX_SUBJECT_SOURCE_CHARS},
                "html": {"type": "string", "maxLength": MAX_HTML_SOURCE_CHARS},
                "version": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TEMPLATE_VERSION_CHARS,
                },
            },
        },
        "context": {"type": "object"},
        "images": {
            "type": "array",
            "maxItems": MAX_IMAGES,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["token", "url"],
                "properties": {
                    "token": {"type": "string", "pattern": IMAGE_TOKEN_PATTERN},
                    "url": {"type": "string", "minLength": 1, "maxLength": 2048},
                    "alt": {"type": "string", "maxLength": 500},
                },
            },
        },
    },
}

RENDER_OUTPUT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["subject", "html", "template_version", "images_used"],
    "properties": {
        "subject": {"type": "string", "minLength": 1, "maxLength": MAX_SUBJECT_CHARS},
        "html": {"type": "string", "minLength": 1},
        "template_version": {"type": "string", "minLength": 1},
        "images_used": {
            "type": "array",
            "items": {"type": "string", "pattern": IMAGE_TOKEN_PATTERN},
        },
    },
}


class RenderRejected(Exception):
    """A business error: this input cannot be rendered (bad template, unsafe construct, limits).

    It is permanent for this input; the process that raised it stays healthy.
    """

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def validate_output(payload: dict[str, Any], output: dict[str, Any]) -> None:
    """The rules beyond the schema that the host re-checks on every result (REP-2)."""
    subject = output.get("subject")
    if not isinstance(subject, str) or not subject.strip():
        raise RenderRejected("invalid_output", "rendered subject is empty")
    if len(subject) > MAX_SUBJECT_CHARS:
        raise RenderRejected(
            "invalid_output", f"rendered subject exceeds {MAX_SUBJECT_CHARS} chars"
        )
    if any(ch in subject for ch in "\r\n\x00"):
        raise RenderRejected("invalid_output", "rendered subject must be a single line")
    html = output.get("html")
    if not isinstance(html, str) or not html.strip():
        raise RenderRejected("invalid_output", "rendered HTML is empty")
    if len(html.encode("utf-8")) > MAX_HTML_BYTES:
        raise RenderRejected("invalid_output", f"rendered HTML exceeds {MAX_HTML_BYTES} bytes")
    if output.get("template_version") != payload["template"]["version"]:
        raise RenderRejected("invalid_output", "renderer did not echo the template version")
    known = {image["token"] for image in payload.get("images", [])}
    unknown = [token for token in output.get("images_used", []) if token not in known]
    if unknown:
        raise RenderRejected("invalid_output", "renderer reported images it was not given")


def self_test_input() -> dict[str, Any]:
    """A fixed input every candidate must render correctly before it may be published."""
    return {
        "template": {
            "subject": "[netmap] {{ task.name }}: {{ stats.open_ports }} open ports",
            "html": (
                "<style>h1 { color: #123456; }</style>"
                "<h1>{{ task.name }}</h1>"
                "<p>{{ stats.open_ports }} open ports on {{ stats.hosts }} hosts "
                "({{ period.start }} to {{ period.end }}).</p>"
                '<img src="{{ image("ports-chart") }}" alt="ports">'
                "<p>{{ note }}</p>"
            ),
            "version": "self-test-1",
        },
        "context": {
            "task": {"name": "self-test"},
            "stats": {"open_ports": 3, "hosts": 2},
            "period": {"start": "2026-11-01", "end": "2026-11-30"},
            "note": "<script>alert(1)</script>",
        },
        "images": [{"token": "ports-chart", "url": "cid:ports-chart", "alt": "ports"}],
    }


def check_self_test_output(output: dict[str, Any]) -> str | None:
    """None when the self-test output is what a correct renderer produces, else why not."""
    if output.get("subject") != "[netmap] self-test: 3 open ports":
        return "self-test subject differs from the expected rendering"
    html = output.get("html", "")
    if "<script" in html:
        return "self-test HTML was not sanitised"
    if "&lt;script&gt;" not in html:
        return "self-test HTML did not escape context values"
    if "color: #123456" not in html or "<style" in html:
        return "self-test CSS was not inlined"
    if output.get("images_used") != ["ports-chart"]:
        return "self-test image usage was not reported"
    if output.get("template_version") != "self-test-1":
        return "self-test template version was not echoed"
    return None
