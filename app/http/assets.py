"""Search views: a task's results (execution projection) and current assets (SCN-5, STO-3).

Results read the execution-endpoint projection, assets the current-asset
projection (PRJ-9), so an execution can be succeeded before its assets
appear. Ownership is checked in a short transaction; the store is queried
after the connection went back to the pool.
"""

from __future__ import annotations

import dataclasses

from flask import Blueprint, jsonify, request

from app.http import context
from app.http.guards import current_user, require_user
from app.http.requests import int_arg, page_limit
from app.saved_searches import service as saved_searches
from app.scan_control.runs import results_scope
from app.search.asset_params import asset_query_from_params
from app.search.port import AssetQuery

blueprint = Blueprint("assets", __name__, url_prefix="/api")


@blueprint.get("/tasks/<int:task_id>/results")
@require_user
def task_results(task_id: int):
    limit = page_limit(default=100, maximum=1000)
    executions = results_scope(current_user(), task_id, int_arg("run", minimum=1))
    page = context.store().execution_results(
        task_id,
        cursor=request.args.get("cursor") or None,
        limit=limit,
        execution_ids=executions,
    )
    body = {
        "items": [_result_item(doc) for doc in page.items],
        "next_cursor": page.next_cursor,
        "total_ips": page.total_ips,
    }
    if page.total_endpoints is not None:
        body["total_endpoints"] = page.total_endpoints
    return jsonify(body)


def _result_item(doc) -> dict:
    item = doc.public()
    item["execution_id"] = doc.execution_id
    return item


def asset_query_from_request(user, *, paged: bool = True) -> AssetQuery:
    """The asset query the request's parameters ask for (shared with the web console and,
    through app.search.asset_params, with asset exports). ``search=<id>`` adds the
    caller's saved search, ANDed before ``q``. ``paged`` false (facets, which count the
    whole search): the page's parameters, ``limit`` and ``cursor``, are not read."""
    saved_id = int_arg("search", minimum=1)
    queries = [saved_searches.get_search(user.id, saved_id).query] if saved_id is not None else []
    query = asset_query_from_params(
        request.args,
        owner_id=user.id,
        may_search_global=user.is_admin,
        queries=queries,
        limit=page_limit(default=50, maximum=500) if paged else 50,
        cursor=(request.args.get("cursor") or None) if paged else None,
    )
    return dataclasses.replace(query, time_limit_ms=interactive_time_limit_ms())


def interactive_time_limit_ms() -> int:
    """How long a search a person waits for may run (``[search]
    interactive_timeout_seconds``), for ``AssetQuery.time_limit_ms``."""
    return round(context.settings().search.interactive_timeout_seconds * 1000)


@blueprint.get("/assets")
@require_user
def assets():
    query = asset_query_from_request(current_user())
    page = context.store().search_assets(query)
    return jsonify({"items": [doc.public() for doc in page.items], "next_cursor": page.next_cursor})


# Facets count at most this many matching assets (``capped`` says more matched), so a
# facet request costs the same at any number of assets.
FACET_SAMPLE = 10_000


def facets_body(facets) -> dict:
    """The JSON of ``AssetFacets`` (``GET /api/assets/facets`` and the dashboard)."""
    return {
        "sampled": facets.sampled,
        "capped": facets.capped,
        "facets": {
            name: [{"value": value, "count": count} for value, count in values]
            for name, values in facets.facets.items()
        },
    }


@blueprint.get("/assets/facets")
@require_user
def asset_facets():
    """Top services, products, ports and certificate issuers of a search (the same
    parameters and ``q`` as ``GET /api/assets``; ``limit`` and ``cursor`` are not read,
    ``sort`` and ``order`` change nothing), over at most ``FACET_SAMPLE`` assets."""
    query = asset_query_from_request(current_user(), paged=False)
    size = int_arg("size", minimum=1, maximum=50) or 10
    facets = context.store().asset_facets(query, size=size, sample=FACET_SAMPLE)
    return jsonify(facets_body(facets))
