"""``GET /health`` and ``GET /ready``: is the broker up, and can clients use it.

Health: the store is open, it takes writes (the disk guard measured now, so a disk that filled
since the last retention pass shows at once), and every front listens (a TCP connect to each
port: what a client would do). Readiness adds that the broker registered with its name
servers at least once, so clients can find it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from pocketmq.broker.core import BrokerCore

__all__ = ["FrontPorts", "check_health", "routes"]

CONNECT_TIMEOUT_S = 1.0
OK = "ok"


@dataclass(frozen=True, slots=True)
class FrontPorts:
    """What the app tells the HTTP front about the other fronts and the name servers."""

    ports: Callable[[], dict[str, int | None]]  # front -> port, None: off
    registered: Callable[[], bool]  # registered with every name server once (or none set)
    stopping: Callable[[], bool]


async def _listening(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            _reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as error:
        return f"not listening on {host}:{port}: {error or type(error).__name__}"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return OK


def _writes(broker: BrokerCore) -> str:
    guard = broker.send.disk
    usage = guard.probe()
    if usage is not None:
        guard.update(usage)  # the same measure retention takes: every front agrees at once
    if guard.refusing:
        return f"refused: {guard.reason}"
    return OK


async def check_health(broker: BrokerCore, fronts: FrontPorts) -> dict[str, str]:
    checks: dict[str, str] = {}
    checks["store"] = "closed: the broker is stopping" if fronts.stopping() else OK
    checks["writes"] = _writes(broker) if checks["store"] == OK else "stopping"
    for name, port in fronts.ports().items():
        checks[name] = "off" if port is None else await _listening(broker.config.host, port)
    checks["http"] = OK  # this answer is the proof
    return checks


def _answer(broker: BrokerCore, checks: dict[str, str], up: str, down: str) -> web.Response:
    failed = [f"{name}: {value}" for name, value in checks.items() if value not in (OK, "off")]
    body: dict[str, Any] = {
        "status": down if failed else up,
        "broker": broker.config.broker_name,
        "checks": checks,
    }
    if failed:
        body["reasons"] = failed
    return web.json_response(body, status=503 if failed else 200)


async def health(request: web.Request) -> web.Response:
    broker: BrokerCore = request.app["broker"]
    checks = await check_health(broker, request.app["fronts"])
    return _answer(broker, checks, "up", "down")


async def ready(request: web.Request) -> web.Response:
    broker: BrokerCore = request.app["broker"]
    fronts: FrontPorts = request.app["fronts"]
    checks = await check_health(broker, fronts)
    checks["namesrv"] = OK if fronts.registered() else "not registered with the name servers yet"
    return _answer(broker, checks, "ready", "not_ready")


def routes() -> list[web.RouteDef]:
    return [web.get("/health", health), web.get("/ready", ready)]
