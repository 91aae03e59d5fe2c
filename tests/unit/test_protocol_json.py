"""The lenient JSON reader for fastjson output (T12 of remoting.md §6)."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.broker.protocol._json import LenientJSONError, decode_json, loads_lenient


class _MapHolder(msgspec.Struct):
    map: dict[int, str]


def test_t12_unquoted_long_keys() -> None:
    plain = b'{"map":{0:"Test"}}'
    standard = b'{"map":{"0":"Test"}}'
    with pytest.raises(msgspec.DecodeError):
        msgspec.json.decode(plain)  # what a strict parser (Gson, msgspec) says
    assert loads_lenient(plain) == loads_lenient(standard) == {"map": {"0": "Test"}}
    assert (
        decode_json(plain, _MapHolder)
        == decode_json(standard, _MapHolder)
        == _MapHolder(map={0: "Test"})
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{a:1,-2:[true,false,null],}", {"a": 1, "-2": [True, False, None]}),
        ("['x\\'y', 'tab\\t', '\\u00e9']", ["x'y", "tab\t", "\u00e9"]),
        ('{"k":"\\u0001v\\u0002"}', {"k": "\x01v\x02"}),
        ("  [1.5, -0, 2e3, 7]  ", [1.5, 0, 2000.0, 7]),
        ('{{"b":1,"a":2}:"x",[1,2]:"y"}', {'{"a":2,"b":1}': "x", "[1,2]": "y"}),
        ('"raw\x01control"', "raw\x01control"),
    ],
)
def test_lenient_forms(text: str, expected: object) -> None:
    assert loads_lenient(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        '{"a" 1}',
        "{a:}",
        "[1 2]",
        "tru",
        "{}x",
        "'open",
        "'\\q'",
        "'\\u12'",
        "@",
        "[" * 500 + "]" * 500,
        "1" * 5000,
    ],
)
def test_lenient_rejects(text: str) -> None:
    with pytest.raises(LenientJSONError):
        loads_lenient(text)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_agrees_with_the_standard_parser_on_standard_json(value: object) -> None:
    text = json.dumps(value)
    assert loads_lenient(text) == json.loads(text)


@given(st.text(max_size=60))
def test_garbage_text_raises_only_lenient_error(text: str) -> None:
    try:
        loads_lenient(text)
    except LenientJSONError as e:
        assert 0 <= e.pos <= len(text)
