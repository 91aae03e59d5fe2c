"""Imports go one way (DESIGN.md): ids <- store <- broker; client uses only broker.protocol and ids;
sparkexport reads the store and ids; the command line (cli) sits above them all. ``ids`` and
``store`` never touch asyncio or sockets. Inside the broker: protocol, errors and config <-
services <- core <- fronts (remoting handlers, gRPC) <- app. Imports under ``TYPE_CHECKING``
count like any other, and no modules import each other in a circle. Everything installs under
``pocketmq``: an import of a bare ``broker`` or ``store`` works only in a checkout, so none is
allowed."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# These read the checkout itself (sources, README, CI, compose): not run against a wheel.
pytestmark = pytest.mark.checkout
FOLDERS = ("ids", "store", "broker", "client", "sparkexport", "testing", "cli")
P = "pocketmq."

# The pure modules of the store that the protocol codec and the SDK share with it: the record
# format (store/record.py: layout, encode, decode, validate, flag bits, property codec) and what
# it imports (crc, errors), Java's String.hashCode (javahash), RocketMQ's reserved topic names
# (topics) and durations as text (durations). A pulled body is commitlog records, so the codec
# and the SDK read them with the store's one definition instead of copies of it (issue 14
# found nine); none of these modules imports the store engine, so the SDK does not load it.
STORE_FORMAT = {
    "store.record",
    "store.crc",
    "store.errors",
    "store.javahash",
    "store.topics",
    "store.durations",
}
BELOW_SERVICES = {
    "broker.protocol",
    "broker.errors",
    "broker.config",
    "broker.config_properties",
    "store",
    "ids",
}
BELOW_FRONTS = {*BELOW_SERVICES, "broker.services", "broker.core"}
# What each package (or sub-package) may import from the project, and which stdlib modules it may not.
PROJECT_ALLOWED = {
    "ids": {"ids"},
    "store": {"ids", "store"},
    "broker.protocol": {"broker.protocol", *STORE_FORMAT},
    # Inside the broker, rooms on floors: each imports its own floor and those below.
    "broker.errors": {"broker.errors", "store"},
    "broker.config": {"broker.config", "store"},
    # broker.conf keys <-> BrokerConfig: read by the command line and GET/UPDATE_BROKER_CONFIG
    "broker.config_properties": {"broker.config", "broker.protocol", "store"},
    # services: the behaviour, once; no front, no app (they reach producers and held pulls
    # through the interfaces the fronts register, never through a connection).
    "broker.services": {*BELOW_SERVICES, "broker.services"},
    "broker.core": {*BELOW_SERVICES, "broker.services", "broker.core"},
    # fronts: they translate a protocol onto the services, through the core
    "broker.remoting": {"broker.remoting", "broker.protocol"},
    "broker.namesrv": {"broker.namesrv", "broker.remoting", "broker.protocol"},
    "broker.handlers": {*BELOW_FRONTS, "broker.handlers", "broker.remoting"},
    "broker.grpc": {*BELOW_FRONTS, "broker.grpc"},
    "broker.http": {*BELOW_FRONTS, "broker.http"},
    # the app wires everything; serve runs it
    "broker.app": {"broker", "store", "ids"},
    "broker.serve": {"broker", "store", "ids"},
    "broker": set(),  # broker/__init__.py: empty
    "client": {"client", "broker.protocol", "ids", *STORE_FORMAT},
    "sparkexport": {"sparkexport", "store", "ids"},
    # The test toolkit (pytest plugin, embedded broker, snapshots, replay) sits above the
    # broker and the SDK: it runs the one and drives the other.
    "testing": {"testing", "broker", "client", "store", "ids"},
    # The command line is the top of the stack: servers, SDK, store tools and the exporter.
    "cli": {"cli", "broker", "client", "store", "ids", "sparkexport", "testing"},
}
FORBIDDEN_EXTERNAL = {
    "ids": {"asyncio", "socket", "selectors", "uvloop"},
    "store": {"asyncio", "socket", "selectors", "uvloop"},
    "broker.protocol": {"asyncio", "socket", "selectors", "uvloop"},
}


def _layer_of(module: str) -> str:
    name = module.removeprefix(P)
    parts = name.split(".")
    if parts[0] == "broker" and len(parts) > 1:
        return f"broker.{parts[1]}"  # a room of the broker: a sub-package or a module
    return parts[0]


def _modules() -> list[tuple[str, Path]]:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).with_suffix("")
            parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
            found.append((P + ".".join(parts), path))
    return found


def _imports(path: Path, module: str) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                source = f"{base}.{node.module}" if node.module else base
            elif node.module:
                source = node.module
            else:
                continue
            if source == "pocketmq" or (not node.module and node.level):
                # from pocketmq import ids; from . import clients: the names are modules
                names.extend(f"{source}.{alias.name}" for alias in node.names)
            else:
                names.append(source)
    return names


@pytest.mark.parametrize(("module", "path"), _modules(), ids=lambda value: str(value))
def test_imports_follow_the_layers(module: str, path: Path) -> None:
    layer = _layer_of(module)
    allowed = PROJECT_ALLOWED[layer]
    forbidden = FORBIDDEN_EXTERNAL.get(layer, set())
    for name in _imports(path, module):
        top = name.split(".")[0]
        assert top not in FOLDERS, f"{module} imports {name}: write pocketmq.{name}"
        if name.startswith(P):
            inner = name.removeprefix(P)
            assert any(inner == a or inner.startswith(a + ".") for a in allowed), (
                f"{module} imports {name}: layer {layer} may only import {sorted(allowed)}"
            )
        assert top not in forbidden, f"{module} imports {name}, which layer {layer} must not use"


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom pocketmq.broker.server import x\nfrom . import y\n")
    assert _imports(bad, "pocketmq.store.bad") == [
        "asyncio",
        "pocketmq.broker.server",
        "pocketmq.store.y",
    ]


def _graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (imports under TYPE_CHECKING included)."""
    modules = dict(_modules())
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in _imports(path, module):
            while name and name not in modules:  # `from package import name`: the package
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def test_no_import_circles() -> None:
    graph = _graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == [], "\n".join(" -> ".join(c) for c in circles)


def test_every_broker_room_has_a_rule() -> None:
    rooms = {_layer_of(module) for module, _ in _modules() if module.startswith(P + "broker")}
    assert rooms <= set(PROJECT_ALLOWED), sorted(rooms - set(PROJECT_ALLOWED))
