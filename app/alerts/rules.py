"""Alert rules: validation and owner-scoped CRUD (docs/alerts.md, "Rules").

A rule names the change kinds it wants (``on``), for ``changed`` optionally the fields
that must differ, a filter (CIDRs, ports, services, products, tasks), the channels
(the caller's own) and a mode (``each`` | ``digest``). ``on`` may also name the
condition kinds ``scanner_offline`` (with ``back_online``), ``run_failed`` and
``certificate_expires`` (with ``days``), evaluated by periodic jobs
(``app.alerts.conditions``). Owners see and change their own rules; an admin may also
make a rule global (it sees every owner's changes). Everything is checked before
anything is written; another owner's rule or channel is "not found".
"""

from __future__ import annotations

import ipaddress
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.alerts.conditions import CONDITION_KINDS
from app.analysis.changes import CHANGE_KINDS
from app.db import transaction
from app.errors import Forbidden, NotFound, ValidationError
from app.identity.users import User
from app.json_input import checked_name, checked_object
from app.saved_searches import references
from app.scan_control.visibility import task_visible
from app.search.documents import FIELD_RULES
from app.search.port import SearchStore, asset_conditions_in_database, asset_matches

MODES = ("each", "digest")
FILTER_KEYS = ("cidrs", "ports", "services", "products", "tasks", "tags", "search", "query")
MAX_LIST = 1000
RULE_KINDS = CHANGE_KINDS + CONDITION_KINDS
MAX_DAYS = 3650
_FIELDS = {
    "name",
    "on",
    "fields",
    "filter",
    "channels",
    "mode",
    "enabled",
    "global",
    "days",
    "back_online",
}
_COLUMNS = (
    "id, owner_id, is_global, name, on_kinds, fields, cidrs, ports, services, products, "
    "task_ids, tags, channel_ids, mode, enabled, days, back_online, search_id, query, "
    "created_at, updated_at"
)


def _bad(field: str, message: str, code: str = "validation_failed") -> ValidationError:
    return ValidationError(message, code=code, details={"field": field})


def _strings(value: Any, field: str, *, allowed: tuple[str, ...] | None = None) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise _bad(field, f"{field} must be a list of at most {MAX_LIST} strings")
    out = []
    for item in value:
        if not isinstance(item, str) or not 1 <= len(item) <= 200:
            raise _bad(field, f"{field} must hold strings of 1-200 characters")
        if allowed is not None and item not in allowed:
            raise _bad(field, f"{field} items must be among " + ", ".join(allowed))
        if item not in out:
            out.append(item)
    return out


def _integers(value: Any, field: str, *, low: int, high: int) -> list[int]:
    if not isinstance(value, list) or len(value) > MAX_LIST:
        raise _bad(field, f"{field} must be a list of at most {MAX_LIST} integers")
    out = []
    for item in value:
        if type(item) is not int or not low <= item <= high:
            raise _bad(field, f"{field} must hold integers {low}-{high}")
        if item not in out:
            out.append(item)
    return out


