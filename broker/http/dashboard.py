"""The web dashboard's own routes: the topics' traffic rates (``GET /api/stats/topics``, the one
JSON route only the page needs) and ``/dashboard/`` as the page; the HTTP front serves the files
of ``static/`` under ``/dashboard/``.

Everything else the page shows comes from the admin routes of ``docs/http.md``; the page is
plain ES modules and CSS, no build step and nothing fetched from elsewhere, so it works offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.services.stats import BrokerStats, StatsItem

__all__ = ["STATIC_DIR", "routes", "topic_rates_view"]

STATIC_DIR = Path(__file__).with_name("static")


def _traffic(item: StatsItem | None) -> dict[str, Any]:
    if item is None:
        return {"tps": 0.0, "messages": 0, "bytes": 0}
    return {"tps": round(item.minute().tps, 2), "messages": item.messages, "bytes": item.bytes}


def topic_rates_view(stats: BrokerStats) -> dict[str, Any]:
    """Messages in (stored) and out (handed to consumers) per topic: the cumulative counts and
    the last minute's rate, RocketMQ's TOPIC_PUT_NUMS and GROUP_GET_NUMS summed over groups."""
    out: dict[str, dict[str, Any]] = {}
    for (topic, group), item in stats.group_get.items():
        entry = out.setdefault(topic, {"tps": 0.0, "messages": 0, "bytes": 0, "groups": {}})
        traffic = _traffic(item)
        entry["tps"] = round(entry["tps"] + traffic["tps"], 2)
        entry["messages"] += traffic["messages"]
        entry["bytes"] += traffic["bytes"]
        entry["groups"][group] = traffic
    names = sorted(set(stats.topic_put) | set(out))
    return {
        "put_tps": stats.put_tps(),
        "get_tps": stats.get_tps(),
        "put_total": stats.put_total,
        "get_total": stats.get_total,
        "topics": [
            {
                "topic": name,
                "in": _traffic(stats.topic_put.get(name)),
                "out": out.get(name, {"tps": 0.0, "messages": 0, "bytes": 0, "groups": {}}),
            }
            for name in names
        ],
    }


async def topic_rates(request: web.Request) -> web.Response:
    broker: BrokerCore = request.app["broker"]
    return web.json_response(topic_rates_view(broker.stats))


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


def routes() -> list[web.RouteDef]:
    """The rates route, and ``/dashboard/`` (with the slash) as the page too: the front's
    static files under that prefix would answer it with a 403 (no directory listing)."""
    return [web.get("/api/stats/topics", topic_rates), web.get("/dashboard/", index)]
