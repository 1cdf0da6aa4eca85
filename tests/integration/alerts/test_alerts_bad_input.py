"""Bad input on every alerts route is a clear 4xx, never a 500, and writes nothing."""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction

IDS = ("0", str(2**63 - 1), str(2**80), "-1")
BODIES = (
    b"",
    b"[]",
    b"null",
    b'{"name": "a\\u0000b", "on": ["new"], "channels": [1]}',
    b'{"name": "x", "on": ["new"], "channels": [1180591620717411303424]}',
    b'{"kind": "webhook", "url": "http://[::1"}',
    b'{"kind": "webhook", "url": "ftp://example.com/"}',
    b'{"kind": "webhook", "url": "http://user:pw@example.com/"}',
    b'{"kind": "webhook", "url": "http://127.0.0.1:99999/"}',
    b'{"kind": "email", "recipients": ["not an address"]}',
    b'{"kind": "apprise", "url": "' + b"x" * 3000 + b'"}',
    b'{"kind": "carrier-pigeon"}',
    b'{"filter": {"cidrs": ["10.0.0.0/33"]}, "name": "x", "on": ["new"], "channels": [1]}',
)


def _rows() -> tuple[int, int, int]:
    with transaction() as conn:
        return tuple(
            conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar()
            for t in ("alert_rules", "alert_channels", "alert_deliveries")
        )


def test_out_of_range_ids_and_bad_delivery_ids_are_404(api) -> None:
    user = api.user()
    for raw in IDS:
        for path in (f"/api/alerts/rules/{raw}", f"/api/alerts/channels/{raw}"):
            assert user.get(path).status_code == 404, path
        assert user.post(f"/api/alerts/channels/{raw}/test").status_code == 404
        assert user.patch(f"/api/alerts/rules/{raw}", json={"name": "x"}).status_code == 404
    for delivery in ("nope", "msg_" + "z" * 32, "msg_%00", "%00"):
        assert user.get(f"/api/alerts/deliveries/{delivery}").status_code == 404
        assert user.post(f"/api/alerts/deliveries/{delivery}/redeliver").status_code == 404
    for query in ("rule=99999999999999999999", "rule=x", "status=%00", "cursor=forged"):
        assert user.get(f"/api/alerts/deliveries?{query}").status_code == 400, query


def test_malformed_bodies_are_4xx_and_write_nothing(api) -> None:
    user = api.user()
    before = _rows()
    for path in ("/api/alerts/rules", "/api/alerts/channels"):
        for body in BODIES:
            response = user.post(path, data=body, headers={"Content-Type": "application/json"})
            assert 400 <= response.status_code < 500, (path, body, response.get_json())
            assert set(response.get_json()["error"]) >= {"code", "message"}
    assert _rows() == before
