"""What producers, consumers and admin tools share: a client id, a connection pool, the
route cache, and background tasks that stop with the client (``ClientCore``, RocketMQ's
``MQClientInstance``, one per SDK object here rather than one per process), and the life cycle
around it (``CoreClient``: start, close, ``async with``, the guards)."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Final, Self

from pocketmq.broker.protocol import RemotingCommand, RequestCode
from pocketmq.broker.protocol.headers import ClusterInfo, decode_json_body

from .connection import ConnectionPool, Credentials, as_credentials, check_response, tls_context
from .errors import ClientClosedError, ClientUsageError, RouteNotFoundError
from .route import MASTER_ID, RouteClient

__all__ = ["ClientCore", "CoreClient", "local_ip"]

log = logging.getLogger("pocketmq.client")


def local_ip() -> str:
    """This host's outbound IPv4 address, else 127.0.0.1.

    A UDP ``connect`` only picks a route; no packet is sent.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
            return ip if ip and ip != "0.0.0.0" else "127.0.0.1"
    except OSError:
        return "127.0.0.1"


TLS_ENV: Final = "POCKETMQ_TLS"
TLS_CA_ENV: Final = "POCKETMQ_TLS_CA"


def client_tls(
    tls: bool | None = None, tls_ca: str | os.PathLike[str] | None = None
) -> ssl.SSLContext | None:
    """The TLS context of a client's connections, name servers' included (RocketMQ's
    ``tls.enable``, per client), or None for plaintext. ``tls`` None: ``POCKETMQ_TLS`` says
    (``1``/``true``), as the ``-Dtls.enable=true`` system property turns it on for every
    RocketMQ client of a JVM; ``tls_ca`` (default ``POCKETMQ_TLS_CA``): the certificate to
    verify the servers' against, which also turns TLS on; without one none is verified.
    The environment is read only when neither is given."""
    if tls is None and tls_ca is None:
        tls = os.environ.get(TLS_ENV, "").strip().lower() in ("1", "true", "yes", "on")
        tls_ca = os.environ.get(TLS_CA_ENV) or None
    return tls_context(tls_ca) if tls or tls_ca is not None else None


