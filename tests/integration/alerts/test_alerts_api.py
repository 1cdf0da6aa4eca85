"""Alerts API and console: validation, scoping, secrets shown once, test sends, rotation,
and the outbound address rule (docs/alerts.md)."""

from __future__ import annotations

import logging
import re
import socket
import threading

import pytest
import sqlalchemy as sa

from app.alerts import outbound, senders
from app.alerts.channels import Channel, create_channel, load_channel
from app.alerts.outbound import OutboundPolicy, PermanentDeliveryError
from app.db import transaction
from app.identity.users import User
from tests.integration.web.test_console_pages import _csrf, _user_client
from tests.support.webhook_receiver import WebhookReceiver


def _hook(user, receiver: WebhookReceiver) -> dict:
    created = user.post("/api/alerts/channels", json={"kind": "webhook", "url": receiver.url})
    assert created.status_code == 201, created.get_json()
    channel = created.get_json()["channel"]
    receiver.secrets.append(channel["secret"])
    return channel


def test_a_webhook_secret_is_shown_once_and_signs_the_test_message(api, receiver) -> None:
    alice = api.user()
    channel = _hook(alice, receiver)
    assert channel["secret"].startswith("whsec_")
    shown = alice.get(f"/api/alerts/channels/{channel['id']}").get_json()["channel"]
    assert "secret" not in shown and shown["url"] == receiver.url
    assert all("secret" not in c for c in alice.get("/api/alerts/channels").get_json()["items"])
    with transaction() as conn:
        stored = conn.execute(sa.text("SELECT secret_encrypted FROM alert_channels")).scalar()
    assert channel["secret"] not in stored

    tested = alice.post(f"/api/alerts/channels/{channel['id']}/test").get_json()
    assert tested["ok"] is True, tested
    (hook,) = receiver.hooks()
    assert hook.verified and hook.json["type"] == "netmap.test"
    assert hook.headers["webhook-id"] == tested["id"]
    # Another user can neither see nor test it.
    bob = api.user()
    assert bob.get(f"/api/alerts/channels/{channel['id']}").status_code == 404
    assert bob.post(f"/api/alerts/channels/{channel['id']}/test").status_code == 404


def test_a_rotated_secret_overlaps_with_the_previous_one(api, receiver) -> None:
    alice = api.user()
    channel = _hook(alice, receiver)
    old = channel["secret"]
    rotated = alice.post(f"/api/alerts/channels/{channel['id']}/rotate-secret").get_json()
    new = rotated["channel"]["secret"]
    assert new != old and rotated["channel"]["previous_secret_until"]
    receiver.secrets[:] = [new]
    assert alice.post(f"/api/alerts/channels/{channel['id']}/test").get_json()["ok"]
    receiver.secrets[:] = [old]  # a receiver not switched yet still verifies
    assert alice.post(f"/api/alerts/channels/{channel['id']}/test").get_json()["ok"]
    assert [h.verified for h in receiver.hooks()] == [True, True]
    assert len(receiver.hooks()[0].headers["webhook-signature"].split(" ")) == 2


def test_an_apprise_url_is_never_shown_or_logged(api, receiver, caplog) -> None:
    alice = api.user()
    url = receiver.apprise_url + "?token=s3cr3t-token"
    created = alice.post("/api/alerts/channels", json={"kind": "apprise", "url": url})
    assert created.status_code == 201
    channel = created.get_json()["channel"]
    assert "s3cr3t" not in created.get_data(as_text=True)
    assert "s3cr3t" not in alice.get("/api/alerts/channels").get_data(as_text=True)
    with caplog.at_level(logging.DEBUG):
        tested = alice.post(f"/api/alerts/channels/{channel['id']}/test").get_json()
    assert tested["ok"] is True, tested
    assert "s3cr3t" not in caplog.text and "s3cr3t" not in str(tested)
    (posted,) = receiver.apprise_posts()
    assert posted.json["title"] == "netmap test message"
    with transaction() as conn:
        row = conn.execute(sa.text("SELECT url, secret_encrypted FROM alert_channels")).one()
    assert row.url is None and "s3cr3t" not in row.secret_encrypted
    refused = alice.post("/api/alerts/channels", json={"kind": "apprise", "url": "nope://x"})
    assert refused.status_code == 400 and "nope://x" not in refused.get_data(as_text=True)


