"""The WHERE-clause helper shared by asset search, traffic rows and task lists."""

from __future__ import annotations

import pytest

from app.sql_filters import Filters


def test_no_filter_is_true_and_no_where():
    filters = Filters(limit=11)
    assert not filters
    assert filters.sql() == "TRUE"
    assert filters.where() == ""
    assert filters.params == {"limit": 11}


def test_filters_are_anded_in_order_with_their_values():
    filters = Filters(limit=5).add("t.port = :port", port=443)
    filters.add("(t.a, t.b) > (:a, :b)", a=1, b="x").add("t.status = 'open'")
    assert filters
    assert filters.sql() == "t.port = :port AND (t.a, t.b) > (:a, :b) AND t.status = 'open'"
    assert filters.where() == "WHERE " + filters.sql()
    assert filters.params == {"limit": 5, "port": 443, "a": 1, "b": "x"}


def test_extend_appends_another_filters_conditions_and_values():
    owner = Filters().add("t.owner_id = :owner_id", owner_id=7)
    filters = Filters().add("t.id = :id", id=3).extend(owner).extend(Filters())
    assert filters.sql() == "t.id = :id AND t.owner_id = :owner_id"
    assert filters.params == {"id": 3, "owner_id": 7}


def test_a_name_bound_twice_must_keep_its_value():
    filters = Filters().add("a = :v", v=1).add("b = :v", v=1)
    assert filters.params == {"v": 1}
    with pytest.raises(ValueError, match="'v' is already bound"):
        filters.add("c = :v", v=2)
