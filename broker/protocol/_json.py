"""JSON reading that tolerates what fastjson 1.x writes.

Java peers serialize with fastjson's plain ``JSON.toJSONString``. For maps with non-string
keys that output is not JSON: ``HashMap<Long,String>`` gives ``{0:"a"}`` (route data
``brokerAddrs``, cluster info) and maps keyed by objects give ``{{"topic":"t",...}:{...}}``
(``TopicStatsTable.offsetTable``). fastjson's own parser also accepts single-quoted strings
and trailing commas, so a peer may send those too.

``decode_json`` tries strict ``msgspec.json`` first (the common, fast case) and falls back to
``loads_lenient`` + ``msgspec.convert(strict=False)`` only when that fails. The lenient reader
turns every object key into a string: bare keys keep their source text (``0`` -> ``"0"``), and
object/array keys become their canonical JSON text (sorted keys, no spaces).

On the fallback path the value is also reshaped as fastjson would bind it to the Java class
(``fastjson_shape``), because other clients write JSON Java never does: rocketmq-client-cpp
writes enums as ordinals (``"consumeType":1``) and longs as strings (``"subVersion":"17..."``).
fastjson reads an enum from its name or ordinal, a String field from any scalar (its text), a
number from a string (``strict=False`` does that part), and a ``null`` as "keep the default".
A field is a Java enum when its type carries ``msgspec.Meta(extra={JAVA_ENUM: names})``, the
names in ordinal order.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from json.decoder import scanstring  # type: ignore[attr-defined]  # C accelerated, untyped
from typing import Any, TypeVar

import msgspec
import msgspec.inspect as mi

__all__ = [
    "JAVA_ENUM",
    "LenientJSONError",
    "canonical_json",
    "decode_json",
    "fastjson_shape",
    "loads_lenient",
]

# The ``Meta.extra`` key naming a field's Java enum constants, in ordinal order.
JAVA_ENUM = "java_enum"

T = TypeVar("T")

# Deep nesting from the network must not exhaust the interpreter stack.
_DEPTH_MAX = 200

_WS = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, pos: int) -> int:
    """The position after the whitespace at ``pos`` (``_WS`` matches the empty string too)."""
    match = _WS.match(text, pos)
    return match.end() if match is not None else pos


_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_BARE_KEY = re.compile(r"[A-Za-z0-9_$.+\-]+")
_SINGLE_ESCAPES = {
    "'": "'",
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}


class LenientJSONError(ValueError):
    """Text that even the lenient reader rejects. ``pos`` is a character index."""

    def __init__(self, reason: str, pos: int) -> None:
        self.reason = reason
        self.pos = pos
        super().__init__(f"{reason} at char {pos}")


def canonical_json(value: Any) -> str:
    """Compact JSON text with sorted keys (any int size, unlike msgspec)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def decode_json(data: bytes | bytearray | memoryview | str, type_: type[T]) -> T:
    """Decode ``data`` as ``type_``: strict msgspec first, then the lenient path.

    Raises ``LenientJSONError`` (not JSON even leniently) or ``msgspec.ValidationError``
    (JSON of the wrong shape).
    """
    try:
        return msgspec.json.decode(data, type=type_)
    except (msgspec.DecodeError, UnicodeDecodeError):
        pass
    except RecursionError:  # msgspec's answer to nesting deeper than the interpreter allows
        raise LenientJSONError("nesting too deep", 0) from None
    return msgspec.convert(fastjson_shape(loads_lenient(data), type_), type_, strict=False)


def fastjson_shape(value: Any, type_: Any) -> Any:
    """``value`` (plain JSON objects) reshaped as fastjson binds it to ``type_``'s Java class:
    enum ordinals to names, scalars to text for string fields, ``null`` fields dropped where a
    default exists. What does not fit is left for ``msgspec.convert`` to report."""
    return _shaper(type_)(value)


_Shaper = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


@functools.cache
def _shaper(type_: Any) -> _Shaper:
    return _shaper_of(mi.type_info(type_), {})


def _shaper_of(t: mi.Type, seen: dict[type, _Shaper]) -> _Shaper:
    """A function reshaping a value for type info ``t``; ``seen`` breaks recursive structs."""
    if isinstance(t, mi.Metadata):
        names = (t.extra or {}).get(JAVA_ENUM)
        if names is not None:
            return functools.partial(_enum_name, tuple(names))
        return _shaper_of(t.type, seen)
    if isinstance(t, mi.StrType):
        return _as_text
    if isinstance(t, mi.UnionType):
        others = [u for u in t.types if not isinstance(u, mi.NoneType)]
        return _shaper_of(others[0], seen) if len(others) == 1 else _same
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        item = _shaper_of(t.item_type, seen)
        return _same if item is _same else functools.partial(_each_item, item)
    if isinstance(t, mi.DictType):
        val = _shaper_of(t.value_type, seen)
        return _same if val is _same else functools.partial(_each_value, val)
    if isinstance(t, mi.StructType):
        if t.cls in seen:
            return lambda v: seen[t.cls](v)
        fields: dict[str, tuple[_Shaper, bool]] = {}
        seen[t.cls] = functools.partial(_struct, fields)
        for f in t.fields:
            # fastjson leaves a field it reads null at its default; msgspec needs it absent.
            nullable = isinstance(f.type, mi.UnionType) and any(
                isinstance(u, mi.NoneType) for u in f.type.types
            )
            fields[f.encode_name] = (_shaper_of(f.type, seen), not f.required and not nullable)
        return seen[t.cls]
    return _same


