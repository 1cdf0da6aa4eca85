"""The asset search language: its grammar, its fields and the checked tree it parses to.

``parse_query(text, now=…)`` turns ``port:443 service:https -port:22 cert.expires:<30d
"login page" nginx`` into a ``Node`` tree (``And`` / ``Or`` / ``Not`` of ``Clause`` and
``Text``) whose values are already read and checked, so the adapters' translators
(``app.search.postgres_language``, ``app.search.elasticsearch_language``) only spell
them. Every mistake is a ``ValidationError`` (400, code ``invalid_query``) naming the
column (1-based) and what was expected there; nothing in a query can reach a store
unread. The language is documented field by field in docs/search-language.md.

Grammar (lark, LALR): clauses side by side are ANDed; ``OR`` (upper case) binds looser
than that; ``-`` or ``NOT`` negates one clause or a parenthesised group. A word or a
quoted phrase alone is free text (a case-insensitive substring of banner, product or
hostname, as the ``q`` parameter always was).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, VisitError

from app.errors import ValidationError
from app.search.ids import normalise_ip

MAX_QUERY_CHARS = 1000
MAX_CLAUSES = 64
# Groups and negations nest at most this deep: Elasticsearch refuses bool queries nested
# deeper than 30 (``indices.query.bool.max_nested_depth``), and an And/Or/Not costs one
# level of ``bool`` each in the translation.
MAX_DEPTH = 12

GRAMMAR = r"""
?start: or_expr?
?or_expr: and_expr (_OR and_expr)*
?and_expr: unary+
?unary: NEG unary -> negated
      | _NOT unary -> negated
      | atom
?atom: "(" or_expr ")"
     | FIELD OP? value -> clause
     | value -> text
?value: PHRASE | WORD

_OR.3: /OR(?=[\s(]|$)/
_NOT.3: /NOT(?=[\s(])/
FIELD.2: /[A-Za-z_][A-Za-z0-9_.]*(?=:)/ ":"
OP.3: ">=" | "<=" | ">" | "<"
NEG: /-(?=\S)/
PHRASE: /"([^"\\]|\\.)*"/
WORD: /[^\s"()\-][^\s"()]*/

%ignore /\s+/
"""

_PARSER = Lark(GRAMMAR, parser="lalr", propagate_positions=True, maybe_placeholders=False)

# What a user reads in an "expected …" message, per lark terminal name.
_TERMINAL_WORDS = {
    "FIELD": "a field name followed by ':'",
    "OP": "a comparison (>, >=, <, <=)",
    "NEG": "'-'",
    "PHRASE": 'a "quoted phrase"',
    "WORD": "a word",
    "LPAR": "'('",
    "RPAR": "')'",
    "_OR": "OR",
    "_NOT": "NOT",
    "$END": "the end of the query",
}


@dataclass(frozen=True)
class Field:
    """One field of the language: how its values are read and which comparisons it takes."""

    name: str
    kind: str  # see _READERS
    ordered: bool = False  # takes >, >=, <, <=
    choices: tuple[str, ...] = ()
    future: bool = False  # a duration names a moment after now (cert.expires), else before


FIELDS: dict[str, Field] = {
    f.name: f
    for f in (
        Field("ip", "address"),
        Field("net", "network"),
        Field("port", "port", ordered=True),
        Field("transport", "choice", choices=("tcp", "udp")),
        Field("state", "choice", choices=("open", "closed", "filtered", "open|filtered")),
        Field("status", "choice", choices=("open", "gone")),
        Field("service", "keyword"),
        Field("product", "keyword"),
        Field("version", "keyword"),
        Field("hostname", "keyword"),
        Field("banner", "substring"),
        Field("tag", "tag"),
        Field("first_seen", "time", ordered=True),
        Field("last_seen", "time", ordered=True),
        Field("title", "substring"),
        Field("server", "substring"),
        Field("cert.subject", "substring"),
        Field("cert.issuer", "substring"),
        Field("cert.san", "keyword"),
        Field("cert.fingerprint", "fingerprint"),
        Field("cert.expires", "time", ordered=True, future=True),
        Field("cert.self_signed", "boolean"),
        Field("cert.key_type", "keyword"),
        Field("cert.key_bits", "count", ordered=True),
    )
}


# -- the tree -------------------------------------------------------------------------


@dataclass(frozen=True)
class Clause:
    """``field op value``; ``op`` is ``=`` for ``field:value``. For a time field ``=`` is a
    whole UTC day, given as the range [``value``, ``until``)."""

    field: str
    op: str  # "=" | ">" | ">=" | "<" | "<="
    value: Any
    until: Any = None


@dataclass(frozen=True)
class Text:
    """Free text: a case-insensitive substring of banner, product or hostname."""

    text: str


@dataclass(frozen=True)
class Not:
    node: Node


@dataclass(frozen=True)
class And:
    nodes: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    nodes: tuple[Node, ...]


Node = Clause | Text | Not | And | Or


@dataclass(frozen=True)
class ParsedQuery:
    """A parsed query: ``node`` (``None`` for an empty query) and what callers ask of it."""

    text: str
    node: Node | None

    @property
    def plain_text(self) -> str | None:
        """The query when it is only bare words (no field, quote, operator or group): the
        whole string is then one free-text substring, as ``q`` has always meant."""
        node = self.node
        words = node.nodes if isinstance(node, And) else (node,)
        if node is not None and all(isinstance(w, Text) for w in words):
            stripped = " ".join(self.text.split())
            if '"' not in self.text and "(" not in self.text and ")" not in self.text:
                return stripped
        return None

    @property
    def names_status(self) -> bool:
        """Whether a ``status:`` clause appears (the default ``status=open`` then steps aside)."""
        return any(isinstance(c, Clause) and c.field == "status" for c in walk(self.node))


def quoted(value: object) -> str:
    """``value`` as a quoted phrase of the language (for links built from stored values)."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def walk(node: Node | None):
    """Every node of a tree, depth first."""
    if node is None:
        return
    yield node
    if isinstance(node, Not):
        yield from walk(node.node)
    elif isinstance(node, (And, Or)):
        for child in node.nodes:
            yield from walk(child)


