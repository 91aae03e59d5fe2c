"""Planned faults over HTTP (``broker/services/faults.py``): list, plan, act now, clear.

GET    /api/faults                 every fault: planned, and used up with what it did
POST   /api/faults                 {"kind": "system_busy", "times": 2, "topic": "Orders"}
                                   {"kind": "delay_pull", "delay_ms": 30000}
                                   {"kind": "close_connection", "client_id": "..."}
                                   {"kind": "crash"}  (answered 202, then the broker
                                   crashes and recovers; poll /health/ready)
DELETE /api/faults                 clear all
DELETE /api/faults/{id}            clear one
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.http.errors import ApiError
from pocketmq.broker.http.params import body_field, json_body, path_int
from pocketmq.broker.services.faults import FaultKind

__all__ = ["routes"]


def _broker(request: web.Request) -> BrokerCore:
    broker: BrokerCore = request.app["broker"]
    return broker


async def list_faults(request: web.Request) -> web.Response:
    faults = _broker(request).faults.list()
    return web.json_response({"faults": [fault.to_dict() for fault in faults]})


async def inject_fault(request: web.Request) -> web.Response:
    body = await json_body(request)
    known = {"kind", "times", "topic", "delay_ms", "client_id"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise ApiError(400, f"unknown body fields {unknown}; known: {sorted(known)}")
    plan = _broker(request).faults
    kind = FaultKind.parse(body_field(body, "kind", str))  # BrokerError -> 400 with the kinds
    if kind in (FaultKind.CLOSE_CONNECTION, FaultKind.CRASH):
        extra = sorted(set(body) - {"kind", "client_id"})
        if extra:
            raise ApiError(400, f"{kind.value} happens now: it takes no {extra}")
    if kind is FaultKind.CLOSE_CONNECTION:
        fault = plan.close_connection(body_field(body, "client_id", str))
        return web.json_response(fault.to_dict(), status=201)
    if kind is FaultKind.CRASH:
        fault = plan.crash()
        return web.json_response(fault.to_dict(), status=202)
    if "client_id" in body:
        raise ApiError(400, f"{kind.value} takes no client_id")
    fault = plan.plan(
        kind,
        times=body_field(body, "times", int, 1),
        topic=body_field(body, "topic", str, None),
        delay_ms=body_field(body, "delay_ms", int, 0),
    )
    return web.json_response(fault.to_dict(), status=201)


async def clear_faults(request: web.Request) -> web.Response:
    return web.json_response({"cleared": _broker(request).faults.clear()})


async def clear_fault(request: web.Request) -> web.Response:
    fault_id = path_int(request, "id", 1)
    cleared = _broker(request).faults.clear(fault_id)
    if not cleared:
        raise ApiError(404, f"no fault {fault_id}")
    return web.json_response({"cleared": cleared})


def routes() -> list[Any]:
    return [
        web.get("/api/faults", list_faults),
        web.post("/api/faults", inject_fault),
        web.delete("/api/faults", clear_faults),
        web.delete("/api/faults/{id}", clear_fault),
    ]
