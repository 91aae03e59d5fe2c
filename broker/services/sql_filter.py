"""SQL92 property filters (``MessageSelector.bySql``), with RocketMQ's grammar and semantics.

The grammar is RocketMQ's ``SelectorParser.jj`` (from ActiveMQ's JMS selectors), precedence from
loosest to tightest::

    or        := and (OR and)*
    and       := equality (AND equality)*
    equality  := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
    comparison:= unary ( '>' | '>=' | '<' | '<=' unary
                       | [NOT] BETWEEN unary AND unary
                       | [NOT] IN '(' string (',' string)* ')'
                       | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string )*
    unary     := '+' unary | '-' unary | NOT unary | primary
    primary   := literal | identifier | '(' or ')'

Keywords are case-insensitive; strings are single-quoted (``''`` is a quote); ``--`` comments end
at a line break and ``/* */`` comments are skipped. Integers are Java ints (longs past 32 bits,
an ``L`` suffix allowed); decimals are doubles, and RocketMQ refuses one below
``Double.MIN_VALUE`` (so ``0.0`` is a parse error there and here). As in RocketMQ, the parse
stops after one whole expression: trailing text is not read (``a = 1 b = 2`` is ``a = 1``).

Evaluation follows RocketMQ's, three-valued: a missing property is NULL, any comparison with
NULL is unknown, ``NOT unknown`` is unknown, ``AND``/``OR`` as SQL; only TRUE lets a message
through. Message properties are strings: compared with a number they are converted the way
Java's ``Integer/Long/Double.valueOf`` would, and a string that does not convert makes the whole
expression false for that message (RocketMQ logs the exception and drops the message). ``TAGS``,
``KEYS`` and every user property are plain properties.

Why hand-written rather than ``lark``: the grammar is small (seven levels, no ambiguity past a
two-token lookahead), the part that needs care is Java's type coercion and three-valued logic,
which a parser library does not give, and a compiled expression is cached per subscription, so
parse speed never matters. Writing it out keeps the broker free of a dependency for ~300 lines
and keeps the error text (``at line 1, column 7``) under our control.
"""

from __future__ import annotations

import re
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.store.record import (
    BODY_AT_V4,
    MAGIC_V1,
    SYSFLAG_AT,
    V6_SHIFT,
    SysFlag,
    decode_properties_bytes,
)

__all__ = [
    "SQL92",
    "TAG",
    "SqlExpression",
    "SqlParseError",
    "compile_sql",
    "record_properties",
]

TAG: Final = "TAG"
SQL92: Final = "SQL92"

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_DOUBLE_MIN_VALUE: Final = 5e-324  # Java's Double.MIN_VALUE, the smallest positive double


class SqlParseError(BrokerError):
    """An expression that does not compile; RocketMQ answers SUBSCRIPTION_PARSE_FAILED (23)."""

    default_kind = Kind.BAD_SUBSCRIPTION


class _EvalError(Exception):
    """Java threw while evaluating (a string that is not a number): the message does not match."""


class JLong(int):
    """A Java ``long`` constant: compared with a string property, the property is read with
    ``Long.valueOf`` instead of ``Integer.valueOf`` (a plain ``int`` is a Java ``int``)."""

    __slots__ = ()


# -- Java's conversions --------------------------------------------------------------------------

_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+\Z")
_DOUBLE_TEXT = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?\Z"
)


def _java_int(text: str, low: int = _INT_MIN, high: int = _INT_MAX) -> int:
    if not _INTEGER_TEXT.match(text):
        raise _EvalError(f"For input string: {text!r}")
    value = int(text)
    if not low <= value <= high:
        raise _EvalError(f"For input string: {text!r}")
    return value


def _java_double(text: str) -> float:
    stripped = text.strip("".join(chr(c) for c in range(33)))  # Java trims chars <= ' '
    if not _DOUBLE_TEXT.match(stripped):
        raise _EvalError(f"For input string: {text!r}")
    return float(stripped.rstrip("fFdD"))


