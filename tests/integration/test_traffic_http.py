"""POST/GET /api/traffic/rollups: token auth, validation, idempotent upsert, frozen days, query."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app import close_app, create_app, db
from app.config import load_settings
from app.db import transaction
from tests.support.api import Api
from tests.support.settings import make_settings

TOKEN = "rollup-token-for-tests-0123456789"


@pytest.fixture
def traffic_app(database_url, tmp_path):
    settings = make_settings(
        database_url, tmp_path, traffic={"ingest_token": TOKEN, "max_rows_per_request": 5}
    )
    engine = db.create_engine(settings.database.url, settings.database)
    db.set_engine(engine)
    application = create_app(settings, engine=engine)
    yield application
    close_app(application)  # stops the renderer's refresh thread before the engine goes
    db.set_engine(None)
    engine.dispose()


def row(**changes):
    value = {
        "bucket_start": "2026-08-01T02:00:00Z",
        "bucket_end": "2026-08-01T02:05:00Z",
        "business_date": "2026-08-01",
        "granularity": "5m",
        "domain": "sc.example.com",
        "method": "GET",
        "path": "/a.webp",
        "response_bytes": 1000,
        "request_bytes": 84,
        "request_bytes_known_count": 2,
        "total_requests": 3,
        "status_counts": {"2xx": 2, "4xx": 1},
        "source_server": "nginx-1",
        "generated_at": "2026-08-01T02:06:00Z",
        "frozen": False,
    }
    value.update(changes)
    return value


def day_row(**changes):
    base = {
        "bucket_start": "2026-07-30T16:00:00Z",
        "bucket_end": "2026-07-31T16:00:00Z",
        "business_date": "2026-07-31",
        "granularity": "day",
        "frozen": True,
    }
    base.update(changes)
    return row(**base)


def post(client, rows, token=TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return client.post("/api/traffic/rollups", json={"rows": rows}, headers=headers)


def stored() -> list[tuple]:
    with transaction() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text(
                    "SELECT granularity, path, total_requests, frozen, updated_at "
                    "FROM traffic_rollups ORDER BY granularity, path"
                )
            )
        ]


def test_ingest_refuses_everything_without_a_configured_token(client):
    response = post(client, [row()], token="anything")
    assert response.status_code == 401
    assert response.get_json()["error"]["code"] == "invalid_token"


def test_ingest_requires_the_right_token(traffic_app):
    client = traffic_app.test_client()
    assert post(client, [row()], token=None).status_code == 401
    assert post(client, [row()], token=TOKEN + "x").status_code == 401
    response = post(client, [row(), row(path="/b.webp")])
    assert response.status_code == 200
    assert response.get_json() == {"accepted": 2}
    assert [r[:3] for r in stored()] == [("5m", "/a.webp", 3), ("5m", "/b.webp", 3)]


def test_token_comes_from_the_environment_alias():
    settings, _ = load_settings(env={"NETMAP_TRAFFIC_TOKEN": "from-env"})
    assert settings.traffic.ingest_token == "from-env"


INVALID = [
    ({"granularity": "1h"}, "granularity"),
    ({"bucket_start": "yesterday"}, "bucket_start"),
    ({"bucket_start": "2026-08-01T02:01:00Z", "bucket_end": "2026-08-01T02:06:00Z"}, "bucket_end"),
    ({"bucket_start": "2026-08-01T02:00:00"}, "bucket_start"),
    ({"total_requests": -1}, "total_requests"),
    ({"total_requests": True}, "total_requests"),
    ({"request_bytes_known_count": 4}, "request_bytes_known_count"),
    ({"request_bytes": None}, "request_bytes"),
    ({"status_counts": {"2xx": 1}}, "status_counts"),
    ({"status_counts": {"2xx": 2, "4xx": 1, "7xx": 0}}, "status_counts"),
    ({"domain": "bad domain"}, "domain"),
    ({"path": ""}, "path"),
    ({"path": "/x\x00"}, "path"),
    ({"business_date": "2026-09-01"}, "business_date"),
    ({"frozen": "yes"}, "frozen"),
    ({"generated_at": 5}, "generated_at"),
]


def test_invalid_rows_name_index_and_field_and_write_nothing(traffic_app):
    client = traffic_app.test_client()
    for bad, field in INVALID:
        response = post(client, [row(), row(path="/ok2"), row(**bad)])
        assert response.status_code == 400, bad
        error = response.get_json()["error"]
        assert error["code"] == "invalid_row"
        assert (error["details"]["index"], error["details"]["field"]) == (2, field), bad
    assert stored() == []


def test_batch_shape_limits(traffic_app):
    client = traffic_app.test_client()
    response = post(client, [row(), row()])
    assert response.status_code == 400
    assert response.get_json()["error"]["details"]["reason"] == "duplicate key"
    response = post(client, [row(path=f"/{i}") for i in range(6)])
    assert response.status_code == 400
    assert response.get_json()["error"]["code"] == "too_many_rows"
    response = client.post(
        "/api/traffic/rollups", json={"rows": "nope"}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert response.status_code == 400
    assert stored() == []


def test_upsert_is_idempotent_and_updates_changed_rows(traffic_app):
    client = traffic_app.test_client()
    assert post(client, [row()]).status_code == 200
    first = stored()
    assert post(client, [row(generated_at="2026-08-01T03:00:00Z")]).status_code == 200
    assert stored() == first  # equal sums: the stored row is not touched
    changed = row(total_requests=4, status_counts={"2xx": 3, "4xx": 1})
    assert post(client, [changed]).status_code == 200
    assert stored()[0][2] == 4


def test_a_frozen_day_is_not_undone_by_a_stale_unfrozen_row(traffic_app):
    client = traffic_app.test_client()
    assert post(client, [day_row()]).status_code == 200
    stale = day_row(frozen=False, total_requests=1, status_counts={"2xx": 1},
                    request_bytes_known_count=1)  # fmt: skip
    assert post(client, [stale]).status_code == 200
    assert stored()[0][2:4] == (3, True)
    corrected = day_row(total_requests=5, status_counts={"2xx": 5})
    assert post(client, [corrected]).status_code == 200
    assert stored()[0][2:4] == (5, True)


def test_query_filters_and_pages(traffic_app):
    client = traffic_app.test_client()
    rows = [
        row(path="/a"),
        row(path="/b"),
        row(path="/a", bucket_start="2026-08-01T02:05:00Z", bucket_end="2026-08-01T02:10:00Z"),
        row(path="/a", domain="s3.example.com"),
        day_row(path="/a"),
    ]
    assert post(client, rows).status_code == 200
    api = Api(traffic_app)
    user = api.user()
    assert traffic_app.test_client().get("/api/traffic/rollups").status_code == 401
    response = user.get(
        "/api/traffic/rollups?domain=sc.example.com&granularity=5m"
        "&from=2026-08-01T02:00:00Z&to=2026-08-01T02:05:00Z"
    )
    assert response.status_code == 200
    items = response.get_json()["items"]
    assert [(i["path"], i["bucket_start"]) for i in items] == [
        ("/a", "2026-08-01T02:00:00Z"),
        ("/b", "2026-08-01T02:00:00Z"),
    ]
    assert items[0] == row(path="/a") | {
        "status_counts": {"1xx": 0, "2xx": 2, "3xx": 0, "4xx": 1, "5xx": 0, "other": 0}
    }
    # A bare date is midnight in the business zone (+08:00): 2026-08-01 = 2026-07-31T16:00Z.
    # As ``to`` it includes that day, as `netmap traffic chart --to` does: from and to the
    # same date is that day (it was an empty range).
    day = user.get("/api/traffic/rollups?granularity=day&from=2026-07-31&to=2026-07-31")
    assert [i["business_date"] for i in day.get_json()["items"]] == ["2026-07-31"]
    before = user.get("/api/traffic/rollups?granularity=day&to=2026-07-30").get_json()
    assert before["items"] == []
    seen = []
    cursor = None
    while True:
        query = "/api/traffic/rollups?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = user.get(query).get_json()
        seen.extend(
            (i["granularity"], i["domain"], i["path"], i["bucket_start"]) for i in page["items"]
        )
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) == 5
    assert user.get("/api/traffic/rollups?granularity=hour").status_code == 400
    assert user.get("/api/traffic/rollups?from=soon").status_code == 400
    assert user.get("/api/traffic/rollups?cursor=bm9wZQ").status_code == 400


def test_traffic_routes_carry_exactly_their_guard(traffic_app):
    access = {}
    for rule in traffic_app.url_map.iter_rules():
        if rule.rule.startswith("/api/traffic"):
            view = traffic_app.view_functions[rule.endpoint]
            access[(rule.rule, tuple(sorted(rule.methods - {"HEAD", "OPTIONS"})))] = getattr(
                view, "_netmap_access", None
            )
    assert access == {
        ("/api/traffic/rollups", ("POST",)): "bearer",
        ("/api/traffic/rollups", ("GET",)): "user",
    }


def test_rows_under_the_former_camelcase_names_are_still_accepted_and_served(traffic_app):
    # netmap 0.1 spelled the row fields in camelCase; an nginx host running its
    # `netmap traffic rollup` keeps publishing to an upgraded server (docs/upgrading.md).
    client = traffic_app.test_client()
    former = {FORMER.get(name, name): value for name, value in row().items()}
    assert "bucketStart" in former and "bucket_start" not in former
    assert post(client, [former]).status_code == 200
    assert stored()[0][:3] == ("5m", "/a.webp", 3)

    # A problem is named as the field was sent; one field under both names is refused.
    bad = post(client, [former | {"totalRequests": -1}])
    assert bad.status_code == 400
    assert bad.get_json()["error"]["details"]["field"] == "totalRequests"
    both = post(client, [row(path="/c") | {"totalRequests": 3}])
    assert both.status_code == 400
    assert both.get_json()["error"]["details"]["field"] == "total_requests"

    user = Api(traffic_app).user()
    items = user.get("/api/traffic/rollups").get_json()["items"]
    assert set(items[0]) == set(row()) | {"frozen"}
    assert all(name == name.lower() for name in items[0])
    legacy = user.get("/api/traffic/rollups?names=camelCase").get_json()["items"]
    assert set(legacy[0]) == set(former) | {"frozen"}
    assert legacy[0]["totalRequests"] == items[0]["total_requests"] == 3
    refused = user.get("/api/traffic/rollups?names=kebab")
    assert refused.status_code == 400
    assert refused.get_json()["error"]["details"]["parameter"] == "names"


FORMER = {
    "bucket_start": "bucketStart",
    "bucket_end": "bucketEnd",
    "business_date": "businessDate",
    "response_bytes": "responseBytes",
    "request_bytes": "requestBytes",
    "request_bytes_known_count": "requestBytesKnownCount",
    "total_requests": "totalRequests",
    "status_counts": "statusCounts",
    "source_server": "sourceServer",
    "generated_at": "generatedAt",
}
