"""The search language's surfaces: facets, saved searches, query exports, host pages."""

from __future__ import annotations

import copy

from app.http.openapi.components import (
    CURSOR,
    LIMIT,
    USER,
    body,
    json_response,
    obj,
    page,
    path_id,
    query,
    ref,
)
from app.http.openapi.tasks import OPERATIONS as _TASK_OPERATIONS

_TEXT = {"type": "string"}
_SEARCH = obj(
    {
        "id": {"type": "integer"},
        "name": _TEXT,
        "query": _TEXT,
        "created_at": _TEXT,
        "updated_at": _TEXT,
    }
)
_SEARCH_BODY = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200},
        "query": {"type": "string", "description": "search language (docs/search-language.md)"},
    },
}
_FACET_VALUES = {
    "type": "array",
    "items": obj({"value": {}, "count": {"type": "integer"}}),
}
# The facets take the asset search's own parameters (and the same q).
_ASSET_PARAMETERS = copy.deepcopy(_TASK_OPERATIONS[("get", "/api/assets")]["parameters"])

OPERATIONS = {
    ("get", "/api/assets/facets"): {
        "summary": "Top services, products, ports and certificate issuers of an asset search",
        "tags": ["assets"],
        "security": USER,
        "parameters": [
            *_ASSET_PARAMETERS,
            query("size", {"type": "integer", "minimum": 1, "maximum": 50}),
        ],
        "responses": {
            "200": json_response(
                "capped counts",
                obj(
                    {
                        "sampled": {"type": "integer"},
                        "capped": {"type": "boolean"},
                        "facets": {"type": "object", "additionalProperties": _FACET_VALUES},
                    }
                ),
            )
        },
    },
    ("get", "/api/searches"): {
        "summary": "Your saved searches",
        "tags": ["searches"],
        "security": USER,
        "parameters": [LIMIT, CURSOR],
        "responses": {"200": json_response("a page of saved searches", page(_SEARCH))},
    },
    ("post", "/api/searches"): {
        "summary": "Save a search-language query under a name",
        "tags": ["searches"],
        "security": USER,
        "requestBody": body({**_SEARCH_BODY, "required": ["name", "query"]}),
        "responses": {"201": json_response("saved", obj({"search": _SEARCH}))},
    },
    ("get", "/api/searches/{search_id}"): {
        "summary": "One saved search",
        "tags": ["searches"],
        "security": USER,
        "parameters": [path_id("search_id")],
        "responses": {"200": json_response("the search", obj({"search": _SEARCH}))},
    },
    ("patch", "/api/searches/{search_id}"): {
        "summary": "Rename a saved search or change its query",
        "tags": ["searches"],
        "security": USER,
        "parameters": [path_id("search_id")],
        "requestBody": body(_SEARCH_BODY),
        "responses": {"200": json_response("the search", obj({"search": _SEARCH}))},
    },
    ("delete", "/api/searches/{search_id}"): {
        "summary": "Delete a saved search",
        "tags": ["searches"],
        "security": USER,
        "parameters": [path_id("search_id")],
        "responses": {"204": {"description": "deleted"}},
    },
    ("post", "/api/exports"): {
        "summary": "Export the current assets a search-language query finds",
        "tags": ["exports"],
        "security": USER,
        "requestBody": body(
            obj(
                {"query": _TEXT},
                {"format": {"type": "string", "enum": ["csv", "jsonl", "zip"]}},
            )
        ),
        "responses": {"202": json_response("queued", obj({"export": ref("Export")}))},
    },
    ("get", "/api/hosts/{ip}"): {
        "summary": "One host: its ports, names, certificates, covering tasks and changes",
        "tags": ["assets"],
        "security": USER,
        "parameters": [
            {"name": "ip", "in": "path", "required": True, "schema": {"type": "string"}}
        ],
        "responses": {"200": json_response("the host", {"type": "object"})},
    },
}