def test_email_test_message_reaches_the_smtp_server(api, mailbox) -> None:
    alice = api.user()
    created = alice.post(
        "/api/alerts/channels", json={"kind": "email", "recipients": ["a@example.test"]}
    )
    channel = created.get_json()["channel"]
    assert alice.post(f"/api/alerts/channels/{channel['id']}/test").get_json()["ok"]
    ((recipients, content),) = mailbox.messages
    assert recipients == ["a@example.test"] and b"netmap test message" in content


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "on": ["closed"], "channels": [1]}, "on"),
        ({"name": "x", "on": [], "channels": [1]}, "on"),
        ({"name": "x", "on": ["new"], "channels": []}, "channels"),
        ({"name": "x", "on": ["new"], "channels": [1], "mode": "often"}, "mode"),
        ({"name": "x", "on": ["new"], "channels": [1], "fields": ["colour"]}, "fields"),
        ({"name": "x", "on": ["new"], "channels": [1], "filter": {"cidrs": ["x"]}}, "filter.cidrs"),
        ({"name": "x", "on": ["new"], "channels": [1], "filter": {"ports": [0]}}, "filter.ports"),
        ({"name": "x", "on": ["new"], "channels": [1], "filter": {"tags": ["a"]}}, "filter.tags"),
        ({"name": "x", "on": ["new"], "channels": [1], "colour": 1}, "colour"),
        ({"name": "", "on": ["new"], "channels": [1]}, "name"),
        (["not", "an", "object"], None),
        # channels are required; options of a kind the rule is not on are refused.
        ({"name": "x", "on": ["new"]}, "channels"),
        ({"name": "x", "on": ["new"], "channels": [1], "days": 30}, "days"),
        ({"name": "x", "on": ["new"], "channels": [1], "back_online": True}, "back_online"),
        ({"name": "x", "on": ["gone"], "channels": [1], "fields": ["version"]}, "fields"),
    ],
)
def test_bad_rules_are_refused_by_field(api, body, field) -> None:
    response = api.user().post("/api/alerts/rules", json=body)
    assert response.status_code == 400, response.get_json()
    if field is not None:
        assert response.get_json()["error"]["details"]["field"] == field


