"""Java's properties text (``java.util.Properties.load``/``store``), as RocketMQ reads its
``broker.conf`` and the bodies of GET/UPDATE_BROKER_CONFIG (``MixAll.string2Properties``).

The rules of ``Properties.load``, which ``parse_properties`` follows:

- a line is ended by ``\\n``, ``\\r`` or ``\\r\\n``; lines of only blanks (space, tab, form
  feed) are skipped, and so is a line whose first non-blank is ``#`` or ``!`` (a comment);
- a line ending in an odd number of backslashes goes on on the next line, whose leading blanks
  are dropped (a comment line never goes on);
- the key runs from the first non-blank to the first unescaped ``=``, ``:`` or blank; blanks
  around one ``=`` or ``:`` separate it from the value, and the value keeps its trailing blanks;
- escapes: ``\\t \\n \\r \\f``, ``\\uXXXX`` (UTF-16 code units; pairs make one character) and a
  backslash before any other character stands for that character; a key without a value has
  the empty value; a key given twice keeps its last value.

``format_properties`` writes text that reads back to the same pairs, escaping as ``store``
does; plain ASCII values come out unchanged, as ``MixAll.properties2String`` writes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec

__all__ = [
    "Entry",
    "PropertiesSyntaxError",
    "format_properties",
    "parse_entries",
    "parse_properties",
    "property_line",
]

_BLANKS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_LINES_MAX = 100_000  # a configuration, not a data file: a bound on what one text may hold


class PropertiesSyntaxError(ValueError):
    """A malformed ``\\uXXXX`` escape (the one error ``Properties.load`` raises), with its line."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.line = line
        self.problem = problem


class Entry(msgspec.Struct, frozen=True):
    """One key and value, with the natural lines (1-based, inclusive) it was written on."""

    key: str
    value: str
    first_line: int
    last_line: int


def _natural_lines(text: str) -> list[str]:
    # str.splitlines would also split on \v, \x1c, \u2028 ...: Java splits on \n and \r only.
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _ends_escaped(line: str) -> bool:
    """Whether a line ends in an odd number of backslashes (it goes on on the next one)."""
    count = len(line) - len(line.rstrip("\\"))
    return count % 2 == 1


def _logical_lines(text: str) -> Iterator[tuple[str, int, int]]:
    lines = _natural_lines(text)
    if len(lines) > _LINES_MAX:
        raise PropertiesSyntaxError(_LINES_MAX, f"more than {_LINES_MAX} lines")
    index = 0
    while index < len(lines):
        first = index
        line = lines[index].lstrip(_BLANKS)
        index += 1
        if not line or line[0] in "#!":
            continue
        parts = []
        while _ends_escaped(line) and index < len(lines):
            parts.append(line[:-1])
            line = lines[index].lstrip(_BLANKS)
            index += 1
        if _ends_escaped(line):  # a backslash at the very end of the text: dropped
            line = line[:-1]
        parts.append(line)
        yield "".join(parts), first + 1, index


def _split_key(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of a logical line."""
    position = 0
    while position < len(line):
        char = line[position]
        if char == "\\":
            position += 2
            continue
        if char in "=:" or char in _BLANKS:
            break
        position += 1
    key = line[:position]
    rest = line[position:].lstrip(_BLANKS)
    if line[position : position + 1] in ("=", ":"):
        rest = line[position + 1 :].lstrip(_BLANKS)
    elif rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _unescape(raw: str, line: int) -> str:
    out: list[str] = []
    position = 0
    while position < len(raw):
        char = raw[position]
        position += 1
        if char != "\\":
            out.append(char)
            continue
        if position >= len(raw):
            break
        char = raw[position]
        position += 1
        if char == "u":
            digits = raw[position : position + 4]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesSyntaxError(line, f"malformed \\uxxxx escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            position += 4
        else:
            out.append(_ESCAPES.get(char, char))
    text = "".join(out)
    # \uD83D\uDE00 is one character written as its two UTF-16 halves: join each pair.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def parse_entries(text: str) -> list[Entry]:
    """Every key and value in order of appearance (repeats included), with their lines."""
    entries = []
    for logical, first, last in _logical_lines(text):
        raw_key, raw_value = _split_key(logical)
        entries.append(Entry(_unescape(raw_key, first), _unescape(raw_value, first), first, last))
    return entries


def parse_properties(text: str) -> dict[str, str]:
    """Keys and values as ``Properties.load`` reads them (the last of a repeated key wins)."""
    return {entry.key: entry.value for entry in parse_entries(text)}


def _escape(text: str, *, key: bool) -> str:
    out: list[str] = []
    for index, char in enumerate(text):
        if char == " ":
            out.append("\\ " if key or index == 0 else " ")
        elif char == "\\":
            out.append("\\\\")
        elif char in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[char])
        elif char in "=:#!":
            out.append("\\" + char)
        elif " " < char <= "~":
            out.append(char)
        else:
            # Java's store writes \uXXXX for anything outside printable ASCII (as UTF-16
            # halves above U+FFFF), so a reader decoding ISO-8859-1, as Java does, gets it.
            units = char.encode("utf-16-be", "surrogatepass")
            for i in range(0, len(units), 2):
                out.append(f"\\u{units[i]:02X}{units[i + 1]:02X}")
    return "".join(out)


def property_line(key: str, value: str) -> str:
    """``key=value`` escaped so that ``parse_properties`` reads back exactly these two."""
    return f"{_escape(key, key=True)}={_escape(value, key=False)}"


def format_properties(pairs: Iterable[tuple[str, str]]) -> str:
    """One ``key=value`` line per pair, in the order given (RocketMQ's GET_BROKER_CONFIG body
    sorts its keys: pass them sorted)."""
    return "".join(property_line(key, value) + "\n" for key, value in pairs)