def free_texts(node: Node | None) -> set[str]:
    """The free texts (bare words and phrases) of a tree."""
    return {n.text for n in walk(node) if isinstance(n, Text)}


# -- errors ---------------------------------------------------------------------------


def query_error(message: str, column: int, expected: list[str] | None = None) -> ValidationError:
    details: dict[str, Any] = {"parameter": "q", "column": column}
    if expected:
        details["expected"] = expected
    suffix = f"; expected {', '.join(expected)}" if expected else ""
    return ValidationError(
        f"column {column}: {message}{suffix}", code="invalid_query", details=details
    )


def _expected_words(names: set[str] | frozenset[str]) -> list[str]:
    words = {_TERMINAL_WORDS.get(name, name.lower()) for name in names if not name.startswith("__")}
    return sorted(words)


def _syntax_error(exc: UnexpectedInput, text: str) -> ValidationError:
    column = int(getattr(exc, "column", 0) or 0)
    token = getattr(exc, "token", None)
    at_end = token is not None and token.type == "$END"
    if isinstance(exc, UnexpectedEOF) or column <= 0 or at_end:
        column = len(text) + 1
    if isinstance(exc, UnexpectedCharacters):
        found = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else ""
        expected = _expected_words(exc.allowed or set())
        if found == "-":
            # A '-' that leaves nothing out (alone, or before a space): naming '-' among
            # what was expected there read as a contradiction.
            message = "'-' must come right before what it leaves out, as in -port:22"
            expected = []
        else:
            message = f"unexpected {found!r}" if found else "the query ends too soon"
    elif token is None or token.type == "$END":
        message = "the query ends too soon"
        expected = _expected_words(getattr(exc, "expected", None) or set())
    else:
        message = f"unexpected {str(token)!r}"
        expected = _expected_words(getattr(exc, "expected", None) or set())
    return query_error(message, column, expected)


# -- values ---------------------------------------------------------------------------

_DURATION = re.compile(r"(\d{1,6})([mhdwy])")
_DURATION_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_HEX = re.compile(r"[0-9a-f]{64}")


def _unquote(token: Token) -> tuple[str, bool]:
    raw = str(token)
    if token.type == "PHRASE":
        return re.sub(r"\\(.)", r"\1", raw[1:-1]), True
    return raw, False