def test_rules_are_owner_scoped_and_only_admins_make_global_ones(api, receiver) -> None:
    alice, bob, admin = api.user(), api.user(), api.admin()
    channel = _hook(alice, receiver)
    body = {
        "name": "web",
        "on": ["new", "changed"],
        "fields": ["product", "version"],
        "filter": {"cidrs": ["192.0.2.0/24"], "ports": [80, 443], "services": ["http"]},
        "channels": [channel["id"]],
        "mode": "digest",
    }
    created = alice.post("/api/alerts/rules", json=body)
    assert created.status_code == 201
    rule = created.get_json()["rule"]
    assert rule["filter"]["cidrs"] == ["192.0.2.0/24"] and rule["mode"] == "digest"
    assert bob.get(f"/api/alerts/rules/{rule['id']}").status_code == 404
    assert bob.get("/api/alerts/rules").get_json()["items"] == []
    # Bob cannot send to Alice's channel.
    stolen = bob.post("/api/alerts/rules", json={**body, "channels": [channel["id"]]})
    assert stolen.status_code == 404
    # A task filter names one's own tasks: another's or none at all is a 404 at the field.
    task = alice.post("/api/tasks", json={"name": "t", "targets": ["192.0.2.1"], "ports": "80"})
    task_id = task.get_json()["task"]["id"]
    bob_hook = _hook(bob, receiver)
    for owner, hook, tasks in ((bob, bob_hook, [task_id]), (alice, channel, [task_id + 1000])):
        refused = owner.post(
            "/api/alerts/rules",
            json={**body, "channels": [hook["id"]], "filter": {"tasks": tasks}},
        )
        assert refused.status_code == 404, refused.get_json()
        assert refused.get_json()["error"]["details"] == {"field": "filter.tasks"}
    mine = alice.post("/api/alerts/rules", json={**body, "filter": {"tasks": [task_id]}})
    assert mine.status_code == 201
    unknown = alice.patch(
        f"/api/alerts/rules/{mine.get_json()['rule']['id']}",
        json={"filter": {"tasks": [task_id + 1000]}},
    )
    assert unknown.status_code == 404
    assert unknown.get_json()["error"]["details"] == {"field": "filter.tasks"}
    assert alice.post("/api/alerts/rules", json={**body, "global": True}).status_code == 403

    patched = alice.patch(
        f"/api/alerts/rules/{rule['id']}", json={"enabled": False, "on": ["gone"]}
    )
    assert patched.get_json()["rule"]["enabled"] is False
    assert patched.get_json()["rule"]["on"] == ["gone"]
    assert alice.patch(f"/api/alerts/rules/{rule['id']}", json={"mode": "x"}).status_code == 400
    in_use = alice.delete(f"/api/alerts/channels/{channel['id']}")
    assert in_use.status_code == 409 and in_use.get_json()["error"]["code"] == "channel_in_use"
    assert bob.delete(f"/api/alerts/rules/{rule['id']}").status_code == 404
    assert alice.delete(f"/api/alerts/rules/{rule['id']}").status_code == 204
    assert alice.get(f"/api/alerts/rules/{rule['id']}").status_code == 404

    admin_hook = _hook(admin, receiver)
    made = admin.post(
        "/api/alerts/rules",
        json={"name": "all", "on": ["gone"], "channels": [admin_hook["id"]], "global": True},
    )
    assert made.status_code == 201 and made.get_json()["rule"]["global"] is True
    assert bob.get("/api/alerts/deliveries?status=lost").status_code == 400


def test_private_targets_are_refused_unless_allowed(api, settings, receiver) -> None:
    strict = settings.replace(alerts={"allow_private_targets": False})
    user = User(id=api.create_user()["id"], username="u", is_admin=False, disabled=False)
    with pytest.raises(Exception, match="not a global address"):
        create_channel(strict, user, {"kind": "webhook", "url": receiver.url})
    # localhost names this host wherever it is resolved: refused when made, too.
    by_name = receiver.url.replace("127.0.0.1", "localhost")
    with pytest.raises(Exception, match="not a global address"):
        create_channel(strict, user, {"kind": "webhook", "url": by_name})
    # A name that resolves to loopback (a DNS answer can change after creation) is
    # refused at the connection.
    channel = create_channel(strict, user, {"kind": "webhook", "url": "https://hooks.example/x"})
    loaded = Channel(channel["id"], user.id, "hook", "webhook", by_name, (), None, None, None)
    message = senders.Message("msg_x", "netmap.test", _now(), {})
    with pytest.raises(PermanentDeliveryError, match="loopback"):
        senders.send(strict, loaded, message)
    assert receiver.received == []
    for address, reason in (
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("10.0.0.1", "private"),
        ("::ffff:192.168.0.1", "private"),
        ("fe80::1", "link-local"),
        ("8.8.8.8", None),
    ):
        assert outbound.address_refused(address) == reason


def test_redirects_to_another_host_are_not_followed(receiver) -> None:
    policy = OutboundPolicy(allow_private=True, timeout_seconds=5, max_response_bytes=1024)
    receiver.redirect_to = "http://example.test/elsewhere"
    with pytest.raises(PermanentDeliveryError, match="another host"):
        outbound.post(receiver.url, b"{}", {}, policy)
    assert len(receiver.received) == 1
    # The same host, another port, is another host too.
    receiver.redirect_to = f"http://127.0.0.1:{receiver.port + 1}/hook"
    with pytest.raises(PermanentDeliveryError, match="another host"):
        outbound.post(receiver.url, b"{}", {}, policy)
    # A redirect on the same origin is followed (here: round and round, then refused).
    receiver.redirect_to = "/hook/again"
    with pytest.raises(PermanentDeliveryError, match="too many redirects"):
        outbound.post(receiver.url, b"{}", {}, policy)
    assert len(receiver.received) == 2 + outbound.MAX_REDIRECTS + 1