def _struct(fields: dict[str, tuple[_Shaper, bool]], value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        spec = fields.get(key)
        if spec is None:
            out[key] = item  # unknown: msgspec ignores it, as fastjson does
        elif item is None:
            if not spec[1]:
                out[key] = None  # nullable or required: msgspec decides
        else:
            out[key] = spec[0](item)
    return out


def _each_item(shape: _Shaper, value: Any) -> Any:
    return [shape(v) for v in value] if isinstance(value, list) else value


def _each_value(shape: _Shaper, value: Any) -> Any:
    return {k: shape(v) for k, v in value.items()} if isinstance(value, dict) else value


def _as_text(value: Any) -> Any:
    """A scalar read into a Java String field: its text, as fastjson gives it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _enum_name(names: tuple[str, ...], value: Any) -> Any:
    """fastjson's EnumDeserializer: a name as it is, an int as the constant of that ordinal."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    return value


def loads_lenient(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON plus fastjson's extensions into plain Python objects."""
    # Java decodes bytes with replacement characters, never failing on bad UTF-8.
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
    value, pos = _value(text, _skip_ws(text, 0), 0)
    pos = _skip_ws(text, pos)
    if pos != len(text):
        raise LenientJSONError("trailing data", pos)
    return value


def _value(s: str, i: int, depth: int) -> tuple[Any, int]:
    if i >= len(s):
        raise LenientJSONError("unexpected end", i)
    c = s[i]
    if c == "{":
        return _object(s, i + 1, depth + 1)
    if c == "[":
        return _array(s, i + 1, depth + 1)
    if c == '"':
        try:
            return scanstring(s, i + 1, False)
        except ValueError as e:
            raise LenientJSONError("bad string", i) from e
    if c == "'":
        return _single_quoted(s, i + 1)
    for word, val in (("true", True), ("false", False), ("null", None)):
        if s.startswith(word, i):
            return val, i + len(word)
    m = _NUMBER.match(s, i)
    if m is not None and m.end() > i:
        text = m.group()
        try:
            if m.group(1) or m.group(2):
                return float(text), m.end()
            return int(text), m.end()
        except ValueError:  # more digits than int() accepts (sys.get_int_max_str_digits)
            raise LenientJSONError("number too long", i) from None
    raise LenientJSONError(f"unexpected character {c!r}", i)


def _object(s: str, i: int, depth: int) -> tuple[dict[str, Any], int]:
    if depth > _DEPTH_MAX:
        raise LenientJSONError("nesting too deep", i)
    out: dict[str, Any] = {}
    i = _skip_ws(s, i)
    if s.startswith("}", i):
        return out, i + 1
    while True:
        key, i = _key(s, i, depth)
        i = _skip_ws(s, i)
        if not s.startswith(":", i):
            raise LenientJSONError("expected ':'", i)
        i = _skip_ws(s, i + 1)
        out[key], i = _value(s, i, depth)
        i = _skip_ws(s, i)
        if s.startswith("}", i):
            return out, i + 1
        if not s.startswith(",", i):
            raise LenientJSONError("expected ',' or '}'", i)
        i = _skip_ws(s, i + 1)
        if s.startswith("}", i):  # trailing comma
            return out, i + 1


def _key(s: str, i: int, depth: int) -> tuple[str, int]:
    if i >= len(s):
        raise LenientJSONError("unexpected end", i)
    c = s[i]
    if c in "\"'":
        key, i = _value(s, i, depth)
        return key, i
    if c in "{[":
        # fastjson writes object keys (e.g. MessageQueue) as nested JSON
        key_obj, i = _value(s, i, depth)
        return canonical_json(key_obj), i
    m = _BARE_KEY.match(s, i)
    if m is None:
        raise LenientJSONError(f"unexpected character {c!r} in key", i)
    return m.group(), m.end()


def _array(s: str, i: int, depth: int) -> tuple[list[Any], int]:
    if depth > _DEPTH_MAX:
        raise LenientJSONError("nesting too deep", i)
    out: list[Any] = []
    i = _skip_ws(s, i)
    if s.startswith("]", i):
        return out, i + 1
    while True:
        item, i = _value(s, i, depth)
        out.append(item)
        i = _skip_ws(s, i)
        if s.startswith("]", i):
            return out, i + 1
        if not s.startswith(",", i):
            raise LenientJSONError("expected ',' or ']'", i)
        i = _skip_ws(s, i + 1)
        if s.startswith("]", i):  # trailing comma
            return out, i + 1


def _single_quoted(s: str, i: int) -> tuple[str, int]:
    chars: list[str] = []
    n = len(s)
    while i < n:
        c = s[i]
        if c == "'":
            return "".join(chars), i + 1
        if c == "\\":
            if i + 1 >= n:
                break
            e = s[i + 1]
            if e == "u":
                digits = s[i + 2 : i + 6]
                if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    raise LenientJSONError("bad \\u escape", i)
                chars.append(chr(int(digits, 16)))
                i += 6
                continue
            if e not in _SINGLE_ESCAPES:
                raise LenientJSONError("bad escape", i)
            chars.append(_SINGLE_ESCAPES[e])
            i += 2
            continue
        chars.append(c)
        i += 1
    raise LenientJSONError("unterminated string", i)