def _clean(value: str) -> str:
    # Control characters never match stored text and confuse both stores' escaping.
    return "".join(ch for ch in value if ch >= " ")


class _Reader:
    """Reads a clause's value by the field's kind; raises ``query_error`` at ``column``."""

    def __init__(self, now: datetime):
        self.now = now

    def clause(self, field: Field, op: str, raw: str, column: int) -> Clause:
        def fail(message: str, expected: str) -> ValidationError:
            return query_error(message, column, [expected])

        if op != "=" and not field.ordered:
            raise fail(f"{field.name} takes no comparison", f"{field.name}:value")
        kind = field.kind
        if raw == "":
            raise fail(f"{field.name} needs a value", "a value")
        if kind == "address":
            try:
                if "/" in raw:
                    if "%" in raw:
                        raise ValueError
                    return Clause("net", "=", str(ipaddress.ip_network(raw, strict=False)))
                if "%" in raw:
                    raise ValueError
                return Clause("ip", "=", normalise_ip(raw))
            except ValueError:
                raise fail(f"{raw!r} is not an IP address", "an IPv4 or IPv6 address") from None
        if kind == "network":
            try:
                if "%" in raw:
                    raise ValueError
                return Clause("net", "=", str(ipaddress.ip_network(raw, strict=False)))
            except ValueError:
                raise fail(f"{raw!r} is not a network", "a CIDR block such as 10.0.0.0/8") from None
        if kind in ("port", "count"):
            # ASCII digits only (``isdigit`` takes other scripts' digits and superscripts).
            if not (raw.isascii() and raw.isdigit()):
                raise fail(f"{raw!r} is not a number", "a whole number")
            number = int(raw) if len(raw) <= 7 else None
            if kind == "port" and (number is None or not 0 <= number <= 65535):
                raise fail(f"{raw} is not a port", "a port from 0 to 65535")
            if number is None:
                raise fail(f"{raw} is too large", "a whole number below 10000000")
            return Clause(field.name, op, number)
        if kind == "choice":
            value = raw.lower()
            if value not in field.choices:
                raise fail(f"{raw!r} is not a {field.name}", " or ".join(field.choices))
            return Clause(field.name, "=", value)
        if kind == "boolean":
            value = raw.lower()
            if value not in ("true", "false"):
                raise fail(f"{raw!r} is not true or false", "true or false")
            return Clause(field.name, "=", value == "true")
        if kind == "fingerprint":
            value = raw.lower().replace(":", "").replace(" ", "")
            if not _HEX.fullmatch(value):
                raise fail(f"{raw!r} is not a SHA-256 fingerprint", "64 hex digits")
            return Clause(field.name, "=", value)
        if kind == "time":
            return self._time(field, op, raw, fail)
        value = _clean(raw)
        if not value or len(value) > 200:
            raise fail(
                f"{field.name} needs a value of 1 to 200 characters",
                "a shorter value" if value else "a value",
            )
        return Clause(field.name, "=", value)

    def _time(self, field: Field, op: str, raw: str, fail) -> Clause:
        duration = _DURATION.fullmatch(raw)
        if duration:
            if op == "=":
                raise fail(f"a duration needs a comparison: {field.name}:<{raw}", "<, <=, > or >=")
            seconds = int(duration.group(1)) * _DURATION_UNITS[duration.group(2)]
            step = timedelta(seconds=seconds)
            try:
                moment = self.now + step if field.future else self.now - step
            except OverflowError:
                raise fail(f"{raw} is out of range", "a shorter duration") from None
            return Clause(field.name, op, moment)
        try:
            if len(raw) == 10:
                day = date.fromisoformat(raw)
                start = datetime(day.year, day.month, day.day, tzinfo=UTC)
                if op == "=":
                    return Clause(field.name, "=", start, start + timedelta(days=1))
                if op in (">", "<="):  # after the day / up to its end
                    return Clause(field.name, ">=" if op == ">" else "<", start + timedelta(days=1))
                return Clause(field.name, op, start)
            moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except (ValueError, OverflowError):
            raise fail(
                f"{raw!r} is not a date", "a date (2026-11-01), a time or a duration (30d)"
            ) from None
        if op == "=":
            raise fail(f"a time needs a comparison: {field.name}:>{raw}", "<, <=, > or >=")
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        try:
            moment = moment.astimezone(UTC)
        except (ValueError, OverflowError):
            raise fail(f"{raw!r} is out of range", "a time between years 1 and 9999") from None
        return Clause(field.name, op, moment)


