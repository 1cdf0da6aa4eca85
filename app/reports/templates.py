"""Report mail templates: the built-in ``default`` and the admin-published ones (REP-1, REP-4).

A template version is a subject source, an HTML source and a version string.
The capture phase reads the published version of a definition's template in
its snapshot; ``default`` needs no row (its source is here) unless an admin
published a version of that name, which then wins. A disabled version is a
permanent error for the reports that use it: they keep their statistics and
say so in ``quality.mail_error``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from jinja2 import TemplateSyntaxError
from sqlalchemy.engine import Connection

from app.errors import NotFound, ValidationError
from app.json_input import checked_object
from app.renderer import contract as render_contract
from app.renderer.sandbox import compile_html, compile_text

TEMPLATE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DEFAULT_TEMPLATE = "default"

# "New" has one source in the default mail, subject and body alike: stats.new_endpoints,
# the endpoints first seen in the period. The change analysis' own count of new endpoints
# (stats.changes.new) covers only the latest scans and is 0 until they are analysed, so
# the body shows the other change kinds from it, not a second "new".
DEFAULT_SUBJECT = (
    "[netmap] {{ report.name }}: {{ stats.endpoints }} "
    "endpoint{{ '' if stats.endpoints == 1 else 's' }}, "
    "{{ stats.new_endpoints }} new ({{ period.label }})"
)

# Mail clients ignore <style> blocks and most layout CSS: tables with inline styles
# (the renderer inlines the rules below) and images by cid: are what renders everywhere.
DEFAULT_HTML = """<style>
body { font-family: Arial, Helvetica, sans-serif; color: #1f2933; }
h1 { font-size: 20px; color: #102a43; margin: 0 0 8px 0; }
h2 { font-size: 16px; color: #243b53; margin: 18px 0 6px 0; }
table.grid { border-collapse: collapse; width: 100%; }
table.grid td { border: 1px solid #d9e2ec; padding: 4px 8px; font-size: 13px; }
td.num { text-align: right; }
p.note { color: #b44d12; font-size: 13px; }
</style>
<h1>{{ report.name }}</h1>
<p>{{ scope.label }} &middot; {{ period.start }} to {{ period.end }} ({{ period.kind }})</p>
{% if not completeness.complete %}<p class="note">{{ completeness.note }}</p>{% endif %}
<table class="grid" cellpadding="4" cellspacing="0">
<tr><td>Endpoints</td><td class="num">{{ stats.endpoints }}</td></tr>
<tr><td>IP addresses</td><td class="num">{{ stats.ips }}</td></tr>
<tr><td>New endpoints in the period</td><td class="num">{{ stats.new_endpoints }}</td></tr>
<tr><td>Executions in the period</td><td class="num">{{ stats.executions.total }}</td></tr>
{% if stats.changes %}<tr><td>Changed / gone / reappeared in the latest scans</td>
<td class="num">{{ stats.changes.changed }} / {{ stats.changes.gone }} /
{{ stats.changes.reappeared }}</td></tr>
{% if stats.changes.pending_executions %}<tr><td>Scans not compared with the previous one yet</td>
<td class="num">{{ stats.changes.pending_executions }}</td></tr>{% endif %}{% endif %}
</table>
<h2>Top services</h2>
<table class="grid" cellpadding="4" cellspacing="0">
{% for row in stats.top_services %}
<tr><td>{{ row.name }}</td><td class="num">{{ row.count }}</td></tr>
{% endfor %}
</table>
<img src="{{ image('services') }}" alt="{{ image_alt('services') }}" width="560">
<h2>Top ports</h2>
<table class="grid" cellpadding="4" cellspacing="0">
{% for row in stats.top_ports %}
<tr><td>{{ row.port }}/{{ row.transport }}</td><td class="num">{{ row.count }}</td></tr>
{% endfor %}
</table>
<h2>New endpoints per day</h2>
<table class="grid" cellpadding="4" cellspacing="0">
{% for row in stats.new_endpoints_per_day %}
<tr><td>{{ row.day }}</td><td class="num">{{ row.count }}</td></tr>
{% else %}
<tr><td>none in the period</td></tr>
{% endfor %}
</table>
<img src="{{ image('new-endpoints') }}" alt="{{ image_alt('new-endpoints') }}" width="560">
"""


@dataclass(frozen=True)
class TemplateVersion:
    name: str
    version: str
    subject: str
    html: str
    enabled: bool


BUILTIN_DEFAULT = TemplateVersion(
    DEFAULT_TEMPLATE, "builtin-3", DEFAULT_SUBJECT, DEFAULT_HTML, enabled=True
)


def template_exists(conn: Connection, name: str) -> bool:
    if name == DEFAULT_TEMPLATE:
        return True
    return bool(
        conn.execute(
            sa.text("SELECT 1 FROM report_templates WHERE name = :n"), {"n": name}
        ).scalar()
    )


def published_template(conn: Connection, name: str) -> TemplateVersion | None:
    """The version reports render with now; None when the template has none published."""
    row = conn.execute(
        sa.text(
            """
            SELECT v.name, v.version, v.subject_source, v.html_source, v.enabled
              FROM report_templates t
              JOIN report_template_versions v
                ON v.name = t.name AND v.version = t.published_version
             WHERE t.name = :n
            """
        ),
        {"n": name},
    ).one_or_none()
    if row is not None:
        return TemplateVersion(
            row.name, row.version, row.subject_source, row.html_source, row.enabled
        )
    return BUILTIN_DEFAULT if name == DEFAULT_TEMPLATE else None


def validate_template_version(body: Any) -> dict[str, Any]:
    checked_object(body, {"name", "version", "subject", "html", "enabled"})
    name = body.get("name")
    if not isinstance(name, str) or not TEMPLATE_NAME.fullmatch(name):
        raise ValidationError(
            "name must be 1-64 lower-case letters, digits, '-' or '_'", details={"field": "name"}
        )
    version = body.get("version")
    if (
        not isinstance(version, str)
        or not 1 <= len(version) <= 128
        or not version.strip()
        or any(not ch.isprintable() for ch in version)
    ):
        raise ValidationError(
            "version must be 1-128 printable characters, not only spaces",
            details={"field": "version"},
        )
    subject = body.get("subject")
    if not isinstance(subject, str) or not subject.strip():
        raise ValidationError("subject must be a non-empty string", details={"field": "subject"})
    if len(subject) > render_contract.MAX_SUBJECT_SOURCE_CHARS:
        raise ValidationError("subject source is too long", details={"field": "subject"})
    html = body.get("html")
    if not isinstance(html, str) or not html.strip():
        raise ValidationError("html must be a non-empty string", details={"field": "html"})
    if len(html) > render_contract.MAX_HTML_SOURCE_CHARS:
        raise ValidationError("html source is too long", details={"field": "html"})
    enabled = body.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValidationError("enabled must be a boolean", details={"field": "enabled"})
    # A template that does not parse would fail every report it renders: refused here, at
    # its line. (A name the context lacks is only known when a report renders it.)
    for field, source, compile_source in (
        ("subject", subject, compile_text),
        ("html", html, compile_html),
    ):
        try:
            compile_source(source)
        except TemplateSyntaxError as error:
            raise ValidationError(
                f"{field} does not parse: line {error.lineno}: {error.message}",
                code="invalid_template",
                details={"field": field, "line": error.lineno},
            ) from None
    return {"name": name, "version": version, "subject": subject, "html": html, "enabled": enabled}


def add_template_version(conn: Connection, body: dict[str, Any], *, user_id: int) -> None:
    conn.execute(
        sa.text("INSERT INTO report_templates (name) VALUES (:n) ON CONFLICT DO NOTHING"),
        {"n": body["name"]},
    )
    inserted = conn.execute(
        sa.text(
            """
            INSERT INTO report_template_versions
                   (name, version, subject_source, html_source, enabled, created_by)
            VALUES (:name, :version, :subject, :html, :enabled, :user)
            ON CONFLICT (name, version) DO NOTHING RETURNING 1
            """
        ),
        {**body, "user": user_id},
    ).scalar()
    if not inserted:
        from app.errors import Conflict

        raise Conflict(
            "this template version exists already; versions are immutable",
            code="template_version_exists",
            details={"field": "version"},
        )


def publish_template_version(conn: Connection, name: str, version: Any) -> None:
    if not TEMPLATE_NAME.fullmatch(name):
        raise NotFound("no such template", code="template_not_found")
    if not isinstance(version, str) or not 1 <= len(version) <= 128 or "\x00" in version:
        raise ValidationError("version must be a string", details={"field": "version"})
    exists = conn.execute(
        sa.text("SELECT 1 FROM report_template_versions WHERE name = :n AND version = :v"),
        {"n": name, "v": version},
    ).scalar()
    if not exists:
        raise NotFound("no such template version", code="template_version_not_found")
    conn.execute(
        sa.text(
            "UPDATE report_templates SET published_version = :v, updated_at = now() WHERE name = :n"
        ),
        {"n": name, "v": version},
    )


def list_templates(conn: Connection) -> list[dict[str, Any]]:
    rows = conn.execute(
        sa.text(
            """
            SELECT t.name, t.published_version, v.version, v.enabled, v.created_at
              FROM report_templates t
              LEFT JOIN report_template_versions v ON v.name = t.name
             ORDER BY t.name, v.created_at
            """
        )
    ).all()
    templates: dict[str, dict[str, Any]] = {
        DEFAULT_TEMPLATE: {
            "name": DEFAULT_TEMPLATE,
            "published_version": BUILTIN_DEFAULT.version,
            "builtin": True,
            "versions": [{"version": BUILTIN_DEFAULT.version, "enabled": True}],
        }
    }
    for row in rows:
        entry = templates.setdefault(row.name, {"name": row.name, "builtin": False, "versions": []})
        if row.name != DEFAULT_TEMPLATE or row.published_version:
            entry["published_version"] = row.published_version
            entry["builtin"] = entry["builtin"] and not row.published_version
        if row.version is not None:
            entry["versions"].append({"version": row.version, "enabled": row.enabled})
    return list(templates.values())
