"""broker.protocol is shared with the client SDK: stdlib, msgspec, isal (the fast CRC-32, with a
zlib fallback) and the store's pure format modules (the record layout and what it builds on, see
tests/test_layering.py) only, no I/O modules and no store engine."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pocketmq.broker.protocol
import pocketmq.store.record

PACKAGE_DIR = Path(pocketmq.broker.protocol.__file__).parent
STORE_DIR = Path(pocketmq.store.record.__file__).parent
FORBIDDEN = {
    "asyncio",
    "socket",
    "selectors",
    "ssl",
    "threading",
    "uvloop",
    "broker",
    "client",
    "store",
    "ids",
}
# The store modules the protocol and the SDK may import; each imports only the others.
STORE_FORMAT = {
    "pocketmq.store.record",
    "pocketmq.store.crc",
    "pocketmq.store.errors",
    "pocketmq.store.javahash",
    "pocketmq.store.topics",
    "pocketmq.store.durations",
}


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _check(path: Path) -> None:
    for name in _imported(path):
        root = name.split(".")[0]
        assert root not in FORBIDDEN, f"{path.name} imports {name}"
        assert (
            root in ("msgspec", "isal") or root in sys.stdlib_module_names or name in STORE_FORMAT
        ), f"{path.name} imports {name}"


def test_protocol_imports_only_stdlib_and_msgspec() -> None:
    files = sorted(PACKAGE_DIR.glob("*.py"))
    assert len(files) >= 6
    for path in files:
        _check(path)


def test_the_store_format_modules_import_only_each_other() -> None:
    for module in STORE_FORMAT:
        _check(STORE_DIR / (module.rsplit(".", 1)[1] + ".py"))


def test_importing_protocol_loads_no_event_loop_and_no_store_engine() -> None:
    code = (
        "import sys, pocketmq.broker.protocol, pocketmq.broker.protocol.headers\n"
        "import pocketmq.broker.protocol.message_codec\n"
        f"shared = {sorted(STORE_FORMAT)!r}\n"
        "bad = {'asyncio', 'socket', 'uvloop'} & set(sys.modules)\n"
        "bad |= {m for m in sys.modules if m.startswith('pocketmq.') and not m.startswith(\n"
        "    'pocketmq.broker.protocol') and m not in shared + ['pocketmq.broker', 'pocketmq.store']}\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