def test_the_console_page_lists_rules_channels_and_tests_a_channel(api, receiver) -> None:
    client, created = _user_client(api)
    alice = api.login(created["username"])
    channel = _hook(alice, receiver)
    alice.post(
        "/api/alerts/rules",
        json={"name": "<b>gone</b>", "on": ["gone"], "channels": [channel["id"]]},
    )
    page = client.get("/console/alerts")
    assert page.status_code == 200
    assert "&lt;b&gt;gone&lt;/b&gt;" in page.text
    # A webhook's path often holds its secret (Slack, Teams): only its origin is shown.
    assert f"http://127.0.0.1:{receiver.port}/…" in page.text and receiver.url not in page.text
    test_path = f"/console/alerts/channels/{channel['id']}/test"
    assert client.post(test_path, data={}).status_code == 403  # no CSRF token
    tested = client.post(test_path, data={"csrf_token": _csrf(page.text)})
    assert tested.status_code == 200 and "sent" in tested.text
    assert [h.verified for h in receiver.hooks()] == [True]


def test_channels_are_made_on_the_console_page_with_the_apis_checks(api, receiver) -> None:
    client, created = _user_client(api)
    alice = api.login(created["username"])
    page = client.get("/console/alerts")
    assert 'id="channel-form"' in page.text and "POST /api/alerts/channels" not in page.text

    def submit(**form):
        return client.post(
            "/console/alerts/channels", data={**form, "csrf_token": _csrf(page.text)}
        )

    # Refused fields are named next to the field, the input kept; nothing is made.
    bad = submit(name="ops", kind="email", recipients="ops@example.com\nnot an address")
    assert bad.status_code == 400
    assert 'id="channel-recipients-error"' in bad.text and "not an address" in bad.text
    hidden = submit(name="chat", kind="apprise", url="nonsense://secret-token")
    assert hidden.status_code == 400 and 'id="channel-url-error"' in hidden.text
    assert "secret-token" not in hidden.text  # an Apprise URL is a secret: never echoed
    assert alice.get("/api/alerts/channels").get_json()["items"] == []

    mail = submit(name="ops", kind="email", recipients="a@example.com, b@example.com\n")
    assert mail.status_code == 201 and 'id="new-channel-created"' in mail.text
    assert 'id="channel-secret"' not in mail.text
    hook = submit(name="hook", kind="webhook", url=receiver.url)
    assert hook.status_code == 201 and hook.headers["Cache-Control"] == "no-store"
    secret = re.search(r'id="channel-secret">(whsec_[^<]+)<', hook.text).group(1)
    made = {c["name"]: c for c in alice.get("/api/alerts/channels").get_json()["items"]}
    assert made["ops"]["kind"] == "email"
    assert made["ops"]["recipients"] == ["a@example.com", "b@example.com"]
    assert made["hook"]["url"] == receiver.url and "secret" not in made["hook"]
    assert secret not in client.get("/console/alerts").text  # shown once, on that answer
    # The secret shown is the one that signs: the receiver verifies a test message with it.
    receiver.secrets.append(secret)
    tested = client.post(
        f"/console/alerts/channels/{made['hook']['id']}/test",
        data={"csrf_token": _csrf(page.text)},
    )
    assert tested.status_code == 200 and "sent" in tested.text
    assert [h.verified for h in receiver.hooks()] == [True]


def _console_rule(api, receiver):
    """A signed-in console session, its user's API client, a webhook channel and a rule
    sending to it."""
    client, created = _user_client(api)
    alice = api.login(created["username"])
    channel = _hook(alice, receiver)
    rule = alice.post(
        "/api/alerts/rules", json={"name": "noisy", "on": ["new"], "channels": [channel["id"]]}
    ).get_json()["rule"]
    return client, alice, channel, rule