class ClientCore:
    """Client id ``ip@instance_name`` (instance name default ``pid#nanotime``, as RocketMQ
    4.9+ does), the pool, the routes and the background tasks."""

    def __init__(
        self,
        *,
        namesrv: str | Sequence[str] | None = None,
        instance_name: str | None = None,
        client_ip: str | None = None,
        request_timeout_ms: float = 3000,
        connect_timeout_ms: float = 3000,
        requests_inflight_max: int = 1024,
        route_refresh_interval_s: float = 30.0,
        default_topic_queue_nums: int = 4,
        credentials: Credentials | tuple[str, ...] | None = None,
        tls: bool | None = None,
        tls_ca: str | os.PathLike[str] | None = None,
        seed: int | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ClientUsageError(f"seed must be an int, got {seed!r:.40}")
        if clock_ms is not None and not callable(clock_ms):
            raise ClientUsageError(f"clock_ms must be a function giving epoch ms: {clock_ms!r:.40}")
        # A seed makes a run repeatable (docs/testing.md): the client's random choices come
        # from it, its instance name and generated IDs too; clock_ms (epoch ms) gives the
        # times it stamps (born timestamps, the time part of IDs): a manual clock's now_ms.
        self.seed = seed
        self.rng = random.Random(seed) if seed is not None else random.Random()
        self.clock_ms = clock_ms
        self.client_ip = client_ip or local_ip()
        if instance_name is None and seed is not None:
            instance_name = f"seed-{seed}"  # not the pid: the same client ID in every run
        self.instance_name = instance_name or f"{os.getpid()}#{time.monotonic_ns()}"
        self.client_id = f"{self.client_ip}@{self.instance_name}"
        self.request_timeout_ms = request_timeout_ms
        try:
            signing = as_credentials(credentials)
        except (TypeError, ValueError) as error:
            raise ClientUsageError(f"credentials: {error}") from None
        self.pool = ConnectionPool(
            connect_timeout_ms=connect_timeout_ms,
            requests_inflight_max=requests_inflight_max,
            credentials=signing,
            ssl=client_tls(tls, tls_ca),
        )
        self.routes = RouteClient(
            self.pool,
            namesrv,
            timeout_ms=request_timeout_ms,
            refresh_interval_s=route_refresh_interval_s,
            default_topic_queue_nums=default_topic_queue_nums,
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise ClientClosedError("client is closed")

    # -- background tasks --------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Run ``coro`` until it ends or the client closes; errors are logged."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    def every(
        self,
        interval_s: float,
        fn: Callable[[], Awaitable[object]],
        *,
        name: str,
        first_delay_s: float | None = None,
        wake: asyncio.Event | None = None,
    ) -> asyncio.Task[Any]:
        """Call ``fn`` every ``interval_s`` (and at once whenever ``wake`` is set)."""

        async def loop() -> None:
            delay = interval_s if first_delay_s is None else first_delay_s
            while not self.closed:
                if wake is None:
                    await asyncio.sleep(delay)
                else:
                    try:
                        async with asyncio.timeout(delay):
                            await wake.wait()
                    except TimeoutError:
                        pass
                    wake.clear()
                if self.closed:
                    return
                try:
                    await fn()
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("%s failed", name)
                delay = interval_s

        return self.spawn(loop(), name=name)

    async def stop_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Stop background tasks and close every connection."""
        self.closed = True
        await self.stop_tasks()
        await self.pool.close()

    # -- broker requests ---------------------------------------------------------------------

    def broker_addr(self, broker_name: str) -> str:
        """The master of ``broker_name`` (else any replica) from the cached routes."""
        addr = self.routes.broker_addr(broker_name) or self.routes.broker_addr(
            broker_name, master_only=False
        )
        if addr is None:
            raise RouteNotFoundError(broker_name, "broker not in any known route")
        return addr

    async def resolve_broker(self, broker_name: str, topic: str | None = None) -> str:
        """Like ``broker_addr``, fetching ``topic``'s route first if the broker is unknown."""
        try:
            return self.broker_addr(broker_name)
        except RouteNotFoundError:
            if topic is None:
                raise
        await self.routes.get(topic)
        return self.broker_addr(broker_name)

    async def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO (106) from the name server."""
        response = check_response(
            await self.routes.invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        )
        return decode_json_body(response.body or b"{}", ClusterInfo)

    async def master_brokers(self) -> dict[str, str]:
        """Every broker the name server knows that has a master: name -> master address."""
        info = await self.cluster_info()
        return {
            name: data.broker_addrs[MASTER_ID]
            for name, data in sorted(info.broker_addr_table.items())
            if MASTER_ID in data.broker_addrs
        }

    def invoke(
        self, addr: str, cmd: RemotingCommand, timeout_ms: float | None = None
    ) -> Coroutine[Any, Any, RemotingCommand]:
        """The request's coroutine, to await (a plain function: no coroutine of its own on the
        path of every send). ``ClientClosedError`` is raised here, when called."""
        self.check_open()
        timeout = self.request_timeout_ms if timeout_ms is None else timeout_ms
        conn = self.pool.cached(addr)
        if conn is not None:  # the common case: two coroutines less
            return conn.invoke(cmd, timeout)
        return self.pool.invoke(addr, cmd, timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        self.check_open()
        await self.pool.invoke_oneway(addr, cmd)

    async def invoke_broker(
        self, broker_name: str, cmd: RemotingCommand, timeout_ms: float | None = None
    ) -> RemotingCommand:
        return await self.invoke(self.broker_addr(broker_name), cmd, timeout_ms)


class CoreClient:
    """The life cycle every client shares: Producer, TransactionProducer, SimpleConsumer,
    PushConsumer, PullConsumer and Admin.

    One ``ClientCore`` (client id ``ip@instance_name``, connections, routes, background
    tasks); ``start()`` and ``close()``, both idempotent, and a client once closed stays
    closed (``start()`` raises ``ClientClosedError``); ``async with`` (aiokafka's
    ``__aenter__`` -> ``start()``); and ``_check_open()``, the guard at the top of every call
    that needs a started client that is not closing (asyncpg's ``_check_open``).

    A client fills in three hooks:

    * ``_check_start()``: raises before anything starts (a consumer without a subscription,
      a transaction producer without a checker); ``start()`` may then be called again;
    * ``_start()``: runs once the client counts as started;
    * ``_close()``: runs when ``close()`` begins (``_closing`` is set, ``_started`` tells
      whether there is anything to undo); the core closes after it, whatever it raises.
    """

    _kind = "client"

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        instance_name: str | None = None,
        client_ip: str | None = None,
        request_timeout_ms: float = 3000,
        credentials: Credentials | tuple[str, ...] | None = None,
        **core_options: Any,
    ) -> None:
        self._core = ClientCore(
            namesrv=namesrv,
            instance_name=instance_name,
            client_ip=client_ip,
            request_timeout_ms=request_timeout_ms,
            credentials=credentials,
            **core_options,
        )
        self._started = False
        self._closing = False  # close() has begun: no new work
        self._closed = False  # close() has finished

    @property
    def client_id(self) -> str:
        """``ip@instance_name``: how brokers tell this client from others of its group."""
        return self._core.client_id

    @property
    def instance_name(self) -> str:
        return self._core.instance_name

    async def start(self) -> None:
        """Start the client (what that involves is the client's ``_start``); a second call
        does nothing; ``ClientClosedError`` once the client is closed."""
        if self._closing:
            raise ClientClosedError(f"{self._kind} is closed")
        if self._started:
            return
        self._check_start()
        self._started = True
        await self._start()

    async def close(self) -> None:
        """Stop the client's work, say goodbye to the brokers (the client's ``_close``), then
        close every connection. A second call does nothing."""
        if self._closing:
            return
        self._closing = True
        try:
            await self._close()
        finally:
            self._closed = True
            await self._core.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closing:
            raise ClientClosedError(f"{self._kind} is closed")
        if not self._started:
            raise ClientClosedError(
                f"{self._kind} is not started: call start() or use 'async with'"
            )

    # -- hooks -------------------------------------------------------------------------------

    def _check_start(self) -> None:
        """Raise if the client cannot start as configured."""

    async def _start(self) -> None:
        """Start the client's background work."""

    async def _close(self) -> None:
        """Stop the client's work and say goodbye to the brokers."""
