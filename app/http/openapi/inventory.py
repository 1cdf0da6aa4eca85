"""The search language's surfaces: facets, saved searches, query exports, host pages."""

from __future__ import annotations

import copy

from app.http.openapi.components import (
    CURSOR,
    LIMIT,
    SEARCH_TIME_LIMIT,
    body,
    json_response,
    obj,
    operation,
    page,
    path_id,
    query,
    ref,
)
from app.http.openapi.tasks import OPERATIONS as _TASK_OPERATIONS
from app.search.asset_params import ASSET_PARAMETERS

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
        "name": {"type": "string", "minLength": 1, "maxLength": 100},
        "query": {"type": "string", "description": "search language (docs/search-language.md)"},
    },
}
_FACET_VALUES = {
    "type": "array",
    "items": obj({"value": {}, "count": {"type": "integer"}}),
}
# The facets take the asset search's own parameters (and the same q).
# The asset search's parameters without its page and order: facets count the whole search.
_ASSET_PARAMETERS = [
    p
    for p in copy.deepcopy(_TASK_OPERATIONS[("get", "/api/assets")]["parameters"])
    if p["name"] not in ("limit", "cursor", "sort", "order")
]

OPERATIONS = {
    ("get", "/api/assets/facets"): operation(
        "assets",
        "Top services, products, ports and certificate issuers of an asset search",
        {
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
        parameters=[
            *_ASSET_PARAMETERS,
            query("size", {"type": "integer", "minimum": 1, "maximum": 50}),
        ],
        description=SEARCH_TIME_LIMIT,
    ),
    ("get", "/api/searches"): operation(
        "searches",
        "Your saved searches",
        {"200": json_response("a page of saved searches", page(_SEARCH))},
        parameters=[LIMIT, CURSOR],
    ),
    ("post", "/api/searches"): operation(
        "searches",
        "Save a search-language query under a name",
        {"201": json_response("saved", obj({"search": _SEARCH}))},
        requestBody=body({**_SEARCH_BODY, "required": ["name", "query"]}),
    ),
    ("get", "/api/searches/{search_id}"): operation(
        "searches",
        "One saved search",
        {"200": json_response("the search", obj({"search": _SEARCH}))},
        parameters=[path_id("search_id")],
    ),
    ("patch", "/api/searches/{search_id}"): operation(
        "searches",
        "Rename a saved search or change its query",
        {"200": json_response("the search", obj({"search": _SEARCH}))},
        parameters=[path_id("search_id")],
        requestBody=body(_SEARCH_BODY),
    ),
    ("delete", "/api/searches/{search_id}"): operation(
        "searches",
        "Delete a saved search",
        {
            "204": {"description": "deleted"},
            "409": json_response(
                "in_use: an alert rule or report definition uses it", ref("Error")
            ),
        },
        parameters=[path_id("search_id")],
    ),
    ("post", "/api/exports"): operation(
        "exports",
        "Export the current assets a search finds",
        {"202": json_response("queued", obj({"export": ref("Export")}))},
        description=(
            "`query` is the search language; `filters` are the parameters of "
            "`GET /api/assets` (what the console's Assets page was asked with), each a "
            "text or a whole number. Given both, an asset must meet both. The file lists "
            "the assets `GET /api/assets` lists for the same parameters, in its order; "
            "durations are fixed at the request."
        ),
        requestBody=body(
            obj(
                {"format": {"type": "string", "enum": ["csv", "jsonl", "zip"]}},
                {
                    "query": _TEXT,
                    "filters": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            name: {"type": ["string", "integer"]} for name in ASSET_PARAMETERS
                        },
                    },
                },
            )
        ),
    ),
    ("get", "/api/hosts/{ip}"): operation(
        "assets",
        "One host: its ports, names, certificates, covering tasks and changes",
        {"200": json_response("the host", {"type": "object"})},
        parameters=[{"name": "ip", "in": "path", "required": True, "schema": {"type": "string"}}],
    ),
}