def test_a_rule_is_disabled_enabled_and_deleted_from_its_row_on_the_console(api, receiver) -> None:
    client, alice, channel, rule = _console_rule(api, receiver)
    page = client.get("/console/alerts")
    assert 'data-rule-action="disable"' in page.text and 'data-rule-action="delete"' in page.text
    assert f"<td>#{channel['id']} {channel['name']}</td>" in page.text  # its channel, by name
    token = {"csrf_token": _csrf(page.text)}
    base = f"/console/alerts/rules/{rule['id']}"

    def enabled() -> bool:
        return alice.get(f"/api/alerts/rules/{rule['id']}").get_json()["rule"]["enabled"]

    assert client.post(f"{base}/disable", data={}).status_code == 403  # no CSRF token
    assert enabled()
    # Another user's session cannot reach the rule, nor change it.
    other, _ = _user_client(api)
    other_token = {"csrf_token": _csrf(other.get("/console/alerts").text)}
    assert other.post(f"{base}/disable", data=other_token).status_code == 404
    assert other.post(f"{base}/delete", data=other_token).status_code == 404
    assert enabled()
    assert client.post(f"{base}/disable", data=token).status_code == 303
    assert not enabled()
    page = client.get("/console/alerts")
    assert 'data-rule-action="enable"' in page.text
    assert client.post(f"{base}/enable", data=token).status_code == 303
    assert enabled()
    assert client.post(f"{base}/delete", data=token).status_code == 303
    assert alice.get(f"/api/alerts/rules/{rule['id']}").status_code == 404
    assert "No rules yet." in client.get("/console/alerts").text
    assert client.post(f"{base}/enable", data=token).status_code == 404


def test_a_channel_no_rule_sends_to_is_deleted_from_its_row_on_the_console(api, receiver) -> None:
    client, alice, channel, rule = _console_rule(api, receiver)
    page = client.get("/console/alerts")
    assert 'data-channel-action="delete"' in page.text
    token = {"csrf_token": _csrf(page.text)}
    path = f"/console/alerts/channels/{channel['id']}/delete"
    assert client.post(path, data={}).status_code == 403  # no CSRF token
    other, _ = _user_client(api)
    assert (
        other.post(path, data={"csrf_token": _csrf(other.get("/console/alerts").text)}).status_code
        == 404
    )
    # A rule still sends to it: refused, said at the channel list, nothing removed.
    refused = client.post(path, data=token)
    assert refused.status_code == 409
    assert f"Channel #{channel['id']}: rule {rule['id']} still sends to this channel." in (
        refused.text
    )
    assert alice.get(f"/api/alerts/channels/{channel['id']}").status_code == 200
    assert alice.delete(f"/api/alerts/rules/{rule['id']}").status_code == 204
    assert client.post(path, data=token).status_code == 303
    assert alice.get(f"/api/alerts/channels/{channel['id']}").status_code == 404
    assert "No channels yet." in client.get("/console/alerts").text


def test_condition_rules_are_made_on_the_console_page(api, receiver) -> None:
    client, created = _user_client(api)
    alice = api.login(created["username"])
    channel = _hook(alice, receiver)
    page = client.get("/console/alerts")
    for kind in ("scanner_offline", "run_failed", "certificate_expires"):
        assert f'name="on" value="{kind}"' in page.text
    token = _csrf(page.text)

    def submit(**form):
        data = {"name": "r", "mode": "each", "channels": str(channel["id"]), **form}
        return client.post("/console/alerts/rules", data={**data, "csrf_token": token})

    # Certificates need days: refused next to the days field, nothing made.
    missing = submit(on="certificate_expires")
    assert missing.status_code == 400
    assert 'id="rule-days-error">certificate_expires needs days' in missing.text
    wrong = submit(on="certificate_expires", days="soon")
    assert wrong.status_code == 400 and 'id="rule-days-error">days must be a whole number' in (
        wrong.text
    )
    assert 'value="soon"' in wrong.text  # the input kept
    assert alice.get("/api/alerts/rules").get_json()["items"] == []

    assert submit(on="certificate_expires", days="30").status_code == 303
    assert submit(on=["scanner_offline", "gone"], back_online="1").status_code == 303
    assert submit(on="run_failed", back_online="1").status_code == 303  # not a scanner rule
    made = {frozenset(r["on"]): r for r in alice.get("/api/alerts/rules").get_json()["items"]}
    assert made[frozenset({"certificate_expires"})]["days"] == 30
    assert made[frozenset({"gone", "scanner_offline"})]["back_online"] is True
    assert made[frozenset({"run_failed"})]["back_online"] is False


