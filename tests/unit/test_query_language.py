"""The search language's grammar: every field kind and operator, quoting, negation,
grouping, and errors that name the column and what was expected."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import ValidationError
from app.search import elasticsearch_language, postgres_language
from app.search.query_language import FIELDS, And, Clause, Not, Or, Text, parse_query

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def node(text: str):
    return parse_query(text, now=NOW).node


def error(text: str) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        parse_query(text, now=NOW)
    assert caught.value.code == "invalid_query"
    return caught.value


def test_clauses_side_by_side_are_anded_and_values_are_read():
    assert node('port:443 product:"nginx" -port:22 tag:dmz') == And(
        (
            Clause("port", "=", 443),
            Clause("product", "=", "nginx"),
            Not(Clause("port", "=", 22)),
            Clause("tag", "=", "dmz"),
        )
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("port:>1024", Clause("port", ">", 1024)),
        ("port:>=1024", Clause("port", ">=", 1024)),
        ("port:<1024", Clause("port", "<", 1024)),
        ("port:<=1024", Clause("port", "<=", 1024)),
        ("net:10.1.2.3/8", Clause("net", "=", "10.0.0.0/8")),
        ("ip:10.0.0.0/8", Clause("net", "=", "10.0.0.0/8")),
        ("ip:2001:DB8::1", Clause("ip", "=", "2001:db8::1")),
        ("transport:UDP", Clause("transport", "=", "udp")),
        ("status:gone", Clause("status", "=", "gone")),
        ("cert.self_signed:TRUE", Clause("cert.self_signed", "=", True)),
        (
            "cert.fingerprint:" + "AB:" * 31 + "CD",
            Clause("cert.fingerprint", "=", "ab" * 31 + "cd"),
        ),
        ("cert.key_bits:>=2048", Clause("cert.key_bits", ">=", 2048)),
        ("first_seen:>2026-11-01", Clause("first_seen", ">=", datetime(2026, 11, 2, tzinfo=UTC))),
        ("first_seen:>=2026-11-01", Clause("first_seen", ">=", datetime(2026, 11, 1, tzinfo=UTC))),
        ("first_seen:<2026-11-01", Clause("first_seen", "<", datetime(2026, 11, 1, tzinfo=UTC))),
        ("first_seen:<=2026-11-01", Clause("first_seen", "<", datetime(2026, 11, 2, tzinfo=UTC))),
        (
            "first_seen:2026-11-01",
            Clause(
                "first_seen",
                "=",
                datetime(2026, 11, 1, tzinfo=UTC),
                datetime(2026, 11, 2, tzinfo=UTC),
            ),
        ),
        (
            "last_seen:>2026-11-01T10:00:00+02:00",
            Clause("last_seen", ">", datetime(2026, 11, 1, 8, 0, tzinfo=UTC)),
        ),
        ("last_seen:>7d", Clause("last_seen", ">", datetime(2026, 11, 24, 12, 0, tzinfo=UTC))),
        (
            "cert.expires:<30d",
            Clause("cert.expires", "<", datetime(2026, 12, 31, 12, 0, tzinfo=UTC)),
        ),
        ("cert.expires:<12h", Clause("cert.expires", "<", datetime(2026, 12, 2, 0, 0, tzinfo=UTC))),
        ('cert.issuer:"Let\'s Encrypt"', Clause("cert.issuer", "=", "Let's Encrypt")),
        ('title:"say \\"hi\\""', Clause("title", "=", 'say "hi"')),
        ("Service:SSH", Clause("service", "=", "SSH")),
    ],
)
def test_every_kind_of_value(text, expected):
    assert node(text) == expected


def test_free_text_negation_grouping_and_or():
    assert node("nginx") == Text("nginx")
    assert node('"login page"') == Text("login page")
    assert node("-nginx") == Not(Text("nginx"))
    assert node("NOT port:22") == Not(Clause("port", "=", 22))
    assert node("a OR b c") == Or((Text("a"), And((Text("b"), Text("c")))))
    assert node("(a OR b) c") == And((Or((Text("a"), Text("b"))), Text("c")))
    assert node("-(port:1 OR port:2)") == Not(Or((Clause("port", "=", 1), Clause("port", "=", 2))))
    assert node("a-b x-") == And((Text("a-b"), Text("x-")))
    assert node("") is None and node("   ") is None


def test_bare_words_are_plain_text_and_anything_else_is_not():
    assert parse_query("OpenSSH  9.6").plain_text == "OpenSSH 9.6"
    assert parse_query("100%").plain_text == "100%"
    for text in ('"quoted"', "port:22", "-x", "(a)", "a OR b", ""):
        assert parse_query(text).plain_text is None, text


@pytest.mark.parametrize(
    ("text", "column", "expected_part"),
    [
        ("port:", 6, "a word"),
        ("port:>", 7, "a word"),
        ("port:abc", 6, "a whole number"),
        ("port:70000", 6, "a port from 0 to 65535"),
        # A number too large for a port is still a number: said so, not "not a number".
        ("port:99999999", 6, "a port from 0 to 65535"),
        ("port:" + "9" * 900, 6, "a port from 0 to 65535"),
        # Only ASCII digits: other scripts' digits and superscripts are no port.
        ("port:\u0668\u0660", 6, "a whole number"),
        ("port:\u00b2", 6, "a whole number"),
        ("nosuch:1", 1, "port"),
        ("(port:80", 9, "')'"),
        ("port:80)", 8, "the end of the query"),
        ("port:80 OR", 11, "a word"),
        ('"open', 1, 'a "quoted phrase"'),
        ("net:10.0.0.300/8", 5, "a CIDR block such as 10.0.0.0/8"),
        ("ip:nope", 4, "an IPv4 or IPv6 address"),
        ("transport:sctp", 11, "tcp or udp"),
        ("service:>x", 9, "service:value"),
        ("cert.expires:30d", 14, "<, <=, > or >="),
        ("cert.expires:<soon", 15, "a date (2026-11-01), a time or a duration (30d)"),
        ("first_seen:2026-11-01T00:00:00", 12, "<, <=, > or >="),
        ("cert.fingerprint:abc", 18, "64 hex digits"),
        ("cert.self_signed:maybe", 18, "true or false"),
        ("first_seen:<999999y", 13, "a shorter duration"),
    ],
)
def test_errors_name_the_column_and_what_was_expected(text, column, expected_part):
    problem = error(text)
    assert problem.details["column"] == column, problem.message
    assert problem.details["parameter"] == "q"
    assert expected_part in problem.details["expected"], problem.details
    assert problem.message.startswith(f"column {column}: ")


def test_a_query_of_control_characters_is_refused_not_empty():
    """The separators \x1c-\x1f read as spaces to the grammar: ``q=%1F`` was the empty
    query and listed every asset."""
    for text in ("\x1f", "port:22 \x1f", "a\x00b", "x\ny"):
        assert error(text).message.startswith("column "), text
        assert "control characters" in error(text).message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("port:>", "column 7: the query ends too soon; expected"),
        ("(port:22", "column 9: the query ends too soon; expected ')'"),
        ("-", "column 1: '-' must come right before what it leaves out, as in -port:22"),
        ("a - b", "column 3: '-' must come right before what it leaves out"),
    ],
)
def test_errors_read_as_sentences(text, said):
    """ "unexpected the end of the query" and "unexpected '-'; expected … '-' …" read
    wrongly; what the user is told now says what is missing or what to write."""
    problem = error(text)
    assert problem.message.startswith(said), problem.message
    assert "unexpected the end" not in problem.message


def test_limits():
    assert error("x" * 1001).details["column"] == 1
    assert "more than 64 clauses" in error(" ".join(["a"] * 65)).message
    assert "nests more than 12" in error("-" * 13 + "a").message
    assert "nests more than 12" in error("(a (b OR " * 7 + "c" + "))" * 7).message
    assert node("-" * 12 + "a") is not None
    assert "longer than 1000" in error("(" * 5000 + "a" + ")" * 5000).message


def test_every_field_translates_for_both_stores():
    samples = {
        "address": "192.0.2.1",
        "network": "192.0.2.0/24",
        "port": "80",
        "count": "2048",
        "boolean": "true",
        "fingerprint": "00" * 32,
        "time": "2026-11-01",
    }
    for field in FIELDS.values():
        value = field.choices[0] if field.choices else samples.get(field.kind, "x")
        parsed = node(f"{field.name}:{value}")
        sql, params = postgres_language.condition(parsed)
        assert sql and all(f":{name}" in sql for name in params), field.name
        assert elasticsearch_language.query(parsed), field.name
        assert postgres_language.condition(Not(parsed))[0].endswith("IS NOT TRUE)")


@given(st.text(max_size=60))
def test_any_string_parses_or_is_an_invalid_query(text):
    try:
        parsed = parse_query(text, now=NOW)
    except ValidationError as problem:
        assert problem.code == "invalid_query"
        assert 1 <= problem.details["column"] <= len(text) + 1
        return
    if parsed.node is not None:
        postgres_language.condition(parsed.node)
        elasticsearch_language.query(parsed.node)
