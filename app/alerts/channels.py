"""Alert channels: where messages go, and the secrets that must never be shown twice.

``webhook``: an http(s) URL; messages are signed per Standard Webhooks with a secret
(``whsec_…``) generated here, shown once in the creation answer and stored encrypted
(``app.identity.secrets_at_rest.SecretBox``). ``rotate_secret`` makes a new one and
keeps the previous one signing too for ``[alerts] secret_overlap_hours``, so receivers
can switch without losing a message. ``email``: recipients, through the reports' SMTP
delivery or ``.eml`` outbox. ``apprise``: an Apprise URL, a secret in itself (it holds
tokens): stored encrypted, never returned or logged. Owners see only their own channels.
"""

from __future__ import annotations

import base64
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.alerts.outbound import address_refused, check_url
from app.config import Settings
from app.db import transaction
from app.errors import Conflict, NotFound, ValidationError
from app.identity.secrets_at_rest import SecretBox
from app.identity.users import User
from app.json_input import checked_name, checked_object

KINDS = ("webhook", "email", "apprise")
MAX_RECIPIENTS = 50
_ADDRESS = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
_FIELDS = {"name", "kind", "url", "recipients"}
_COLUMNS = (
    "id, owner_id, name, kind, url, recipients, secret_encrypted, previous_secret_encrypted, "
    "previous_secret_until, created_at, updated_at"
)


@dataclass(frozen=True)
class Channel:
    """A channel as the senders need it (secrets decrypted only when sending)."""

    id: int
    owner_id: int
    name: str
    kind: str
    url: str | None
    recipients: tuple[str, ...]
    secret_encrypted: str | None
    previous_secret_encrypted: str | None
    previous_secret_until: datetime | None


def _bad(field: str, message: str, code: str = "validation_failed") -> ValidationError:
    return ValidationError(message, code=code, details={"field": field})


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _validate(body: Any, settings: Settings) -> dict[str, Any]:
    checked_object(body, _FIELDS)
    kind = body.get("kind")
    if kind not in KINDS:
        raise _bad("kind", "kind must be one of " + ", ".join(KINDS))
    name = checked_name(body.get("name", kind))
    out: dict[str, Any] = {"kind": kind, "name": name, "url": None, "recipients": []}
    url = body.get("url")
    if kind in ("webhook", "apprise"):
        if not isinstance(url, str) or not 1 <= len(url) <= 2000:
            raise _bad("url", "url must be 1-2000 characters")
        if "recipients" in body:
            raise _bad("recipients", f"a {kind} channel has no recipients")
    if kind == "webhook":
        try:
            _, host, _ = check_url(url)
        except ValueError as exc:
            raise _bad("url", str(exc)) from None
        literal = _literal_address(host)
        if literal and not settings.alerts.allow_private_targets and address_refused(literal):
            raise _bad("url", f"{host} is not a global address (see allow_private_targets)")
        out["url"] = url
    elif kind == "apprise":
        import apprise

        if apprise.Apprise.instantiate(url) is None:
            # The URL is a secret: the answer never echoes it.
            raise _bad("url", "not an Apprise URL this server can send to")
        # Apprise's plain HTTP schemes name their target host as a webhook does: a literal
        # address delivery would refuse is refused now, not at the first alert.
        parts = urlsplit(url)
        if parts.scheme in _APPRISE_HTTP_SCHEMES and parts.hostname:
            literal = _literal_address(parts.hostname)
            if literal and not settings.alerts.allow_private_targets and address_refused(literal):
                raise _bad("url", "its host is not a global address (see allow_private_targets)")
        out["url"] = url
    else:
        if url is not None:
            raise _bad("url", "an email channel has recipients, not a url")
        recipients = body.get("recipients")
        if not isinstance(recipients, list) or not 1 <= len(recipients) <= MAX_RECIPIENTS:
            raise _bad("recipients", f"recipients must list 1-{MAX_RECIPIENTS} addresses")
        for address in recipients:
            if not isinstance(address, str) or not _ADDRESS.match(address):
                raise _bad("recipients", "recipients must be plain email addresses")
        out["recipients"] = list(dict.fromkeys(recipients))
    return out


_APPRISE_HTTP_SCHEMES = frozenset({"json", "jsons", "xml", "xmls", "form", "forms"})


def _literal_address(host: str) -> str | None:
    """The address a URL's host names without DNS: an IP literal, also in the other
    IPv4 spellings a browser or HTTP library reads as one (``2130706433``, ``0x7f000001``,
    ``127.1``), and ``localhost``, which names this host wherever it is resolved."""
    import ipaddress
    import socket

    name = host.strip("[]").rstrip(".").lower()  # a final dot names the same host
    if name == "localhost" or name.endswith(".localhost"):
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    if name and all(ch in "0123456789abcdefxABCDEFX." for ch in name) and name[0].isdigit():
        try:
            return socket.inet_ntoa(socket.inet_aton(name))
        except OSError:
            return None
    return None


