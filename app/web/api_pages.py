"""The API reference page: the OpenAPI document (``/api/openapi.json``) as a readable list of
operations, grouped by area, with parameters, request fields and answers."""

from __future__ import annotations

import json
from typing import Any

from flask import render_template

from app.http.openapi import openapi_document
from app.web import blueprint
from app.web.access import page_user

_METHODS = ("get", "post", "put", "patch", "delete")


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if not ref:
        return schema
    return document["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def _fields(document: dict[str, Any], schema: dict[str, Any] | None) -> list[dict[str, str]]:
    """One row per property of an object schema: name, type, required, note."""
    if not schema:
        return []
    schema = _resolve(document, schema)
    required = set(schema.get("required", ()))
    rows = []
    for name, prop in schema.get("properties", {}).items():
        prop = _resolve(document, prop)
        kind = prop.get("type") or ("constant" if "const" in prop else "object")
        if isinstance(kind, list):
            kind = " or ".join(kind)
        note = prop.get("description", "")
        if "enum" in prop:
            note = "one of " + ", ".join(map(str, prop["enum"]))
        elif "example" in prop:
            note = (note + " e.g. " + json.dumps(prop["example"])).strip()
        rows.append({"name": name, "type": kind, "required": name in required, "note": note})
    return rows


def reference_sections() -> list[dict[str, Any]]:
    document = openapi_document()
    sections: dict[str, list[dict[str, Any]]] = {}
    for path, item in document["paths"].items():
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            request_schema = (
                operation.get("requestBody", {})
                .get("content", {})
                .get("application/json", {})
                .get("schema")
            )
            answers = []
            for status, response in operation["responses"].items():
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                answers.append(
                    {
                        "status": status,
                        "description": response.get("description", ""),
                        "fields": [] if status in ("4XX", "503") else _fields(document, schema),
                    }
                )
            sections.setdefault(operation["tags"][0], []).append(
                {
                    "method": method.upper(),
                    "path": path,
                    "summary": operation["summary"],
                    "auth": ", ".join(
                        name for entry in operation.get("security", []) for name in entry
                    )
                    or "none",
                    "parameters": operation.get("parameters", []),
                    "request": _fields(document, request_schema),
                    "answers": answers,
                }
            )
    return [{"tag": tag, "operations": ops} for tag, ops in sections.items()]


@blueprint.get("/api")
@page_user
def api_reference():
    return render_template("console/api_reference.html", sections=reference_sections())
