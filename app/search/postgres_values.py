"""Value spellings the PostgreSQL search statements share: ``LIKE`` patterns and the
``ip_order`` forms of addresses and blocks (``postgres_queries``, ``postgres_language``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from app.cursors import bad_cursor


def searched_text(text: str) -> str:
    """The text a substring search looks for: ``text`` without control characters."""
    return "".join(ch for ch in text if ch >= " ")


def like_pattern(text: str) -> str:
    escaped = searched_text(text).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def distinct_text_contains(
    column: str,
    pattern: str,
    value: str,
    *,
    grams: str | None = None,
    grammed_by: str = "netmap_text_grams",
    chunks: Sequence[str] | None = None,
    chunked_by: str = "netmap_text_chunks",
) -> str:
    """SQL: the distinct text ``column`` contains the searched value (``value``, bound to
    ``searched_text``; ``pattern``, bound to its ``like_pattern``).

    The first condition is the one an index of the distinct texts answers; the ``ILIKE``
    decides exactly, as it always has. With ``grams`` (SQL of a text array: some or all
    of the value's grams as ``grammed_by`` cuts them; ``postgres_grams`` says which) it
    is those grams among the text's (``netmap_text_grams``, five characters, migration
    2300, or ``netmap_text_wide_grams``, eight, migration 2700): five characters are
    particular enough that an address or a host name has a gram few texts share, where
    each of its trigrams is held by a share of all address-like texts. With ``chunks``
    (SQL of five text arrays: the value's pieces cut from each offset 0-4, or some of
    them) it is, at one of the five alignments, those pieces among the text's chunks as
    ``chunked_by`` cuts them (``netmap_text_chunks``, migration 2400, or
    ``netmap_text_wide_chunks``, migration 2600; ``postgres_grams.Chunking``). Otherwise
    it is the folded value inside the folded text (migration 1900), whose trigrams span
    punctuation, so an address or a host name is not read as a handful of short, common
    words. All are folded character by character, so none ever loses a text that
    contains the value.
    """
    if grams is not None:
        indexed = f"{grammed_by}({column}) @> CAST({grams} AS text[])"
    elif chunks is not None:
        indexed = " OR ".join(
            f"{chunked_by}({column}) @> CAST({part} AS text[])" for part in chunks
        )
    else:
        indexed = f"netmap_text_fold({column}) LIKE '%' || netmap_text_fold({value}) || '%'"
    return f"(({indexed}) AND {column} ILIKE {pattern})"


def ip_order_range(cidr: str) -> tuple[str, str]:
    """The ``ip_order`` bounds of every address ``ip <<= cidr`` accepts.

    The asset search asks for ``ip_order`` between these bounds, so a CIDR search is a
    range of the ordering index (``owner_id`` first in the user view), or of the second
    column of a sort index. The bounds are the ones PostgreSQL itself derives for
    ``<<=`` on a B-tree (the network, then its last address as a host), which hold
    exactly the host addresses of the block; an IPv4 block becomes the same block of
    IPv4-mapped IPv6, as ``ip_order`` spells IPv4. The range may hold more (an IPv6
    ``::ffff:a.b.c.d`` beside IPv4 ``a.b.c.d``); the block's family, asked for beside
    it, decides, so the answer is exactly the one of ``ip <<= cidr``.
    """
    network = ipaddress.ip_network(cidr, strict=False)
    last = ip_order_text(network.broadcast_address)
    if network.version == 4:
        return f"{ip_order_text(network.network_address)}/{96 + network.prefixlen}", last
    return str(network), last


def same_family(column: str, address: str) -> str:
    """SQL: ``column`` (an inet) is of the family of ``address`` (an address or block).

    Beside an ``ip_order`` condition this makes it exact (``ip_order_range``) without
    asking for ``ip`` itself, which would offer the planner the asset views' primary
    keys (they lead with ``ip``, migration 2000) to combine with the ordering index for
    nothing. Written as a function call, which the planner counts as a fixed third:
    ``=`` on an expression without statistics would count as 0.5 %, and a block
    estimated at 0.5 % of its size makes sorting all of it look free next to reading a
    sort index's range."""
    version = ipaddress.ip_network(address, strict=False).version
    return f"int4eq(family({column}), {version})"


def ip_order_text(value: Any) -> str:
    """A cursor's address in ``ip_order`` form; anything else is ``bad_cursor``."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise bad_cursor() from None
    if address.version == 4:
        return f"::ffff:{address}"
    return str(address)