def public(row: Any) -> dict[str, Any]:
    """What the API shows of a channel: never a secret, never an Apprise URL."""
    item: dict[str, Any] = {
        "id": row.id,
        "owner_id": row.owner_id,
        "name": row.name,
        "kind": row.kind,
        "created_at": row.created_at.isoformat(),
    }
    if row.kind == "webhook":
        item["url"] = row.url
        item["previous_secret_until"] = (
            row.previous_secret_until.isoformat() if row.previous_secret_until else None
        )
    elif row.kind == "email":
        item["recipients"] = list(row.recipients)
    return item


def create_channel(settings: Settings, user: User, body: Any) -> dict[str, Any]:
    values = _validate(body, settings)
    box = SecretBox(settings.security)
    secret = new_secret() if values["kind"] == "webhook" else None
    url = values["url"]
    if values["kind"] == "apprise":
        url, stored_url = None, box.encrypt(values["url"])
    else:
        stored_url = None
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                f"""
                INSERT INTO alert_channels (owner_id, name, kind, url, recipients,
                                            secret_encrypted)
                VALUES (:owner, :name, :kind, :url, :recipients, :secret)
                RETURNING {_COLUMNS}
                """  # noqa: S608 - column list is a constant
            ),
            {
                "owner": user.id,
                "name": values["name"],
                "kind": values["kind"],
                "url": url,
                "recipients": values["recipients"],
                # The Apprise URL is the channel's secret, kept in the same encrypted column.
                "secret": box.encrypt(secret) if secret else stored_url,
            },
        ).one()
    item = public(row)
    if secret:
        item["secret"] = secret  # shown this once
    return item


def _get(conn: Connection, user: User, channel_id: int, *, lock: bool = False) -> Any:
    row = conn.execute(
        sa.text(
            f"SELECT {_COLUMNS} FROM alert_channels WHERE id = :id AND owner_id = :o"  # noqa: S608 - constants
            + (" FOR UPDATE" if lock else "")
        ),
        {"id": channel_id, "o": user.id},
    ).one_or_none()
    if row is None:
        raise NotFound("channel not found", code="channel_not_found")
    return row


def list_channels(user: User) -> list[dict[str, Any]]:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(f"SELECT {_COLUMNS} FROM alert_channels WHERE owner_id = :o ORDER BY id"),  # noqa: S608 - constants
            {"o": user.id},
        ).all()
    return [public(r) for r in rows]


def get_channel(user: User, channel_id: int) -> dict[str, Any]:
    with transaction() as conn:
        return public(_get(conn, user, channel_id))


def load_channel(user: User, channel_id: int) -> Channel:
    with transaction() as conn:
        return channel_of(_get(conn, user, channel_id))


def channel_of(row: Any) -> Channel:
    return Channel(
        id=row.id,
        owner_id=row.owner_id,
        name=row.name,
        kind=row.kind,
        url=row.url,
        recipients=tuple(row.recipients),
        secret_encrypted=row.secret_encrypted,
        previous_secret_encrypted=row.previous_secret_encrypted,
        previous_secret_until=row.previous_secret_until,
    )


def delete_channel(user: User, channel_id: int) -> None:
    with transaction() as conn:
        _get(conn, user, channel_id, lock=True)
        used = conn.execute(
            sa.text("SELECT id FROM alert_rules WHERE :c = ANY(channel_ids) ORDER BY id LIMIT 1"),
            {"c": channel_id},
        ).scalar()
        if used is not None:
            # 409, as a saved search a report or rule uses: the state, not the request,
            # is what stops it.
            raise Conflict(
                f"rule {used} still sends to this channel",
                code="channel_in_use",
                details={"rule_id": used},
            )
        conn.execute(sa.text("DELETE FROM alert_channels WHERE id = :id"), {"id": channel_id})


def rotate_secret(settings: Settings, user: User, channel_id: int) -> dict[str, Any]:
    """A new signing secret (shown once); the current one keeps signing for the overlap."""
    box = SecretBox(settings.security)
    secret = new_secret()
    with transaction() as conn:
        row = _get(conn, user, channel_id, lock=True)
        if row.kind != "webhook":
            raise _bad("kind", "only a webhook channel has a signing secret")
        row = conn.execute(
            sa.text(
                f"""
                UPDATE alert_channels
                   SET previous_secret_encrypted = secret_encrypted,
                       previous_secret_until = now() + make_interval(secs => :overlap),
                       secret_encrypted = :secret, updated_at = now()
                 WHERE id = :id
                RETURNING {_COLUMNS}
                """  # noqa: S608 - column list is a constant
            ),
            {
                "id": channel_id,
                "secret": box.encrypt(secret),
                "overlap": settings.alerts.secret_overlap_hours * 3600,
            },
        ).one()
    item = public(row)
    item["secret"] = secret
    return item