@v_args(meta=True)
class _Build(Transformer):
    def __init__(self, reader: _Reader):
        super().__init__()
        self.reader = reader
        self.clauses = 0

    def _count(self, column: int) -> None:
        self.clauses += 1
        if self.clauses > MAX_CLAUSES:
            raise query_error(f"more than {MAX_CLAUSES} clauses", column)

    def clause(self, meta, children):
        name_token, *rest = children
        name = str(name_token).rstrip(":").lower()
        column = name_token.column
        field = FIELDS.get(name)
        if field is None:
            raise query_error(
                f"unknown field {name!r} (quote a phrase with ':' to search it as text)",
                column,
                sorted(FIELDS),
            )
        op = "="
        if len(rest) == 2:
            op = str(rest[0])
            if not field.ordered:
                raise query_error(
                    f"{field.name} takes no comparison", rest[0].column, [f"{field.name}:value"]
                )
        value_token = rest[-1]
        self._count(column)
        raw, _quoted = _unquote(value_token)
        return self.reader.clause(field, op, raw, value_token.column)

    def text(self, meta, children):
        (token,) = children
        raw, _quoted = _unquote(token)
        value = _clean(raw)
        self._count(token.column)
        if not value or len(value) > 200:
            raise query_error("free text needs 1 to 200 characters", token.column, ["a word"])
        return Text(value)

    def negated(self, meta, children):
        return Not(children[-1])

    def and_expr(self, meta, children):
        flat: list[Node] = []
        for child in children:
            flat.extend(child.nodes if isinstance(child, And) else (child,))
        return And(tuple(flat))

    def or_expr(self, meta, children):
        flat: list[Node] = []
        for child in children:
            flat.extend(child.nodes if isinstance(child, Or) else (child,))
        return Or(tuple(flat))

    def start(self, meta, children):
        return children[0] if children else None


def parse_body_query(text: str, *, field: str, now: datetime | None = None) -> ParsedQuery:
    """``parse_query`` for a query given in a request body's ``field``: the refusal names
    that field (and the column), not ``q``, the parameter of ``GET /api/assets``."""
    try:
        return parse_query(text, now=now)
    except ValidationError as exc:
        details = dict(exc.details or {})
        details.pop("parameter", None)
        raise ValidationError(
            f"{field}: {exc.message}", code=exc.code, details={"field": field, **details}
        ) from None


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # a tab is a space


def parse_query(text: str, *, now: datetime | None = None) -> ParsedQuery:
    """The checked tree of ``text``; ``ValidationError`` (``invalid_query``) when it is not
    a query. ``now`` fixes what durations (``30d``) are relative to."""
    if len(text) > MAX_QUERY_CHARS:
        raise query_error(f"the query is longer than {MAX_QUERY_CHARS} characters", 1)
    control = next((i for i, ch in enumerate(text) if _CONTROL.match(ch)), None)
    if control is not None:
        # Some read as spaces to the grammar (the separators \x1c-\x1f): a query of them
        # alone was the empty query and listed every asset.
        raise query_error("a query holds no control characters", control + 1)
    moment = now or datetime.now(UTC)
    try:
        tree = _PARSER.parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text) from None
    except RecursionError:
        raise query_error(f"the query nests more than {MAX_DEPTH} groups or negations", 1) from None
    try:
        node = _Build(_Reader(moment)).transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, ValidationError):
            raise exc.orig_exc from None
        raise
    except RecursionError:
        raise query_error(f"the query nests more than {MAX_DEPTH} groups or negations", 1) from None
    if hasattr(node, "data"):  # the empty query's tree
        node = None
    if _depth(node) > MAX_DEPTH:
        raise query_error(f"the query nests more than {MAX_DEPTH} groups or negations", 1)
    return ParsedQuery(text=text, node=node)


def _depth(node: Node | None) -> int:
    if isinstance(node, Not):
        return 1 + _depth(node.node)
    if isinstance(node, (And, Or)):
        return 1 + max(_depth(child) for child in node.nodes)
    return 0
