"""broker.protocol is shared with the client SDK: stdlib, msgspec and isal (the fast CRC-32, with a
zlib fallback) only, no I/O modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pocketmq.broker.protocol

PACKAGE_DIR = Path(pocketmq.broker.protocol.__file__).parent
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


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_protocol_imports_only_stdlib_and_msgspec() -> None:
    files = sorted(PACKAGE_DIR.glob("*.py"))
    assert len(files) >= 6
    for path in files:
        for root in _imported_roots(path):
            assert root not in FORBIDDEN, f"{path.name} imports {root}"
            assert root in ("msgspec", "isal") or root in sys.stdlib_module_names, (
                f"{path.name} imports {root}"
            )


def test_importing_protocol_loads_no_event_loop() -> None:
    code = (
        "import sys, broker.protocol, broker.protocol.headers, broker.protocol.message_codec\n"
        "bad = {'asyncio', 'socket', 'uvloop', 'store', 'client'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