def _compare(lv: Any, rv: Any) -> int:
    """``ComparisonExpression.__compare`` with string conversion on (as RocketMQ's parser sets)."""
    lt, rt = type(lv), type(rv)
    if lt is not rt:
        if lt is bool:
            if rt is str:  # Java casts the Boolean to String here: ClassCastException
                raise _EvalError("a boolean compared with a string")
            return -1
        if lt is int:
            if rt is JLong:
                pass
            elif rt is float:
                lv = float(lv)
            elif rt is str:
                rv = _java_int(rv)
            else:
                return -1
        elif lt is JLong:
            if rt is int:
                pass
            elif rt is float:
                lv = float(lv)
            elif rt is str:
                rv = _java_int(rv, _LONG_MIN, _LONG_MAX)
            else:
                return -1
        elif lt is float:
            if rt is int or rt is JLong:
                rv = float(rv)
            elif rt is str:
                rv = _java_double(rv)
            else:
                return -1
        elif lt is str:
            if rt is bool:
                lv = lv.lower() == "true"  # Boolean.valueOf
            elif rt is int:
                lv = _java_int(lv)
            elif rt is JLong:
                lv = _java_int(lv, _LONG_MIN, _LONG_MAX)
            elif rt is float:
                lv = _java_double(lv)
            else:
                return -1
        else:
            return -1
    return (lv > rv) - (lv < rv)


# -- tokens --------------------------------------------------------------------------------------