def _now():
    from datetime import UTC, datetime

    return datetime.now(UTC)


def test_apprise_connections_are_judged_on_the_address_connected(
    api, settings, receiver, monkeypatch
) -> None:
    # The name passes no check of its own: only the address the plugin's own connection
    # goes to is judged, after the library's resolution (here: a name that answers
    # loopback, as a rebinding name would at connection time).
    real_getaddrinfo = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        return real_getaddrinfo(
            "127.0.0.1" if host == "hooks.example.test" else host, *args, **kwargs
        )

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    user = User(id=api.create_user()["id"], username="u", is_admin=False, disabled=False)
    url = receiver.apprise_url.replace("127.0.0.1", "hooks.example.test")
    created = create_channel(settings, user, {"kind": "apprise", "url": url})
    channel = load_channel(user, created["id"])
    message = senders.Message("msg_y", "netmap.test", _now(), {})
    strict = settings.replace(alerts={"allow_private_targets": False})
    with pytest.raises(PermanentDeliveryError, match=r"127\.0\.0\.1 \(loopback\)"):
        senders.send(strict, channel, message)
    assert receiver.apprise_posts() == []
    assert senders.send(settings, channel, message) == "sent"
    assert len(receiver.apprise_posts()) == 1


def test_the_connection_guard_holds_in_its_block_and_context_only(receiver) -> None:
    strict = OutboundPolicy(allow_private=False, timeout_seconds=5, max_response_bytes=1024)
    seen_elsewhere: list[str] = []

    def other_thread() -> None:
        socket.create_connection(("127.0.0.1", receiver.port), timeout=5).close()
        seen_elsewhere.append("connected")

    with outbound.guarded_connections(strict) as refused:
        with pytest.raises(outbound.RefusedAddress):
            socket.create_connection(("127.0.0.1", receiver.port), timeout=5)
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert refused == ["127.0.0.1 (loopback)"] and seen_elsewhere == ["connected"]
    socket.create_connection(("127.0.0.1", receiver.port), timeout=5).close()


def test_a_kind_taken_away_takes_its_options_with_it(api, receiver) -> None:
    alice = api.user()
    channel = _hook(alice, receiver)["id"]
    made = alice.post(
        "/api/alerts/rules",
        json={"name": "certs", "on": ["certificate_expires"], "days": 30, "channels": [channel]},
    )
    assert made.status_code == 201, made.get_json()
    rule = made.get_json()["rule"]
    changed = alice.patch(f"/api/alerts/rules/{rule['id']}", json={"on": ["new"]})
    assert changed.status_code == 200, changed.get_json()
    assert changed.get_json()["rule"]["days"] is None
    # Given in the same PATCH, a kind's option without its kind is refused, and nothing changes.
    refused = alice.patch(f"/api/alerts/rules/{rule['id']}", json={"name": "n", "days": 7})
    assert refused.status_code == 400
    assert refused.get_json()["error"]["details"]["field"] == "days"
    assert alice.get(f"/api/alerts/rules/{rule['id']}").get_json()["rule"]["name"] == "certs"
    missing = alice.post("/api/alerts/rules", json={"name": "x", "on": ["new"]})
    assert missing.get_json()["error"]["message"] == (
        "channels is required: the ids of the channels to send to"
    )
