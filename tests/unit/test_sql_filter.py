"""The SQL92 filter: RocketMQ's grammar, its three-valued logic and Java's conversions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.broker.services.sql_filter import SqlParseError, compile_sql, record_properties
from pocketmq.store.record import MessageRecord, encode_record

MATCHES = [
    # comparisons: a string property read as the constant's type
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5.5", {"a": "5"}, True),
    ("a <= -1", {"a": "-1"}, True),
    ("a = 5", {"a": "5"}, True),
    ("a <> 5", {"a": "6"}, True),
    ("a > 5", {"a": "ten"}, False),  # Integer.valueOf fails: dropped
    ("a > 5", {"a": "5.5"}, False),  # an int constant reads the property as an int
    ("a > 5", {"a": "3000000000"}, False),  # past int: NumberFormatException
    ("a > 2147483648", {"a": "3000000000"}, True),  # a long constant reads a long
    ("a > 5.0E0", {"a": " 6 "}, True),  # Double.valueOf trims
    ("a > b", {"a": "2", "b": "1.5"}, True),  # two strings compare as doubles
    ("a = TRUE", {"a": "True"}, True),
    # strings
    ("s = 'it''s'", {"s": "it's"}, True),
    ("s = 'x'", {"s": "X"}, False),
    ("s CONTAINS 'bc'", {"s": "abcd"}, True),
    ("s NOT CONTAINS 'bc'", {"s": "abcd"}, False),
    ("s STARTSWITH 'ab'", {"s": "abcd"}, True),
    ("s ENDSWITH 'cd'", {"s": "abcd"}, True),
    ("s NOT ENDSWITH 'cd'", {}, False),  # NULL is false here, not unknown
    ("TAGS IN ('x', 'y')", {"TAGS": "y"}, True),
    ("TAGS NOT IN ('x', 'y')", {"TAGS": "z"}, True),
    ("TAGS NOT IN ('x', 'y')", {}, False),
    # ranges and nulls
    ("a BETWEEN 1 AND 3", {"a": "3"}, True),
    ("a BETWEEN 1 AND 3", {"a": "4"}, False),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": "1"}, False),
    ("a is not null", {"a": "1"}, True),
    # three-valued logic: a missing property is unknown
    ("a > 5", {}, False),
    ("NOT (a > 5)", {}, False),
    ("a > 5 OR b = 1", {"b": "1"}, True),
    ("a > 5 AND b = 1", {"b": "1"}, False),
    ("a > 5 OR TRUE", {}, True),
    ("b = 1 OR a > 5", {"b": "1", "a": "x"}, True),  # OR stops before the failing side
    ("a > 5 OR b = 1", {"b": "1", "a": "x"}, False),  # ...but not after it: Java threw
    # precedence, comments, case, trailing text RocketMQ never reads
    ("a = 1 OR b = 1 AND c = 1", {"a": "1"}, True),
    ("(a = 1 OR b = 1) AND c = 1", {"a": "1"}, False),
    ("a = 1 -- note\n AND /* x */ b = 2", {"a": "1", "b": "2"}, True),
    ("A = 1 and B = 2", {"A": "1", "B": "2"}, True),
    ("a = 1 -- no line break", {"a": "1"}, True),
    ("TRUE", {}, True),
    ("a", {"a": "true"}, False),  # a property cast to boolean: strings are never true
]


@pytest.mark.parametrize(("expression", "properties", "expected"), MATCHES)
def test_evaluation(expression: str, properties: dict[str, str], expected: bool) -> None:
    assert compile_sql(expression).matches(properties) is expected


BAD = [
    ("", "empty"),
    ("a >", 'Encountered "<EOF>"'),
    ("a = NULL", "cannot be compared"),
    ("a > 'x'", "cannot be compared"),
    ("TRUE = 1", "cannot be compared with"),
    ("a BETWEEN 3 AND 1", "Illegal values of between"),
    ("a > 0.0", "less than"),  # RocketMQ refuses a double below Double.MIN_VALUE
    ("5", "boolean value"),
    ("'x' IN ('a')", "Expected a property"),
    ("a IN (1)", "Was expecting"),
    ("a ! 1", "Lexical error"),
    ("a > 99999999999999999999", "NumberFormatException"),
]


@pytest.mark.parametrize(("expression", "message"), BAD)
def test_parse_failures(expression: str, message: str) -> None:
    with pytest.raises(SqlParseError, match=message.replace("(", r"\(")):
        compile_sql(expression)


def test_compiled_once() -> None:
    assert compile_sql("k = 'cached'") is compile_sql("k = 'cached'")


def test_properties_of_a_stored_record() -> None:
    record = encode_record(
        MessageRecord(topic="T", body=b"body", properties={"TAGS": "x", "a": "7"})
    )
    assert record_properties(record) == {"TAGS": "x", "a": "7"}
    assert compile_sql("a > 5 AND TAGS = 'x'").matches_record(record)


names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True).filter(
    lambda n: n.upper() not in {"NOT", "AND", "OR", "IN", "IS", "NULL", "TRUE", "FALSE"}
)
ints = st.integers(min_value=-(2**31) + 1, max_value=2**31 - 1)


@given(name=names, value=ints, bound=ints)
def test_numeric_comparisons_agree_with_python(name: str, value: int, bound: int) -> None:
    properties = {name: str(value)}
    assert compile_sql(f"{name} > {bound}").matches(properties) is (value > bound)
    assert compile_sql(f"{name} <= {bound}").matches(properties) is (value <= bound)
    assert compile_sql(f"{name} = {bound}").matches(properties) is (value == bound)
    assert compile_sql(f"{name} <> {bound}").matches(properties) is (value != bound)


@given(text=st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12))
def test_string_literals_round_trip(text: str) -> None:
    literal = "'" + text.replace("'", "''") + "'"
    assert compile_sql(f"s = {literal}").matches({"s": text})
    assert compile_sql(f"s IN ({literal}, 'zz')").matches({"s": text})


@given(st.text(max_size=40))
def test_any_text_compiles_or_fails_cleanly(source: str) -> None:
    try:
        expression = compile_sql(source)
    except SqlParseError:
        return
    assert expression.matches({}) in (True, False)
    assert expression.matches({"a": "1", "TAGS": "x"}) in (True, False)