_KEYWORDS: Final = frozenset(
    [
        "NOT",
        "AND",
        "OR",
        "BETWEEN",
        "IN",
        "TRUE",
        "FALSE",
        "NULL",
        "IS",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
    ]
)
# Alternatives in an order that gives JavaCC's longest match: a float before an integer.
_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\n\r\f]+)
  | (?P<comment>--[^\n\r]*(?:\r\n|\n|\r)|/\*[^*]*\*+(?:[^/*][^*]*\*+)*/)
  | (?P<float>(?:[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+))
  | (?P<int>0|[1-9][0-9]*[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<id>[a-zA-Z_$][a-zA-Z0-9_$]*)
  | (?P<op><>|>=|<=|[=<>(),+-])
    """,
    re.VERBOSE,
)


class _Token:
    __slots__ = ("column", "kind", "line", "text")

    def __init__(self, kind: str, text: str, line: int, column: int) -> None:
        self.kind = kind  # "int", "float", "string", "id", a keyword, an operator, or "EOF"
        self.text = text
        self.line = line
        self.column = column


def _tokens(source: str) -> Iterator[_Token]:
    """Tokens on demand, as JavaCC lexes: text after the expression is never read."""
    position = 0
    line, line_start = 1, 0
    while position < len(source):
        match = _TOKEN.match(source, position)
        column = position - line_start + 1
        if match is None:
            raise SqlParseError(
                f"TokenMgrError: Lexical error at line {line}, column {column}.  "
                f"Encountered: {source[position]!r}"
            )
        kind = match.lastgroup or ""
        text = match.group()
        if kind == "id" and text.upper() in _KEYWORDS:
            kind = text.upper()
        elif kind == "op":
            kind = text
        if kind not in ("space", "comment"):
            yield _Token(kind, text, line, column)
        for newline in re.finditer(r"\r\n|\n|\r", text):
            line, line_start = line + 1, position + newline.end()
        position = match.end()
    while True:
        yield _Token("EOF", "<EOF>", line, len(source) - line_start + 1)


# -- the tree: each node is an evaluator plus what the parser's checks need to know -------------

Props = Mapping[str, str]
Eval = Callable[[Props], Any]

_BOOL = "bool"  # a BooleanExpression: comparisons, logic, NOT, IN, CONTAINS...
_BOOL_CONST = "boolconst"  # TRUE, FALSE, NULL (BooleanConstantExpression)
_CONST = "const"  # a number or a string literal
_PROP = "prop"  # a property
_OTHER = "other"  # a negation


class _Node:
    __slots__ = ("evaluate", "kind", "text", "value")

    def __init__(self, kind: str, evaluate: Eval, text: str, value: Any = None) -> None:
        self.kind = kind
        self.evaluate = evaluate
        self.text = text
        self.value = value


def _constant(value: Any, text: str, kind: str = _CONST) -> _Node:
    return _Node(kind, lambda _props: value, text, value)


def _property(name: str) -> _Node:
    return _Node(_PROP, lambda props: props.get(name), name)


def _as_boolean(node: _Node) -> _Node:
    if node.kind in (_BOOL, _BOOL_CONST):
        return node
    if node.kind == _PROP:
        inner = node.evaluate

        def cast(props: Props) -> Any:
            value = inner(props)
            if value is None:
                return None
            return value if type(value) is bool else False

        return _Node(_BOOL, cast, node.text)
    raise SqlParseError(
        f"ParseException: Expression will not result in a boolean value: {node.text}"
    )


def _not(node: _Node) -> _Node:
    inner = node.evaluate

    def negation(props: Props) -> Any:
        value = inner(props)
        return None if value is None else not value

    return _Node(_BOOL, negation, f"NOT {node.text}")


def _and(left: _Node, right: _Node) -> _Node:
    lf, rf = left.evaluate, right.evaluate

    def conjunction(props: Props) -> Any:
        lv = lf(props)
        if lv is False:
            return False
        rv = rf(props)
        if rv is False:
            return False
        if lv is None or rv is None:
            return None
        return True

    return _Node(_BOOL, conjunction, f"({left.text} AND {right.text})")


def _or(left: _Node, right: _Node) -> _Node:
    lf, rf = left.evaluate, right.evaluate

    def disjunction(props: Props) -> Any:
        lv = lf(props)
        if lv is True:
            return True
        rv = rf(props)
        if rv is True:
            return True
        if lv is None or rv is None:
            return None
        return False

    return _Node(_BOOL, disjunction, f"({left.text} OR {right.text})")


def _equal_unchecked(left: _Node, right: _Node, text: str) -> _Node:
    lf, rf = left.evaluate, right.evaluate

    def equal(props: Props) -> Any:
        lv, rv = lf(props), rf(props)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        if type(lv) is type(rv) and lv == rv:
            return True
        return _compare(lv, rv) == 0

    return _Node(_BOOL, equal, text)


def _check_equal_operand(node: _Node) -> None:
    if node.kind in (_CONST, _BOOL_CONST) and node.value is None:
        raise SqlParseError(f"RuntimeException: '{node.text}' cannot be compared.")


def _equal(left: _Node, right: _Node) -> _Node:
    _check_equal_operand(left)
    _check_equal_operand(right)
    if left.kind == _BOOL_CONST and right.kind == _CONST:
        raise SqlParseError(
            f"RuntimeException: '{left.text}' cannot be compared with '{right.text}'"
        )
    return _equal_unchecked(left, right, f"{left.text} = {right.text}")


def _check_order_operand(node: _Node) -> None:
    number = node.kind == _CONST and type(node.value) in (int, JLong, float)
    if node.kind in (_CONST, _BOOL_CONST, _BOOL) and not number:
        raise SqlParseError(f"RuntimeException: Value '{node.text}' cannot be compared.")


_ORDER: Final[dict[str, Callable[[int], bool]]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _order(op: str, left: _Node, right: _Node) -> _Node:
    _check_order_operand(left)
    _check_order_operand(right)
    lf, rf, test = left.evaluate, right.evaluate, _ORDER[op]

    def ordering(props: Props) -> Any:
        lv = lf(props)
        if lv is None:
            return None
        rv = rf(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:  # two strings compare as doubles, or fail
            lv, rv = _java_double(lv), _java_double(rv)
        return test(_compare(lv, rv))

    return _Node(_BOOL, ordering, f"{left.text} {op} {right.text}")


def _between(value: _Node, low: _Node, high: _Node, negated: bool) -> _Node:
    if negated:
        return _or(_order("<", value, low), _order(">", value, high))
    if low.kind in (_CONST, _BOOL_CONST) and high.kind in (_CONST, _BOOL_CONST):
        if low.value is None or high.value is None:
            raise SqlParseError(
                "RuntimeException: Illegal values of between, values can not be null!"
            )
        try:
            wrong_way = _compare(high.value, low.value) < 0
        except _EvalError as error:
            raise SqlParseError(f"RuntimeException: {error}") from None
        if wrong_way:
            raise SqlParseError(
                f"RuntimeException: Illegal values of between, left value({low.text}) "
                f"must less than or equal to right value({high.text})"
            )
    return _and(_order(">=", value, low), _order("<=", value, high))


def _in(value: _Node, items: list[str], negated: bool) -> _Node:
    if value.kind != _PROP:
        raise SqlParseError(
            f"RuntimeException: Expected a property for In expression, got: {value.text}"
        )
    members = frozenset(items)
    inner = value.evaluate

    def membership(props: Props) -> Any:
        found = inner(props)
        if type(found) is not str:  # NULL (or not a string) is unknown
            return None
        return (found in members) != negated

    word = "NOT IN" if negated else "IN"
    return _Node(_BOOL, membership, f"{value.text} {word} ({', '.join(items)})")


_STRING_TESTS: Final[dict[str, Callable[[str, str], bool]]] = {
    "CONTAINS": lambda s, x: x in s,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


def _string_test(word: str, value: _Node, search: str, negated: bool) -> _Node:
    inner, test = value.evaluate, _STRING_TESTS[word]

    def string_test(props: Props) -> Any:
        # RocketMQ answers FALSE, not unknown, for NULL, an empty search or a non-string.
        found = inner(props)
        if not search or type(found) is not str:
            return False
        return test(found, search) != negated

    prefix = "NOT " if negated else ""
    return _Node(_BOOL, string_test, f"{value.text} {prefix}{word} '{search}'")


def _negate(node: _Node) -> _Node:
    inner = node.evaluate

    def negation(props: Props) -> Any:
        value = inner(props)
        kind = type(value)
        if kind is int or kind is float:
            return -value
        if kind is JLong:
            return JLong(-value)
        return None  # NULL, a string or a boolean

    return _Node(_OTHER, negation, f"-{node.text}")


# -- the parser ---------------------------------------------------------------------------------


class _Parser:
    def __init__(self, source: str) -> None:
        self.stream = _tokens(source)
        self.ahead: list[_Token] = []

    def peek(self, ahead: int = 0) -> _Token:
        while len(self.ahead) <= ahead:
            self.ahead.append(next(self.stream))
        return self.ahead[ahead]

    def take(self) -> _Token:
        token = self.peek()
        del self.ahead[0]
        return token

    def expect(self, kind: str) -> _Token:
        token = self.peek()
        if token.kind != kind:
            raise self.unexpected(token, f'"{kind}"' if len(kind) < 3 else f"<{kind}>")
        return self.take()

    @staticmethod
    def unexpected(token: _Token, wanted: str) -> SqlParseError:
        return SqlParseError(
            f'ParseException: Encountered "{token.text}" at line {token.line}, '
            f"column {token.column}. Was expecting: {wanted}"
        )

    def parse(self) -> _Node:
        # RocketMQ's JmsSelector() ends without <EOF>: whatever follows a whole expression is
        # ignored, unread ("a = 1 -- note" without a line break works there, so here too).
        return _as_boolean(self.or_expression())

    def or_expression(self) -> _Node:
        left = self.and_expression()
        while self.peek().kind == "OR":
            self.take()
            left = _or(_as_boolean(left), _as_boolean(self.and_expression()))
        return left

    def and_expression(self) -> _Node:
        left = self.equality()
        while self.peek().kind == "AND":
            self.take()
            left = _and(_as_boolean(left), _as_boolean(self.equality()))
        return left

    def equality(self) -> _Node:
        left = self.comparison()
        while True:
            kind = self.peek().kind
            if kind == "=":
                self.take()
                left = _equal(left, self.comparison())
            elif kind == "<>":
                self.take()
                left = _not(_equal(left, self.comparison()))
            elif kind == "IS":
                self.take()
                negated = self.peek().kind == "NOT"
                if negated:
                    self.take()
                self.expect("NULL")
                null = _constant(None, "NULL", _BOOL_CONST)
                is_null = _equal_unchecked(left, null, f"{left.text} IS NULL")
                left = _not(is_null) if negated else is_null
            else:
                return left

    def comparison(self) -> _Node:
        left = self.unary()
        while True:
            kind = self.peek().kind
            negated = kind == "NOT" and self.peek(1).kind in (
                "BETWEEN",
                "IN",
                "CONTAINS",
                "STARTSWITH",
                "ENDSWITH",
            )
            if negated:
                self.take()
                kind = self.peek().kind
            if kind in _ORDER:
                self.take()
                left = _order(kind, left, self.unary())
            elif kind in _STRING_TESTS:
                self.take()
                left = _string_test(kind, left, self.string(), negated)
            elif kind == "BETWEEN":
                self.take()
                low = self.unary()
                self.expect("AND")
                left = _between(left, low, self.unary(), negated)
            elif kind == "IN":
                self.take()
                self.expect("(")
                items = [self.string()]
                while self.peek().kind == ",":
                    self.take()
                    items.append(self.string())
                self.expect(")")
                left = _in(left, items, negated)
            else:
                return left

    def unary(self) -> _Node:
        kind = self.peek().kind
        if kind == "+":
            self.take()
            return self.unary()
        if kind == "-":
            self.take()
            return _negate(self.unary())
        if kind == "NOT":
            self.take()
            return _not(_as_boolean(self.unary()))
        return self.primary()

    def primary(self) -> _Node:
        token = self.peek()
        kind = token.kind
        if kind == "(":
            self.take()
            node = self.or_expression()
            self.expect(")")
            return node
        if kind == "id":
            self.take()
            return _property(token.text)
        if kind == "string":
            return _constant(self.string(), token.text)
        if kind == "int":
            self.take()
            return _constant(_decimal(token.text), token.text)
        if kind == "float":
            self.take()
            return _constant(_float(token.text), token.text)
        if kind in ("TRUE", "FALSE", "NULL"):
            self.take()
            value = {"TRUE": True, "FALSE": False, "NULL": None}[kind]
            return _constant(value, kind, _BOOL_CONST)
        raise self.unexpected(token, "a literal, a property or (")

    def string(self) -> str:
        return self.expect("string").text[1:-1].replace("''", "'")


def _decimal(text: str) -> int:
    value = int(text.rstrip("lL"))
    if value > _LONG_MAX:
        raise SqlParseError(f'NumberFormatException: For input string: "{text}"')
    return value if value <= _INT_MAX else JLong(value)


def _float(text: str) -> float:
    value = float(text)
    if value == float("inf"):
        raise SqlParseError(f"RuntimeException: {text} is greater than 1.7976931348623157E308")
    if value < _DOUBLE_MIN_VALUE:  # RocketMQ compares with Double.MIN_VALUE: 0.0 is refused
        raise SqlParseError(f"RuntimeException: {text} is less than 4.9E-324")
    return value


# -- the compiled expression and its cache ------------------------------------------------------


class SqlExpression:
    """A compiled SQL92 expression: :meth:`matches` a message's properties."""

    __slots__ = ("_evaluate", "source")

    def __init__(self, source: str, root: _Node) -> None:
        self.source = source
        self._evaluate = root.evaluate

    def matches(self, properties: Props) -> bool:
        """True only when the expression is TRUE: unknown (NULL) and errors drop the message."""
        try:
            return self._evaluate(properties) is True
        except (_EvalError, ValueError, OverflowError):
            return False

    def matches_record(self, view: memoryview | bytes) -> bool:
        return self.matches(record_properties(view))

    def __repr__(self) -> str:
        return f"SqlExpression({self.source!r})"


_CACHE_MAX: Final = 1024
_cache: OrderedDict[str, SqlExpression | SqlParseError] = OrderedDict()


def compile_sql(source: str | None) -> SqlExpression:
    """Compile ``source`` once; later calls (every pull of a subscription) hit the cache.
    Raises :class:`SqlParseError` (cached too, as RocketMQ caches its parse failures)."""
    if source is None or not source.strip():
        raise SqlParseError("ParseException: the SQL92 expression is empty")
    found = _cache.get(source)
    if found is None:
        try:
            found = SqlExpression(source, _Parser(source).parse())
        except SqlParseError as error:
            found = error
        except RecursionError:  # a pathological nesting depth
            found = SqlParseError("ParseException: the expression nests too deeply")
        _cache[source] = found
        if len(_cache) > _CACHE_MAX:
            _cache.popitem(last=False)
    else:
        _cache.move_to_end(source)
    if isinstance(found, SqlParseError):
        raise SqlParseError(str(found))
    return found


# -- a stored record's properties ---------------------------------------------------------------

_HEADER = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")


def record_properties(view: memoryview | bytes) -> dict[str, str]:
    """The PROPERTIES of one whole stored record (as the store serves it, already checked),
    read in place without decoding the body."""
    magic = _HEADER.unpack_from(view, 0)[1]
    sysflag = _I32.unpack_from(view, SYSFLAG_AT)[0]
    body_at = BODY_AT_V4
    if sysflag & SysFlag.BORNHOST_V6:
        body_at += V6_SHIFT
    if sysflag & SysFlag.STOREHOST_V6:
        body_at += V6_SHIFT
    topic_at = body_at + _I32.unpack_from(view, body_at - 4)[0]
    if magic == MAGIC_V1:
        props_at = topic_at + 1 + view[topic_at]
    else:
        props_at = topic_at + 2 + _I16.unpack_from(view, topic_at)[0]
    length = _I16.unpack_from(view, props_at)[0]
    return decode_properties_bytes(bytes(view[props_at + 2 : props_at + 2 + length]))
