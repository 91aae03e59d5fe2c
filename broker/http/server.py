"""The HTTP front: an aiohttp application on the broker's own event loop.

    front = HttpFront(broker, HttpSettings(host, port, acl), fronts, describe)
    port = await front.start()      # port 0: a free one
    ...
    await front.close()

Routes: ``health.py`` (/health, /ready), ``metrics.py`` (/metrics), ``messages.py`` (a queue's
messages in the message-state transports, state changes), ``admin.py`` and ``lookup.py`` (the
admin JSON API), and ``/dashboard`` (the files of ``static/``, when that folder exists).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import socket
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.http import admin, dashboard, faults, health, lookup, messages, metrics
from pocketmq.broker.http.dashboard import STATIC_DIR
from pocketmq.broker.http.errors import Handler, error_middleware
from pocketmq.broker.http.health import FrontPorts
from pocketmq.broker.http.params import BODY_MAX
from pocketmq.broker.services.acl import AccessControl

__all__ = ["HttpFront", "HttpSettings"]

log = logging.getLogger("pocketmq.broker.http")

_OPEN_PATHS = ("/health", "/ready", "/metrics")


@dataclass(slots=True)
class HttpSettings:
    host: str
    port: int
    acl: AccessControl | None = None
    advertised_host: str | None = None  # the host the address names (default: host)


def _auth_middleware(acl: AccessControl) -> Callable[..., Any]:
    """With ACL on, the API and the dashboard take an admin account's HTTP Basic credentials
    (its access key and secret key); probes and scrapes stay open."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in _OPEN_PATHS:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, encoded = header.partition(" ")
        try:
            access_key, _, secret_key = (
                base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
            )
        except (binascii.Error, UnicodeDecodeError):
            access_key = secret_key = ""
        account = acl.accounts.get(access_key) if scheme.lower() == "basic" else None
        if (
            account is None
            or not account.admin
            or not hmac.compare_digest(account.secret_key.encode(), secret_key.encode())
        ):
            acl.log_denial("HTTP " + request.path, request.remote or "?", "no admin credentials")
            raise web.HTTPUnauthorized(
                text="an admin account's access key and secret key are needed (HTTP Basic)",
                headers={"WWW-Authenticate": 'Basic realm="pocketmq"'},
            )
        return await handler(request)

    return check


class HttpFront:
    def __init__(
        self,
        broker: BrokerCore,
        settings: HttpSettings,
        fronts: FrontPorts,
        describe: Callable[[], dict[str, Any]],
    ) -> None:
        self.broker = broker
        self.settings = settings
        middlewares = [error_middleware]
        if settings.acl is not None:
            middlewares.append(_auth_middleware(settings.acl))
        app = web.Application(client_max_size=BODY_MAX, middlewares=middlewares, logger=log)
        with warnings.catch_warnings():
            # Plain string keys: every route module (and the dashboard's) reads them the same
            # way; aiohttp would rather have AppKey objects and warns.
            warnings.simplefilter("ignore", web.NotAppKeyWarning)
            app["broker"] = broker
            app["fronts"] = fronts
            app["describe"] = describe
        app.add_routes(health.routes())
        app.add_routes(metrics.routes(broker))
        app.add_routes(messages.routes())
        app.add_routes(admin.routes())
        app.add_routes(faults.routes())  # planned faults: /api/faults
        app.add_routes(lookup.routes())
        app.add_routes(dashboard.routes())  # the page's rates route and /dashboard/
        if STATIC_DIR.is_dir():  # the web dashboard (dashboard.py), on the routes above
            app.router.add_get("/dashboard", _to_dashboard)
            app.router.add_static("/dashboard/", STATIC_DIR)
        self.app = app
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return f"{self.settings.advertised_host or self.settings.host}:{self.settings.port}"

    async def start(self, socks: Sequence[socket.socket] = ()) -> int:
        """Listen on ``settings``' host and port, or serve ``socks``, sockets already bound
        and listening (``lazy.py``: the port was taken at start, aiohttp loaded later)."""
        # No access log: a scrape every few seconds would drown the broker's own log.
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        sites: list[web.BaseSite] = [web.SockSite(runner, sock) for sock in socks]
        if not sites:
            sites = [
                web.TCPSite(runner, self.settings.host, self.settings.port, reuse_address=True)
            ]
        try:
            for site in sites:
                await site.start()
        except OSError as error:
            await runner.cleanup()
            raise OSError(
                f"HTTP port {self.settings.host}:{self.settings.port} is not available: {error}"
            ) from None
        self._runner = runner
        self.settings.port = int(runner.addresses[0][1])  # the port chosen for 0
        listening = f"{self.settings.host}:{self.settings.port}"
        told = "" if listening == self.address else f", advertised as {self.address}"
        log.info("HTTP front (health, metrics, admin API) on http://%s%s", listening, told)
        return self.settings.port

    async def close(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


async def _to_dashboard(request: web.Request) -> web.StreamResponse:
    # The page's relative links resolve under /dashboard/, not /.
    raise web.HTTPPermanentRedirect("/dashboard/")