def _filter(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad("filter", "filter must be an object")
    unknown = sorted(set(value) - set(FILTER_KEYS))
    if unknown:
        raise _bad(f"filter.{unknown[0]}", f"unknown filter {unknown[0]!r}", "unknown_field")
    out: dict[str, Any] = {}
    # A search-language filter: one of the owner's saved searches or a query of the rule's
    # own (app.saved_searches.references), ANDed with the lists.
    out["search_id"], out["query"] = references.checked(
        value.get("search"), value.get("query"), prefix="filter"
    )
    cidrs = []
    for text in _strings(value.get("cidrs", []), "filter.cidrs"):
        try:
            cidrs.append(str(ipaddress.ip_network(text.strip(), strict=False)))
        except ValueError:
            raise _bad("filter.cidrs", f"{text!r} is not an address or CIDR") from None
    out["cidrs"] = cidrs
    out["ports"] = _integers(value.get("ports", []), "filter.ports", low=1, high=65535)
    out["services"] = _strings(value.get("services", []), "filter.services")
    out["products"] = _strings(value.get("products", []), "filter.products")
    out["tasks"] = _integers(value.get("tasks", []), "filter.tasks", low=1, high=2**63 - 1)
    tags = _strings(value.get("tags", []), "filter.tags")
    if tags:
        # Change sets do not carry tags yet (they live on the search store's documents):
        # a rule that cannot be honoured is refused rather than silently never matching.
        raise _bad("filter.tags", "filtering changes by tag is not supported yet")
    out["tags"] = tags
    return out


def validate_rule(body: Any, *, partial: bool = False) -> dict[str, Any]:
    """The rule's fields, checked; ``partial`` for a PATCH (absent fields stay)."""
    checked_object(body, _FIELDS)
    out: dict[str, Any] = {}
    if "name" in body or not partial:
        out["name"] = checked_name(body.get("name"))
    if "on" in body or not partial:
        kinds = _strings(body.get("on"), "on", allowed=RULE_KINDS)
        if not kinds:
            raise _bad("on", "on must name at least one change or condition kind")
        out["on_kinds"] = kinds
    if "fields" in body:
        out["fields"] = _strings(body["fields"], "fields", allowed=tuple(FIELD_RULES))
    if "filter" in body:
        chosen = _filter(body["filter"])
        out.update(
            cidrs=chosen["cidrs"],
            ports=chosen["ports"],
            services=chosen["services"],
            products=chosen["products"],
            task_ids=chosen["tasks"],
            tags=chosen["tags"],
            search_id=chosen["search_id"],
            query=chosen["query"],
        )
    if "channels" not in body and not partial:
        raise _bad("channels", "channels is required: the ids of the channels to send to")
    if "channels" in body:
        channels = _integers(body["channels"], "channels", low=1, high=2**63 - 1)
        if not channels:
            raise _bad("channels", "channels must name at least one channel")
        out["channel_ids"] = channels
    if "mode" in body or not partial:
        mode = body.get("mode", "each")
        if mode not in MODES:
            raise _bad("mode", "mode must be each or digest")
        out["mode"] = mode
    if "days" in body:
        days = body["days"]
        if days is not None and (type(days) is not int or not 1 <= days <= MAX_DAYS):
            raise _bad("days", f"days must be an integer 1-{MAX_DAYS} (or null)")
        out["days"] = days
    for flag, column in (
        ("enabled", "enabled"),
        ("global", "is_global"),
        ("back_online", "back_online"),
    ):
        if flag in body:
            if not isinstance(body[flag], bool):
                raise _bad(flag, f"{flag} must be true or false")
            out[column] = body[flag]
    return out


# Options that mean something for one kind only: (the body's name, the column, the kind,
# the value that says nothing).
_KIND_OPTIONS = (
    ("days", "days", "certificate_expires", None),
    ("back_online", "back_online", "scanner_offline", False),
    ("fields", "fields", "changed", []),
)


def check_kind_options(values: dict[str, Any], current: Any = None) -> None:
    """An option given for a kind the rule is not on is a 400 naming it (it used to be
    stored and never used). A PATCH that takes the kind away drops the option with it:
    the rule's stored value is cleared in ``values``."""
    on_kinds = values.get("on_kinds", list(current.on_kinds) if current is not None else [])
    for name, column, kind, empty in _KIND_OPTIONS:
        if kind in on_kinds:
            continue
        if column in values:
            if values[column] != empty:
                raise _bad(name, f"{name} applies only to rules on {kind}")
        elif current is not None and getattr(current, column) not in (None, False, [], ()):
            values[column] = empty


def check_whole_rule(on_kinds: list[str], days: int | None, task_ids: list[int]) -> None:
    """What a rule needs as a whole (after a PATCH too): ``days`` for
    ``certificate_expires``; a task filter cannot be honoured for certificates (current
    assets are not per task)."""
    if "certificate_expires" in on_kinds:
        if days is None:
            raise _bad("days", "certificate_expires needs days: how many days before expiry")
        if task_ids:
            raise _bad(
                "filter.tasks", "certificate_expires rules cannot filter by task (assets are not)"
            )


def public(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "owner_id": row.owner_id,
        "global": row.is_global,
        "name": row.name,
        "on": list(row.on_kinds),
        "fields": list(row.fields),
        "filter": {
            "cidrs": [str(c) for c in row.cidrs],
            "ports": list(row.ports),
            "services": list(row.services),
            "products": list(row.products),
            "tasks": list(row.task_ids),
            "tags": list(row.tags),
            "search": row.search_id,
            "query": row.query,
        },
        "channels": list(row.channel_ids),
        "mode": row.mode,
        "enabled": row.enabled,
        "days": row.days,
        "back_online": row.back_online,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
    }


def _check_channels(conn: Connection, user: User, channel_ids: list[int]) -> None:
    owned = set(
        conn.execute(
            sa.text("SELECT id FROM alert_channels WHERE owner_id = :o AND id = ANY(:ids)"),
            {"o": user.id, "ids": channel_ids},
        ).scalars()
    )
    missing = [c for c in channel_ids if c not in owned]
    if missing:
        raise NotFound(f"channel {missing[0]} not found", code="channel_not_found")


def _check_tasks(conn: Connection, user: User, values: dict[str, Any]) -> None:
    """Tasks named by the filter must be ones the user sees (404 naming the field, as a
    report definition's task is): a rule on a task that does not exist never fires."""
    for task_id in values.get("task_ids") or ():
        if not task_visible(conn, user, task_id):
            raise NotFound(
                f"task {task_id} not found",
                code="task_not_found",
                details={"field": "filter.tasks"},
            )


def _check_search(conn: Connection, values: dict[str, Any], owner_id: int) -> None:
    """A saved search named by the filter must be the rule owner's (404 naming the field)."""
    if values.get("search_id") is not None:
        references.check_owned(conn, owner_id, values["search_id"], field="filter.search")


def _check_store(values: dict[str, Any], store: SearchStore) -> None:
    # The search filter is tested against the changed endpoints' current assets by the
    # search store: inside the analysis's statement (PostgreSQL, capability
    # ASSET_CONDITIONS_IN_DATABASE) or right after it commits (Elasticsearch,
    # ASSET_MATCHES). A store that can do neither could never match such a rule, so it
    # is refused rather than kept silently deaf.
    if asset_conditions_in_database(store) is not None or asset_matches(store) is not None:
        return
    for key, field in (("search_id", "filter.search"), ("query", "filter.query")):
        if values.get(key) is not None:
            raise _bad(
                field,
                "this search store cannot filter changes by a search",
                "unsupported_filter",
            )


def _visible(user: User) -> str:
    # Owners see their own rules; an admin also sees (and manages) global rules.
    return "(owner_id = :uid OR (:admin AND is_global))"


def create_rule(user: User, body: Any, *, store: SearchStore) -> dict[str, Any]:
    """Create a rule; ``store`` is the search store, which must be able to test a rule's
    search filter (``_check_store``)."""
    values = validate_rule(body)
    if values.get("is_global") and not user.is_admin:
        raise Forbidden("only an admin may make a global rule", code="forbidden")
    check_kind_options(values)
    check_whole_rule(values["on_kinds"], values.get("days"), values.get("task_ids", []))
    _check_store(values, store)
    with transaction() as conn:
        _check_channels(conn, user, values["channel_ids"])
        _check_search(conn, values, user.id)
        _check_tasks(conn, user, values)
        row = conn.execute(
            sa.text(
                f"""
                INSERT INTO alert_rules (owner_id, is_global, name, on_kinds, fields, cidrs,
                                         ports, services, products, task_ids, tags,
                                         channel_ids, mode, enabled, days, back_online,
                                         search_id, query)
                VALUES (:owner, :is_global, :name, :on_kinds, :fields, CAST(:cidrs AS cidr[]),
                        :ports, :services, :products, :task_ids, :tags, :channel_ids, :mode,
                        :enabled, :days, :back_online, :search_id, :query)
                RETURNING {_COLUMNS}
                """  # noqa: S608 - column list is a constant
            ),
            {
                "owner": user.id,
                "is_global": values.get("is_global", False),
                "fields": values.get("fields", []),
                "cidrs": values.get("cidrs", []),
                "ports": values.get("ports", []),
                "services": values.get("services", []),
                "products": values.get("products", []),
                "task_ids": values.get("task_ids", []),
                "tags": values.get("tags", []),
                "enabled": values.get("enabled", True),
                "days": values.get("days"),
                "back_online": values.get("back_online", False),
                "search_id": values.get("search_id"),
                "query": values.get("query"),
                **{k: values[k] for k in ("name", "on_kinds", "channel_ids", "mode")},
            },
        ).one()
    return public(row)


def list_rules(user: User) -> list[dict[str, Any]]:
    with transaction() as conn:
        rows = conn.execute(
            sa.text(f"SELECT {_COLUMNS} FROM alert_rules WHERE {_visible(user)} ORDER BY id"),  # noqa: S608 - constants
            {"uid": user.id, "admin": user.is_admin},
        ).all()
    return [public(r) for r in rows]


def _get(conn: Connection, user: User, rule_id: int, *, lock: bool = False) -> Any:
    row = conn.execute(
        sa.text(
            f"SELECT {_COLUMNS} FROM alert_rules WHERE id = :id AND {_visible(user)}"  # noqa: S608 - constants
            + (" FOR UPDATE" if lock else "")
        ),
        {"id": rule_id, "uid": user.id, "admin": user.is_admin},
    ).one_or_none()
    if row is None:
        raise NotFound("rule not found", code="rule_not_found")
    return row


def get_rule(user: User, rule_id: int) -> dict[str, Any]:
    with transaction() as conn:
        return public(_get(conn, user, rule_id))


def update_rule(user: User, rule_id: int, body: Any, *, store: SearchStore) -> dict[str, Any]:
    values = validate_rule(body, partial=True)
    if values.get("is_global") and not user.is_admin:
        raise Forbidden("only an admin may make a global rule", code="forbidden")
    _check_store(values, store)
    with transaction() as conn:
        current = _get(conn, user, rule_id, lock=True)
        _check_search(conn, values, current.owner_id)
        _check_tasks(conn, user, values)
        check_kind_options(values, current)
        check_whole_rule(
            values.get("on_kinds", list(current.on_kinds)),
            values.get("days", current.days),
            values.get("task_ids", list(current.task_ids)),
        )
        if "channel_ids" in values:
            _check_channels(conn, user, values["channel_ids"])
        if values:
            sets = ", ".join(
                f"{k} = CAST(:{k} AS cidr[])" if k == "cidrs" else f"{k} = :{k}" for k in values
            )
            conn.execute(
                sa.text(f"UPDATE alert_rules SET {sets}, updated_at = now() WHERE id = :id"),  # noqa: S608 - keys come from validate_rule
                {**values, "id": rule_id},
            )
        return public(_get(conn, user, rule_id))


def delete_rule(user: User, rule_id: int) -> None:
    with transaction() as conn:
        _get(conn, user, rule_id, lock=True)
        conn.execute(sa.text("DELETE FROM alert_rules WHERE id = :id"), {"id": rule_id})
