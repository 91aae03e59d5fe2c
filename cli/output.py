"""How the command line prints: readable lines for a person, ``--json`` for programs.

A person reads ISO-8601 times; ``--json`` keeps the raw epoch milliseconds. Three shapes:
``fields`` (one ``key=value`` line per item, printed as items arrive), ``table`` (aligned
columns with a header, for a finite list) and ``blocks`` (one ``key  value`` line per field, a
blank line between items, for wide records such as a message).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["emit", "iso_ms", "print_blocks", "print_fields", "print_table", "readable"]


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ``2026-11-26T08:00:00.000Z``."""
    try:
        return (
            datetime.fromtimestamp(ms / 1000, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )
    except (OverflowError, OSError, ValueError):
        return f"invalid({ms})"


def _is_epoch_ms(key: str) -> bool:
    return key.endswith(("_ms", "_timestamp")) and not key.endswith(("timeout_ms", "delay_ms"))


def readable(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` for a person: epoch-millisecond fields (``*_ms``, ``*_timestamp``) become ISO
    times, and lose their ``_ms`` suffix."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if _is_epoch_ms(key) and isinstance(value, int) and not isinstance(value, bool):
            out[key.removesuffix("_ms")] = iso_ms(value)
        else:
            out[key] = value
    return out


def _text(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(_text(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _field(value: Any) -> str:
    text = _text(value)
    return json.dumps(text, ensure_ascii=False) if " " in text else text


def print_fields(row: Mapping[str, Any]) -> None:
    print(" ".join(f"{k}={_field(v)}" for k, v in readable(row).items()), flush=True)


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    shown = [readable(row) for row in rows]
    names = [c.removesuffix("_ms") if _is_epoch_ms(c) else c for c in columns]
    cells = [[_text(row.get(name)) for name in names] for row in shown]
    widths = [max([len(name), *(len(line[i]) for line in cells)]) for i, name in enumerate(names)]
    for line in [names, *cells]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )


def print_blocks(rows: Iterable[Mapping[str, Any]]) -> None:
    for index, row in enumerate(rows):
        if index:
            print()
        shown = readable(row)
        width = max(len(key) for key in shown)
        for key, value in shown.items():
            print(f"{key.ljust(width)}  {_text(value)}")
    sys.stdout.flush()


def emit(
    rows: Iterable[Mapping[str, Any]], *, as_json: bool, shape: str = "fields", **kw: Any
) -> None:
    """Print ``rows``: JSON lines with ``as_json``, else in ``shape`` (fields, table, blocks)."""
    if as_json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False, default=str), flush=True)
    elif shape == "table":
        print_table(list(rows), kw["columns"])
    elif shape == "blocks":
        print_blocks(rows)
    else:
        for row in rows:
            print_fields(row)
