"""How condition messages word times for people (app.alerts.senders): a length of time
in its two largest units, rounded down; a certificate's time left from the message's
creation, not only its whole days; how long a scanner that is back was away."""

from datetime import UTC, datetime, timedelta

import pytest

from app.alerts.conditions import Certificate, _certificate_payload
from app.alerts.senders import Message, span_text, summary_text
from app.config import load_settings


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 seconds"),
        (1, "1 second"),
        (59.9, "59 seconds"),
        (61, "1 minute 1 second"),
        (3600, "1 hour"),
        (3600 + 60, "1 hour 1 minute"),
        (2 * 86400 + 23 * 3600 + 3599, "2 days 23 hours"),
        (86400 + 59, "1 day"),  # the next unit is 0 hours: not said
        (-5, "0 seconds"),
    ],
)
def test_a_length_of_time_is_its_two_largest_units_rounded_down(seconds, text) -> None:
    assert span_text(seconds) == text


def _certificate_message(created: datetime, not_after: str, days_left: int) -> Message:
    payload = {
        "rule": {"id": 1, "name": "certs", "days": 7},
        "certificate": {
            "fingerprint": "ab" * 32,
            "subject_cn": "shop.example.com",
            "issuer": "CN=Test CA",
            "not_after": not_after,
            "days_left": days_left,
            "expired": False,
        },
        "endpoints": [{"ip": "192.0.2.1", "port": 443, "transport": "tcp"}],
        "endpoint_count": 1,
    }
    return Message("msg_1", "netmap.certificate.expires", created, payload)


def test_a_certificate_says_the_days_and_hours_it_has_left() -> None:
    created = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    not_after = created + timedelta(days=2, hours=23, minutes=30)
    title, text = summary_text(
        _certificate_message(created, not_after.strftime("%Y-%m-%dT%H:%M:%SZ"), 2)
    )
    assert title == "netmap: certificate shop.example.com expires in 2 days 23 hours"
    assert "Not after: 2026-12-04T11:30:00Z" in text


def test_a_certificate_whose_time_cannot_be_read_says_its_whole_days() -> None:
    created = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    title, _ = summary_text(_certificate_message(created, "soon", 2))
    assert title == "netmap: certificate shop.example.com expires in 2 days"


def test_a_scanner_back_online_says_how_long_it_was_away() -> None:
    payload = {
        "rule": {"id": 1, "name": "fleet"},
        "scanner": {"id": 3, "name": "dmz-1", "last_seen_at": "2026-12-01T14:15:00+00:00"},
        "status": "online",
        "offline_since": "2026-12-01T12:00:00.000000Z",
        "offline_seconds": 180,
        "offline_for_seconds": 2 * 3600 + 15 * 60,
    }
    created = datetime(2026, 12, 1, 14, 15, 30, tzinfo=UTC)
    title, text = summary_text(Message("msg_2", "netmap.scanner.online", created, payload))
    assert title == "netmap: scanner dmz-1 is back online"
    assert text.splitlines() == [
        "Rule: fleet",
        "scanner dmz-1 is back online",
        "Away for 2 hours 15 minutes: no sign of life from 2026-12-01T12:00:00.000000Z "
        "to 2026-12-01T14:15:00+00:00",
    ]


def test_a_change_message_names_the_fields_that_differ() -> None:
    change = {
        "kind": "reappeared",
        "ip": "192.0.2.1",
        "port": 443,
        "transport": "tcp",
        "task_id": 4,
        "old": {"state": "open", "cert_sha256": "aa"},
        "new": {"state": "open", "cert_sha256": "bb"},
        "changed_fields": ["cert_sha256"],
    }
    created = datetime(2026, 12, 1, tzinfo=UTC)
    payload = {"rule": {"id": 1, "name": "certs"}, "task_name": "edge", "change": change}
    title, text = summary_text(Message("msg_3", "netmap.change.reappeared", created, payload))
    assert title == "netmap: reappeared 192.0.2.1:443/tcp in edge"
    assert "Change: reappeared (cert_sha256)" in text.splitlines()
    digest = {"rule": {"id": 1, "name": "certs"}, "counts": {"reappeared": 1}, "total": 1}
    digest["changes"] = [change]
    _, text = summary_text(Message("msg_4", "netmap.digest", created, digest))
    assert "  reappeared 192.0.2.1:443/tcp (cert_sha256)" in text.splitlines()


def test_an_expired_certificate_says_how_long_ago() -> None:
    created = datetime(2026, 12, 8, 0, 2, 55, tzinfo=UTC)
    message = _certificate_message(created, "2026-12-05T23:45:59Z", -2)
    message.payload["certificate"]["expired"] = True
    title, _ = summary_text(message)
    assert title == "netmap: certificate shop.example.com expired 2 days ago"
    message.payload["certificate"]["not_after"] = "2026-12-07T21:45:59Z"
    title, _ = summary_text(message)
    assert title == "netmap: certificate shop.example.com expired 2 hours 16 minutes ago"


@pytest.mark.parametrize(
    ("left", "days"),
    [
        (timedelta(days=2, hours=23), 2),
        (timedelta(hours=5), 0),
        (-timedelta(hours=5), 0),
        (-timedelta(days=2, hours=17), -2),  # toward zero: timedelta.days said -3
    ],
)
def test_days_left_is_whole_days_toward_zero(left, days) -> None:
    now = datetime(2026, 12, 8, tzinfo=UTC)
    cert = Certificate("ab" * 32, (now + left).strftime("%Y-%m-%dT%H:%M:%SZ"), "x", "y")
    payload = _certificate_payload(load_settings(env={})[0], cert, now)
    assert payload["certificate"]["days_left"] == days
    assert payload["certificate"]["expired"] is (left < timedelta(0))
