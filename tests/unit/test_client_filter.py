"""Tag and SQL92 expressions, Java String.hashCode and the sharding-key queue choice."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.client.errors import BrokerSystemError, ClientUsageError, SubscriptionError
from pocketmq.client.filter import (
    MessageSelector,
    SqlExpression,
    TagExpression,
    check_client_config_request,
    check_client_config_response,
    filter_expression,
    java_string_hash,
    queue_index_for_key,
)


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


def test_sql_expression_is_the_brokers_to_filter() -> None:
    expr = MessageSelector.by_sql("  a > 5 AND TAGS = 'x' ")
    assert expr == SqlExpression("a > 5 AND TAGS = 'x'")
    assert not expr.matches_all and expr.expression_type == "SQL92"
    # the broker already evaluated it: nothing is re-checked against the tags
    assert expr.filter(["y", None, "x"], lambda tag: tag) == ["y", None, "x"]
    data = expr.subscription_data("T", sub_version=9)
    assert (data.sub_string, data.tags_set, data.code_set, data.sub_version) == (
        "a > 5 AND TAGS = 'x'",
        [],
        [],
        9,
    )
    assert data.expression_type == "SQL92"


@pytest.mark.parametrize("expression", [None, "", "   "])
def test_empty_sql_is_rejected(expression: str | None) -> None:
    with pytest.raises(ClientUsageError, match="SQL92"):
        SqlExpression.parse(expression)


def test_filter_expression_reads_subscribe_and_pull_arguments() -> None:
    assert filter_expression("A || B") == TagExpression.parse("A || B")
    assert filter_expression("a > 1", "sql92") == SqlExpression("a > 1")
    assert filter_expression("A", "") == TagExpression.parse("A")  # empty type: TAG
    assert filter_expression(sql="a > 1") == SqlExpression("a > 1")
    assert filter_expression(" * ", sql="a > 1") == SqlExpression("a > 1")
    given = MessageSelector.by_sql("b = 2")
    assert filter_expression(given) is given
    assert MessageSelector.by_tag() == TagExpression.parse("*")
    with pytest.raises(ClientUsageError, match="not both"):
        filter_expression("A", sql="a > 1")
    with pytest.raises(ClientUsageError, match="not both"):
        filter_expression(given, sql="a > 1")
    with pytest.raises(ClientUsageError, match="TAG or SQL92"):
        filter_expression("a > 1", "CLASS")


def test_check_client_config_carries_the_subscription() -> None:
    data = SqlExpression("a > 5").subscription_data("T", sub_version=3)
    request = check_client_config_request("127.0.0.1@x", "G", data)
    assert request.code == RequestCode.CHECK_CLIENT_CONFIG
    body = msgspec.json.decode(request.body or b"")
    assert (body["clientId"], body["group"]) == ("127.0.0.1@x", "G")
    sub = body["subscriptionData"]
    assert (sub["topic"], sub["subString"], sub["expressionType"]) == ("T", "a > 5", "SQL92")


def test_check_client_config_refusal_names_topic_and_expression() -> None:
    expr = SqlExpression("a >")
    check_client_config_response(RemotingCommand(code=ResponseCode.SUCCESS), "b:1", "T", expr)
    refused = RemotingCommand(code=ResponseCode.SUBSCRIPTION_PARSE_FAILED, remark="at column 4")
    with pytest.raises(SubscriptionError, match=r"b:1 .* SQL92 subscription of T \('a >'\)"):
        check_client_config_response(refused, "b:1", "T", expr)
    off = RemotingCommand(code=ResponseCode.SYSTEM_ERROR, remark="not supported")
    with pytest.raises(BrokerSystemError, match="not supported"):
        check_client_config_response(off, "b:1", "T", expr)
