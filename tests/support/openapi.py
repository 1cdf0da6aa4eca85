"""Checking an answer against its OpenAPI entry: the status is documented (exactly or as a
``4XX`` range) and the JSON body validates against that status's schema (JSON Schema 2020-12,
``$ref``s resolved within the document)."""

from __future__ import annotations

import functools
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from app.http.openapi import openapi_document

_URI = "urn:netmap:openapi"


@functools.cache
def _registry() -> tuple[dict[str, Any], Registry]:
    document = openapi_document()
    resource = Resource.from_contents(document, default_specification=_draft())
    return document, Registry().with_resource(_URI, resource)


def _draft():
    from referencing.jsonschema import DRAFT202012

    return DRAFT202012


def check_response(method: str, path: str, response: Any) -> None:
    """``response``: a Flask test response or a requests response."""
    document, registry = _registry()
    entry = document["paths"][path][method]
    status = str(response.status_code)
    responses = entry["responses"]
    documented = responses.get(status) or responses.get(status[0] + "XX")
    assert documented is not None, f"{method.upper()} {path}: status {status} not documented"
    content = documented.get("content", {})
    if "application/json" not in content:
        return
    schema = content["application/json"]["schema"]
    body = response.get_json() if hasattr(response, "get_json") else response.json()
    validator = Draft202012Validator(_absolute(schema), registry=registry)
    problems = sorted(validator.iter_errors(body), key=lambda e: list(e.path))
    if problems:
        where = list(problems[0].path)
        raise AssertionError(f"{method.upper()} {path} {status}: {problems[0].message} at {where}")


def _absolute(schema: Any) -> Any:
    """Point the document's local refs ("#/components/…") at the registered document."""
    if isinstance(schema, dict):
        return {
            key: (_URI + value if key == "$ref" and value.startswith("#") else _absolute(value))
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_absolute(item) for item in schema]
    return schema
