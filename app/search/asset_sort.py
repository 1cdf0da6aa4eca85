"""Sort orders of the asset search and their keyset cursors (WEB-12), shared by both adapters.

An asset list is ordered by one sort key and then by the asset's address, port and
transport, which together name one asset of a view, so every order is total and a
keyset page ("after this position") neither loses nor repeats a row, however many
assets share a port or a last-seen time:

* ``ip``: (address, port, transport), today's order (IPv4 as IPv4-mapped IPv6);
* ``port``: (port, address, transport);
* ``last_seen``: (last_seen, address, port, transport); newest first by default;
* ``service``: (service, address, port, transport); a missing service sorts as the
  empty string, and names compare by code point (PostgreSQL ``COLLATE "C"``, an
  Elasticsearch ``keyword``), so both adapters agree on upper and lower case.

``desc`` reverses the whole tuple (tiebreakers included), so one index read
backwards serves it. A cursor carries the position only; it is signed under a salt
of its sort and order, so a cursor of another sort or order is ``invalid_cursor``
rather than a position read with the wrong meaning. The key of ``last_seen`` travels
as integer microseconds since the epoch, exact on both adapters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from app.cursors import bad_cursor, cursor_int, cursor_str, decode_cursor, encode_cursor
from app.search.query_values import invalid_parameter

ASSET_SORTS = ("ip", "port", "last_seen", "service")
ASSET_ORDERS = ("asc", "desc")
# Newest first is what a list by "last seen" is read for.
DEFAULT_ORDER = {"ip": "asc", "port": "asc", "last_seen": "desc", "service": "asc"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True)
class AssetSort:
    """A valid (sort, order) pair."""

    sort: str
    order: str

    @property
    def descending(self) -> bool:
        return self.order == "desc"

    @property
    def cursor_kind(self) -> str:
        # The default order keeps the kind cursors had before sorting existed, so a
        # cursor issued by the previous release still pages.
        if (self.sort, self.order) == ("ip", "asc"):
            return "assets"
        return f"assets.{self.sort}.{self.order}"


@dataclass(frozen=True)
class AssetPosition:
    """The position after one asset: its sort key (``None`` for ``ip``/``port``), address
    (as the adapter returned it), port and transport."""

    key: int | str | None
    ip: str
    port: int
    transport: str


def asset_sort(sort: str | None, order: str | None) -> AssetSort:
    """The (sort, order) asked for; an unknown value is a 400 naming its parameter."""
    sort = sort or "ip"
    if sort not in ASSET_SORTS:
        raise invalid_parameter("sort", "sort must be one of " + ", ".join(ASSET_SORTS))
    order = order or DEFAULT_ORDER[sort]
    if order not in ASSET_ORDERS:
        raise invalid_parameter("order", "order must be asc or desc")
    return AssetSort(sort, order)


def has_key(sort: str) -> bool:
    """Whether the sort key is a column of its own (``port`` is part of every position)."""
    return sort in ("last_seen", "service")


def micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    return _EPOCH + value * _MICROSECOND


def sort_key(sort: str, last_seen: datetime, service: str | None) -> int | str | None:
    """The cursor key of an asset under ``sort``."""
    if sort == "last_seen":
        return micros(last_seen)
    if sort == "service":
        return service or ""
    return None


def encode_asset_cursor(order: AssetSort, position: AssetPosition) -> str:
    values: dict[str, Any] = {
        "ip": position.ip,
        "port": position.port,
        "transport": position.transport,
    }
    if has_key(order.sort):
        values["k"] = position.key
    return encode_cursor(order.cursor_kind, values)


def decode_asset_cursor(order: AssetSort, cursor: str | None) -> AssetPosition | None:
    """The position of a cursor issued for this sort and order (``None``: first page)."""
    values = decode_cursor(order.cursor_kind, cursor)
    if values is None:
        return None
    key: int | str | None = None
    if order.sort == "last_seen":
        key = cursor_int(values, "k")
        try:
            from_micros(key)
        except OverflowError:
            raise bad_cursor() from None
    elif order.sort == "service":
        key = cursor_str(values, "k")
    return AssetPosition(
        key=key,
        ip=cursor_str(values, "ip"),
        port=cursor_int(values, "port"),
        transport=cursor_str(values, "transport"),
    )
