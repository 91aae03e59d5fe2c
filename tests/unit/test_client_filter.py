"""Tag expressions, Java String.hashCode and the sharding-key queue choice."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.client.errors import ClientUsageError
from pocketmq.client.filter import TagExpression, java_string_hash, queue_index_for_key


def _reference_hash(text: str) -> int:
    # The definition, in unbounded integers, then wrapped to a Java int.
    units = text.encode("utf-16-be", "surrogatepass")
    codes = [int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2)]
    n = len(codes)
    h = sum(c * 31 ** (n - 1 - i) for i, c in enumerate(codes)) % 2**32
    return h - 2**32 if h >= 2**31 else h


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("Aa", 2112),
        ("BB", 2112),  # the classic collision
        ("hello world", 1794106052),
        ("TagA", 2598919),
        ("polygenelubricants", -(2**31)),  # hashes to Integer.MIN_VALUE
        ("\U0001f600", 1772899),  # a surrogate pair counts as two UTF-16 units
    ],
)
def test_java_string_hash_known_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


@given(st.text())
def test_java_string_hash_matches_the_definition(text: str) -> None:
    assert java_string_hash(text) == _reference_hash(text)


@pytest.mark.parametrize("expression", [None, "", "  ", "*", " * "])
def test_everything_expressions(expression: str | None) -> None:
    expr = TagExpression.parse(expression)
    assert expr.matches_all and expr.expression == "*"
    assert expr.matches(None) and expr.matches("anything")
    data = expr.subscription_data("T", sub_version=7)
    assert (data.sub_string, data.tags_set, data.code_set, data.sub_version) == ("*", [], [], 7)


def test_tag_list_is_split_trimmed_and_deduplicated() -> None:
    expr = TagExpression.parse(" A ||B||  || A ")
    assert expr.tags == ("A", "B")
    assert expr.codes == (java_string_hash("A"), java_string_hash("B"))
    assert expr.matches("A") and expr.matches("B")
    assert not expr.matches("C") and not expr.matches(None) and not expr.matches(" A")
    data = expr.subscription_data("T")
    assert data.sub_string == " A ||B||  || A "
    assert data.tags_set == ["A", "B"] and data.expression_type == "TAG"


def test_client_side_refilter_drops_hash_collisions() -> None:
    expr = TagExpression.parse("Aa")
    # "BB" has the same hash code, so a broker filtering by code lets it through
    assert java_string_hash("BB") in expr.codes
    kept = expr.filter(["Aa", "BB", None, "Aa"], lambda tag: tag)
    assert kept == ["Aa", "Aa"]


@pytest.mark.parametrize("expression", ["||", " || || "])
def test_expression_without_tags_is_rejected(expression: str) -> None:
    with pytest.raises(ClientUsageError):
        TagExpression.parse(expression)


def test_sharding_key_uses_javas_remainder() -> None:
    # Java: Math.abs(Integer.MIN_VALUE % 3) == 2
    assert queue_index_for_key("polygenelubricants", 3) == 2
    assert queue_index_for_key("hello world", 8) == 1794106052 % 8
    with pytest.raises(ClientUsageError):
        queue_index_for_key("k", 0)


@given(st.text(), st.integers(min_value=1, max_value=1000))
def test_sharding_key_in_range_and_stable(key: str, n: int) -> None:
    index = queue_index_for_key(key, n)
    assert 0 <= index < n
    h = java_string_hash(key)
    java_remainder = abs(h) % n * (-1 if h < 0 else 1)
    assert index == abs(java_remainder)
