"""The broker: a store, the services around it and the remoting front-end, in one event loop.

    async with Broker(BrokerConfig(data_dir=Path("data"), port=0)) as broker:
        print(broker.address)   # clients connect here

``port=0`` picks a free port; ``data_dir=None`` keeps everything in memory (embedded use in
tests of applications, like ElasticMQ or Azurite do).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import ipaddress
import logging
import os
import random
import socket
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.core import BrokerCore
from pocketmq.broker.handlers import (
    admin,
    admin_control,
    admin_stats,
    clients,
    inspect,
    pop,
    pull,
    recall,
    retry,
    send,
    transaction,
)
from pocketmq.broker.handlers.broker_config import (
    handle_get_broker_config,
    handle_update_broker_config,
)
from pocketmq.broker.handlers.filter_check import handle_check_client_config
from pocketmq.broker.handlers.pop_lite import RemotingLite
from pocketmq.broker.handlers.reply import handle_reply
from pocketmq.broker.handlers.transaction import RemotingCheckSource
from pocketmq.broker.namesrv import NameServer
from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import (
    NotifyConsumerIdsChangedRequestHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    TopicConfig,
    TopicConfigSerializeWrapper,
    UnregisterBrokerRequestHeader,
    encode_json_body,
)
from pocketmq.broker.protocol.signing import sign_fields
from pocketmq.broker.remoting.client import OutboundConnection
from pocketmq.broker.remoting.server import Connection, Handler, RemotingServer, ServerLimits
from pocketmq.broker.remoting.tls import ensure_certificate, server_context
from pocketmq.broker.services.acl import AccessControl, Account
from pocketmq.broker.services.clients import Channel, ClientRegistry
from pocketmq.broker.services.clock import (
    Clock,
    ManualClock,
    Scheduler,
    SystemClock,
    parse_duration_ms,
)
from pocketmq.broker.services.faults import FaultPlan
from pocketmq.broker.services.flush import FlushService
from pocketmq.broker.services.group_admin import GroupAdmin
from pocketmq.broker.services.groups import GroupManager
from pocketmq.broker.services.lite import is_lmq
from pocketmq.broker.services.lite_expiry import LiteExpiry
from pocketmq.broker.services.locks import LockManager
from pocketmq.broker.services.long_polling import PullHoldService
from pocketmq.broker.services.offsets import OffsetManager
from pocketmq.broker.services.outage import Outage
from pocketmq.broker.services.persist import Write
from pocketmq.broker.services.pop import PopService
from pocketmq.broker.services.progress import ProgressService
from pocketmq.broker.services.pull import PullService
from pocketmq.broker.services.queries import MessageQueries
from pocketmq.broker.services.reply import ReplyService
from pocketmq.broker.services.retention import (
    RetentionPolicy,
    RetentionService,
    broker_readers,
)
from pocketmq.broker.services.retry import RetryService
from pocketmq.broker.services.schedule import ScheduleService
from pocketmq.broker.services.send import SendService
from pocketmq.broker.services.stats import BrokerStats
from pocketmq.broker.services.timer import TimerService
from pocketmq.broker.services.topics import TopicManager
from pocketmq.broker.services.transactions import TransactionService
from pocketmq.broker.services.writer import MessageWriter
from pocketmq.store.message_store import MessageStore
from pocketmq.store.record import Host

if TYPE_CHECKING:
    from pocketmq.broker.grpc.lazy import GrpcTls, LazyGrpcFront
    from pocketmq.broker.grpc.server import GrpcFrontend
    from pocketmq.broker.http.lazy import LazyHttpFront
    from pocketmq.broker.http.server import HttpFront

__all__ = ["SEEDED_START_MS", "Broker", "access_control", "store_host", "tls_files"]

log = logging.getLogger("pocketmq.broker")

# Where a seeded broker's manual clock starts when no clock is given (2026-01-01T00:00:00Z):
# a fixed time, so the timestamps of a seeded run are the same in every run.
SEEDED_START_MS = 1_767_225_600_000


def tls_files(config: BrokerConfig) -> tuple[Path, Path]:
    """The certificate and key served over TLS under ``config``: ``tls_cert``/``tls_key``, or
    a self-signed pair in the data folder's ``tls/`` (a new temporary folder without one)."""
    if config.data_dir is not None:
        folder = config.data_dir / "tls"
    else:
        folder = Path(tempfile.mkdtemp(prefix="pocketmq-tls-"))
    hosts = (config.host, config.advertised_host or config.host)
    return ensure_certificate(folder, hosts, config.tls_cert, config.tls_key)


def store_host(config: BrokerConfig) -> Host:
    """The store host of records and offset message IDs: the advertised address, its name
    resolved as RocketMQ's InetSocketAddress(brokerIP1, port) does (``--advertise broker-a``,
    ``localhost``); a name that does not resolve falls back to the listening host's address
    (127.0.0.1 for a name there too), with the advertised port kept."""
    port = config.advertised_port or config.port
    for name in (config.advertised_host or config.host, config.host):
        try:
            return Host(ipaddress.ip_address(name.strip("[]")).packed, port)
        except ValueError:
            pass
        try:
            found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            continue
        if found:
            return Host(ipaddress.ip_address(found[0][4][0]).packed, port)
    return Host(ipaddress.ip_address("127.0.0.1").packed, port)


def access_control(config: BrokerConfig) -> AccessControl | None:
    """The ACL a config asks for (``acl_file``, ``access_keys`` as admin accounts), or None:
    open. ``AclFileError`` (one line) for a file that cannot be used."""
    if config.acl_file is not None:
        extra = [Account(ak, sk, admin=True) for ak, sk in config.access_keys.items()]
        return AccessControl.load(config.acl_file, extra)
    if config.access_keys:
        return AccessControl.from_keys(config.access_keys)
    return None


def _access_checked(acl: AccessControl, handler: Handler) -> Handler:
    """Run ``handler`` only for a request the ACL lets through; else NO_PERMISSION."""

    def run(request: RemotingCommand, connection: Connection) -> object:
        remark = acl.check_remoting(request, connection.remote_address)
        if remark is not None:
            return request.make_response(ResponseCode.NO_PERMISSION, remark)
        return handler(request, connection)

    return run  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class Chores:
    """The housekeeping's periodic work (Broker._chores): what runs on the event loop, and the
    saves, each a table encoded on the loop that returns its write (None: nothing to save)."""

    on_loop: list[tuple[Outage, Callable[[], object]]]
    saves: list[tuple[Outage, Callable[[], Write | None]]]


def _write_all(writes: list[tuple[Outage, Write]]) -> None:
    """The saves' disk part, in turn, on a worker thread; each failure is its Outage's."""
    for outage, write in writes:
        outage.run(write)


class Broker(BrokerCore):
    def __init__(
        self,
        config: BrokerConfig | None = None,
        *,
        port: int | None = None,
        store: str | os.PathLike[str] | None = None,
        clock: Clock | None = None,
        namesrv: bool | None = None,
        limits: ServerLimits | None = None,
        seed: int | None = None,
    ) -> None:
        """``Broker(config)`` runs a broker as configured (the CLI does this). The short form for
        tests of applications, ``Broker(port=0, store=None, clock=ManualClock())``, runs an
        embedded broker: in-memory store unless ``store`` is a path, and an in-process name
        server (``namesrv_address``) the SDK can be pointed at.

        ``seed`` (or ``config.seed``) makes a run repeatable: the broker's random choices (the
        queue of a send to queue -1) come from ``random.Random(seed)``, and without a
        ``clock`` it runs on a manual clock starting at ``SEEDED_START_MS``."""
        if config is None:
            config = BrokerConfig(
                port=0 if port is None else port, data_dir=None if store is None else Path(store)
            )
            namesrv = True if namesrv is None else namesrv
        else:
            if port is not None:
                config.port = port
            if store is not None:
                config.data_dir = Path(store)
        self.config = config
        # Read first: a bad ACL file stops the broker before it listens anywhere.
        self.acl = access_control(config)
        guard = self.acl.check_remoting if self.acl is not None else None
        self.embedded_namesrv: NameServer | None = NameServer(guard=guard) if namesrv else None
        self.seed = seed if seed is not None else config.seed
        if clock is None and self.seed is not None:
            clock = ManualClock(SEEDED_START_MS)
        self.clock = clock or SystemClock()
        self.clock_ms: Callable[[], int] = self.clock.now_ms
        self.scheduler = Scheduler(self.clock)
        self.remoting_lite = RemotingLite()  # remoting lite consumers' subscriptions
        self.server = RemotingServer(
            self._handlers(), name="broker", limits=limits, on_disconnect=self._disconnected
        )
        self.holds = PullHoldService(holds_max=self.config.long_poll_holds_max)
        self.stats = BrokerStats(now_ms=self.clock_ms, cluster=config.cluster_name)
        self.clients = ClientRegistry(notify=self._notify_consumer_ids_changed, stats=self.stats)
        self.locks = LockManager(expiry_ms=self.config.lock_expiry_ms)
        # Faults a test plans (broker.faults); they outlive a crash and its recovery.
        self.faults = FaultPlan(
            now_ms=self.clock_ms, scheduler=self.scheduler, clients=self.clients
        )
        if config.data_dir is not None:
            self.faults.crash_hook = self.crash_and_recover
        self._namesrv_started = False
        self._tasks: list[asyncio.Task[None]] = []
        self._register_now = asyncio.Event()
        # One connection per name server, for registrations and, at close, the unregistration:
        # a name server drops a broker whose registering connection closes, so closing it
        # first would leave the unregistration nothing to remove.
        self._namesrv_connections: dict[str, OutboundConnection] = {}
        self.grpc: LazyGrpcFront | None = None
        self.http: LazyHttpFront | None = None  # the HTTP front (http_port), once listening
        self._registered = asyncio.Event()  # registered with the name servers once
        self.vip_port: int | None = None  # the VIP channel's port, once listening
        self._tls_files: tuple[Path, Path] | None = None  # certificate, key (tls_files)
        self._saving: asyncio.Future[None] | None = None  # the housekeeping's writes, if any
        self._started = False

    # -- life cycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        # A start that fails partway (a damaged store, a taken gRPC port, a full disk) gives
        # back what it took, newest first: otherwise its ports stay bound and its store open,
        # and the same process can neither retry nor exit cleanly.
        async with contextlib.AsyncExitStack() as undo:
            await self._start(undo)
            undo.pop_all()  # started: from here on _stop releases it all

    async def _start(self, undo: contextlib.AsyncExitStack) -> None:
        config = self.config
        if self.embedded_namesrv is not None and not self._namesrv_started:
            namesrv_port = await self.embedded_namesrv.start(config.host, 0, self._remoting_ssl())
            undo.push_async_callback(self._close_embedded_namesrv)
            config.namesrv_addrs = [f"{config.host}:{namesrv_port}"]
            self._namesrv_started = True  # it outlives a crash_and_recover
        asked_port = config.port
        config.port = await self.server.start(config.host, config.port, self._remoting_ssl())
        undo.push_async_callback(self.server.close)
        if config.vip_channel:
            await self._listen_vip(0 if asked_port == 0 else config.port - 2)
        host = store_host(config)
        self._store_host_address, self._store_host_port = host.address, host.port
        store_config = msgspec.structs.replace(config.store, store_host=host)
        config_dir = None
        if config.data_dir is None:
            self.store = MessageStore.in_memory(config=store_config, clock_ms=self.clock_ms)
        else:
            self.store = MessageStore.open(
                config.data_dir, config=store_config, clock_ms=self.clock_ms
            )
            config_dir = Path(config.data_dir) / "config"
        undo.callback(self.store.close)
        report = self.store.recovery_report
        # Damage is quarantined and a torn tail cut: an operator should see either.
        level = logging.WARNING if report.damaged or report.torn_tail else logging.INFO
        log.log(level, "%s: %s", config.broker_name, report.summary())
        if (
            isinstance(self.clock, ManualClock)
            and self.store.last_store_timestamp > self.clock.now_ms()
        ):
            # A manual clock never goes back behind what the store already holds.
            self.clock.set(self.store.last_store_timestamp)
        self.topics = TopicManager(
            config_dir / "topics.json" if config_dir else None,
            default_queue_nums=config.default_topic_queue_nums,
            auto_create=config.auto_create_topic,
            on_change=self.schedule_registration,
        )
        self.offsets = OffsetManager(config_dir / "consumerOffset.json" if config_dir else None)
        self.groups = GroupManager(
            config_dir / "subscriptionGroup.json" if config_dir else None,
            auto_create=config.auto_create_subscription_group,
        )
        self.flush = FlushService(
            self.store,
            sync=config.flush == "sync",
            interval_ms=config.flush_interval_ms,
            metadata_interval_ms=config.flush_all_interval_ms,
            timeout_ms=config.sync_flush_timeout_ms,
        )
        self.flush.start()
        undo.push_async_callback(self.flush.close)
        undo.push_async_callback(self.scheduler.close)  # the services below plan on it
        # The services, each given what it uses: none holds the broker.
        self.writer = MessageWriter(self.store, now_ms=self.clock_ms, arrived=self.holds.notify)
        scheduler, now_ms, put = self.scheduler, self.clock_ms, self.writer.put_internal
        self.schedule = ScheduleService(
            self.store,
            scheduler=scheduler,
            now_ms=now_ms,
            put=put,
            path=config_dir / "delayOffset.json" if config_dir else None,
        )
        self.timer = TimerService(
            self.store,
            scheduler=scheduler,
            now_ms=now_ms,
            put=put,
            path=config_dir / "timerCheck.json" if config_dir else None,
            max_delay_ms=config.timer_max_delay_ms,
        )
        self.transactions = TransactionService(
            self.store,
            scheduler=scheduler,
            now_ms=now_ms,
            put=put,
            topics=self.topics,
            offset_msg_id=self.offset_msg_id,
            timeout_ms=config.transaction_timeout_ms,
            check_interval_ms=config.transaction_check_interval_ms,
            check_max=config.transaction_check_max,
            faults=self.faults,
        )
        self.transactions.check_sources.append(
            RemotingCheckSource(
                self.clients, self.offset_msg_id, config.broker_name, self.store.config.limits
            )
        )
        self.writer.attach(self.schedule, self.timer, self.transactions)
        self.retry = RetryService(
            self.store,
            topics=self.topics,
            groups=self.groups,
            put=self.writer.put_internal,
            put_logged=self.writer.put_logged,
        )
        self.send = SendService(
            self.store,
            topics=self.topics,
            writer=self.writer,
            retry=self.retry,
            config=config,
            stats=self.stats,
            faults=self.faults,
            rng=random.Random(self.seed) if self.seed is not None else None,
        )
        # request-reply: the cluster's <cluster>_REPLY_TOPIC exists from the start, as in RocketMQ
        self.reply = ReplyService(
            cluster=config.cluster_name, topics=self.topics, clients=self.clients
        )
        self.reply.ensure_topic()
        self.pop = PopService(
            store=self.store,
            scheduler=scheduler,
            now_ms=now_ms,
            put=put,
            arrived=self.holds.notify,
            topics=self.topics,
            groups=self.groups,
            offsets=self.offsets,
            retry=self.retry,
            cluster_name=config.cluster_name,
            broker_name=config.broker_name,
            in_flight_max=config.pop_in_flight_max,
            stats=self.stats,
        )
        self.progress = ProgressService(
            store=self.store,
            topics=self.topics,
            offsets=self.offsets,
            groups=self.groups,
            clients=self.clients,
            pop=self.pop,
            stats=self.stats,
        )
        self.group_admin = GroupAdmin(
            store=self.store,
            topics=self.topics,
            groups=self.groups,
            offsets=self.offsets,
            clients=self.clients,
            clock_ms=self.clock_ms,
        )
        self.pulls = PullService(
            topics=self.topics,
            groups=self.groups,
            clients=self.clients,
            property_filter=config.property_filter,
        )
        self.queries = MessageQueries(
            self.store,
            topics=self.topics,
            retry=self.retry,
            put=self.writer.put_internal,
            offset_msg_id=self.offset_msg_id,
        )
        self.schedule.start()
        self.timer.start()
        self.pop.start()
        self.lite_expiry = LiteExpiry(
            self.topics, self.groups, self.pop, self.clock_ms, started_ms=self.clock_ms()
        )
        self.transactions.start()
        if config.grpc_port is not None:
            await self._start_grpc()
            undo.push_async_callback(self._close_grpc)
        if config.http_port is not None:
            await self._start_http()
            undo.push_async_callback(self._close_http)
        self.retention = RetentionService(
            self.store,
            RetentionPolicy(
                file_reserved_time_ms=int(config.file_reserved_time_h * 3_600_000),
                delete_when=config.delete_when,
                disk_max_used_space_ratio=config.disk_max_used_space_ratio,
                disk_space_clean_forcibly_ratio=config.disk_space_clean_forcibly_ratio,
                disk_space_warning_level_ratio=config.disk_space_warning_level_ratio,
                delete_file_batch_max=config.delete_file_batch_max,
                clean_file_forcibly=config.clean_file_forcibly,
            ),
            self.clock_ms,
            self.send.disk.probe,
            readers=broker_readers(self.offsets, self.schedule, self.timer),
            guard=self.send.disk,  # one guard: one WARNING, one refusal for every front
        )
        self.scheduler.after_advance = self._after_advance
        self.scheduler.start()
        undo.push_async_callback(self._cancel_tasks)
        self._tasks.append(asyncio.create_task(self._housekeeping(), name="broker-housekeeping"))
        self._tasks.append(asyncio.create_task(self._clean_loop(), name="broker-retention"))
        self._tasks.append(asyncio.create_task(self.stats.run(), name="broker-stats"))
        if config.namesrv_addrs:
            registered = self._registered
            self._tasks.append(
                asyncio.create_task(self._register_loop(registered), name="broker-register")
            )
            # Ready means routable: wait (briefly) for the first round of registrations.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(registered.wait(), 5.0)
        self._started = True
        self._say_who_may_connect()
        log.info(
            "broker %s ready on %s (flush %s)", config.broker_name, config.address, config.flush
        )

    def _say_who_may_connect(self) -> None:
        """Say at start who may connect: the ACL's accounts, or that the broker is open."""
        config = self.config
        loopback = config.host in ("127.0.0.1", "::1", "localhost")
        if self.acl is not None:
            log.info(
                "ACL on (%s): the remoting port %s, the gRPC front and the embedded name "
                "server take only signed requests of these accounts",
                self.acl.summary(),
                config.address,
            )
            if self.acl.an_admin is None and config.namesrv_addrs:
                log.warning(
                    "the ACL has no admin account: registrations with the name servers go "
                    "unsigned and a name server with ACL refuses them"
                )
        elif not loopback:
            log.warning(
                "no access control, listening on %s: anyone who can reach it may send, consume "
                "and administer this broker",
                config.address,
            )
        else:
            log.info("no access control: open to every client on this machine (%s)", config.address)

    async def close(self) -> None:
        await self._stop(crashed=False)

    async def crash_and_recover(self) -> None:
        """Stop as a killed process would (connections cut, no final flush, no offsets or
        progress saved, the store's ``abort`` left and no clean-stop record) and start again
        from the same data folder on the same ports: the store's recovery runs for real
        (``store.recovery_report``). Under sync flush every acknowledged message survives."""
        if self.config.data_dir is None:
            raise RuntimeError("an in-memory broker has no files to recover: crash needs a store")
        if not self._started:
            raise RuntimeError("the broker is not running")
        log.warning("broker %s crashes (a planned fault)", self.config.broker_name)
        await self._stop(crashed=True)
        # What start() makes anew; the clock, the faults and the name server carry over.
        self.scheduler = Scheduler(self.clock)
        self.faults.scheduler = self.scheduler
        self._tasks = []
        self._register_now = asyncio.Event()
        self._registered = asyncio.Event()
        self.locks = LockManager(expiry_ms=self.config.lock_expiry_ms)  # lost with the process
        await self.start()
        log.warning(
            "broker %s recovered: %s", self.config.broker_name, self.store.recovery_report.summary()
        )

    async def _close_embedded_namesrv(self) -> None:
        if self.embedded_namesrv is not None and self._namesrv_started:
            await self.embedded_namesrv.close()
            self._namesrv_started = False

    async def _close_grpc(self) -> None:
        if self.grpc is not None:
            await self.grpc.close()

    async def _close_http(self) -> None:
        if self.http is not None:
            await self.http.close()

    async def _cancel_tasks(self) -> None:
        for task in self._tasks:
            # Cancel until it is done: a cancel can be lost on Python 3.11 (asyncio.wait_for
            # in a library call returning a result that arrived at the same moment).
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
            with contextlib.suppress(asyncio.CancelledError):
                task.result()
        self._tasks = []

    async def _stop(self, *, crashed: bool) -> None:
        if not self._started:
            return
        self._started = False
        await self._close_http()
        await self._close_grpc()
        await self._cancel_tasks()
        if self._saving is not None:  # the housekeeping's writes, on their thread
            await asyncio.wait({self._saving})
            self._saving = None
        if self.config.namesrv_addrs and not crashed:
            await self._unregister()
        elif crashed:  # a killed process's connections just drop
            for connection in self._namesrv_connections.values():
                await connection.close()
            self._namesrv_connections.clear()
        await self.server.close()
        self.holds.wake_all()
        await self.scheduler.close()
        await self.flush.close()
        if crashed:
            self.topics.close()
            self.groups.close()
            self.store.crash_for_test()
            return
        for what, save in (
            ("delay-level progress", self.schedule.persist),
            ("the timer's progress", self.timer.persist),
            ("consumer offsets", lambda: self.offsets.persist(force=True)),
            ("the topic table", self.topics.persist),
            ("the subscription group table", self.groups.persist),
        ):
            try:
                save()
            except OSError as error:  # a full disk at the stop: the store still closes
                log.warning("could not save %s at the stop: %s", what, error)
        self.topics.close()
        self.groups.close()
        self.store.close()
        if self.embedded_namesrv is not None:
            await self.embedded_namesrv.close()

    async def _listen_vip(self, port: int) -> None:
        """The VIP channel (``vip_channel``); a port out of range or taken is logged, not fatal:
        only clients that insist on it miss it."""
        if not 0 <= port <= 65535:
            log.warning("VIP channel off: port %d is not a port", port)
            return
        try:
            self.vip_port = await self.server.listen_also(self.config.host, port)
        except OSError as error:
            log.warning("VIP channel off: cannot listen on port %d: %s", port, error)
        else:
            log.info("VIP channel on %s:%d", self.config.host, self.vip_port)

    def tls_files(self) -> tuple[Path, Path]:
        """The certificate and key this broker serves over TLS: given, or self-signed in the
        data folder (a temporary one for an in-memory store)."""
        if self._tls_files is None:
            self._tls_files = tls_files(self.config)
        return self._tls_files

    def _remoting_ssl(self) -> ssl.SSLContext | None:
        return server_context(*self.tls_files()) if self.config.remoting_tls else None

    def _grpc_tls(self) -> GrpcTls:
        from pocketmq.broker.grpc.lazy import GrpcTls

        mode = self.config.grpc_tls
        if mode == "off":
            return GrpcTls("off")
        try:
            return GrpcTls(mode, *self.tls_files())
        except ImportError:  # an install of the grpc extra from before it needed cryptography
            if mode == "enforcing":
                raise
            log.warning("gRPC TLS off: no certificate given and cryptography not installed")
            return GrpcTls("off")

    async def _start_grpc(self) -> None:
        from pocketmq.broker.grpc.lazy import LazyGrpcFront

        config = self.config
        assert config.grpc_port is not None
        tls = self._grpc_tls()
        # In the default (permissive) TLS mode grpc loads at the port's first connection.
        self.grpc = LazyGrpcFront(
            config.host,
            config.grpc_port,
            config.advertised_host or config.host,
            tls,
            lambda: self._grpc_frontend(tls),
        )
        config.grpc_port = await self.grpc.start()

    def _grpc_frontend(self, tls: GrpcTls) -> GrpcFrontend:
        from pocketmq.broker.grpc.server import GrpcFrontend, GrpcSettings

        config = self.config
        assert config.grpc_port is not None
        return GrpcFrontend(
            self,
            GrpcSettings(
                host=config.host,
                port=config.grpc_port,
                advertised_host=config.advertised_host or config.host,
                auto_create_topics=config.grpc_auto_create_topics,
                acl=self.acl,
            ),
            tls,
        )

    async def _start_http(self) -> None:
        from pocketmq.broker.http.lazy import LazyHttpFront

        config = self.config
        assert config.http_port is not None
        # The port is taken now; aiohttp and the routes load at its first connection.
        self.http = LazyHttpFront(
            config.host, config.http_port, config.advertised_host or config.host, self._http_front
        )
        try:
            config.http_port = await self.http.start()
        except OSError as error:
            # As the VIP channel: clients are served without it; the log says why it is off.
            log.warning("HTTP front off: %s", error)
            self.http = None

    def _http_front(self) -> HttpFront:
        from pocketmq.broker.http.health import FrontPorts
        from pocketmq.broker.http.server import HttpFront, HttpSettings

        config = self.config
        assert config.http_port is not None
        return HttpFront(
            self,
            HttpSettings(
                host=config.host,
                port=config.http_port,
                acl=self.acl,
                advertised_host=config.advertised_host or config.host,
            ),
            FrontPorts(
                ports=lambda: {
                    "remoting": config.port,
                    "vip_channel": self.vip_port,
                    "grpc": config.grpc_port if self.grpc is not None else None,
                },
                registered=lambda: not config.namesrv_addrs or self._registered.is_set(),
                stopping=lambda: not self._started,
            ),
            self._describe,
        )

    def _describe(self) -> dict[str, object]:
        """Who this broker is and where it listens (the HTTP front's /api/broker)."""
        config = self.config
        return {
            "broker_name": config.broker_name,
            "cluster_name": config.cluster_name,
            "broker_id": config.broker_id,
            "address": config.address,
            "vip_address": f"{config.host}:{self.vip_port}" if self.vip_port else None,
            "grpc_address": self.grpc_address,
            "http_address": self.http_address,
            "namesrv_addrs": list(config.namesrv_addrs),
            "flush": config.flush,
            "data_dir": str(config.data_dir) if config.data_dir is not None else None,
        }

    @property
    def http_address(self) -> str | None:
        """Where the HTTP front (health, metrics, admin API) listens, when it runs."""
        return self.http.address if self.http is not None else None

    @property
    def grpc_address(self) -> str | None:
        """Where the official 5.x SDKs connect (``endpoints``), when the gRPC front-end runs."""
        return self.grpc.address if self.grpc is not None else None

    @property
    def namesrv_address(self) -> str | None:
        """The first name server this broker registers with (the embedded one, if any)."""
        return self.config.namesrv_addrs[0] if self.config.namesrv_addrs else None

    async def advance(self, duration: str | int) -> int:
        """Manual clock: move time forward (``"2h"``, ``"90s"`` or milliseconds), running
        everything that falls due; returns how many scheduled items ran."""
        duration_ms = duration if isinstance(duration, int) else parse_duration_ms(duration)
        return await self.scheduler.advance(duration_ms)

    def schedule_registration(self) -> None:
        self._register_now.set()

    # -- handlers ----------------------------------------------------------------------------

    def _handlers(self) -> dict[int, Handler]:
        table: dict[int, Callable[..., object]] = {
            RequestCode.SEND_MESSAGE: send.handle_send,
            RequestCode.SEND_MESSAGE_V2: send.handle_send,
            RequestCode.SEND_BATCH_MESSAGE: send.handle_send,
            RequestCode.SEND_REPLY_MESSAGE: handle_reply,
            RequestCode.SEND_REPLY_MESSAGE_V2: handle_reply,
            RequestCode.PULL_MESSAGE: pull.handle_pull,
            RequestCode.LITE_PULL_MESSAGE: pull.handle_pull,
            RequestCode.HEART_BEAT: clients.handle_heartbeat,
            RequestCode.CHECK_CLIENT_CONFIG: handle_check_client_config,
            RequestCode.UNREGISTER_CLIENT: clients.handle_unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: clients.handle_get_consumer_list,
            RequestCode.QUERY_CONSUMER_OFFSET: clients.handle_query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: clients.handle_update_consumer_offset,
            RequestCode.LOCK_BATCH_MQ: clients.handle_lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: clients.handle_unlock_batch,
            RequestCode.GET_MAX_OFFSET: admin.handle_get_max_offset,
            RequestCode.GET_MIN_OFFSET: admin.handle_get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: admin.handle_search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: admin.handle_get_earliest_store_time,
            RequestCode.VIEW_MESSAGE_BY_ID: admin.handle_view_message,
            RequestCode.QUERY_MESSAGE: admin.handle_query_message,
            RequestCode.UPDATE_AND_CREATE_TOPIC: admin.handle_create_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: admin.handle_get_all_topic_config,
            RequestCode.DELETE_TOPIC_IN_BROKER: admin.handle_delete_topic,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: admin.handle_create_group,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: admin.handle_get_all_group_config,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: admin_control.handle_delete_group,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: admin_control.handle_reset_offset,
            RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: (
                admin_control.handle_get_consumer_status
            ),
            RequestCode.GET_CONSUMER_RUNNING_INFO: admin_control.handle_get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: admin_control.handle_consume_message_directly,
            RequestCode.DELETE_EXPIRED_COMMITLOG: admin_control.handle_delete_expired_commitlog,
            RequestCode.CONSUMER_SEND_MSG_BACK: retry.handle_consumer_send_back,
            RequestCode.POCKETMQ_CLOCK: admin.handle_clock,
            RequestCode.GET_BROKER_CONFIG: handle_get_broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: handle_update_broker_config,
            RequestCode.END_TRANSACTION: transaction.handle_end_transaction,
            RequestCode.POCKETMQ_TX: transaction.handle_tx_admin,
            RequestCode.POP_MESSAGE: pop.handle_pop,
            RequestCode.ACK_MESSAGE: pop.handle_ack,
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME: pop.handle_change_invisible,
            RequestCode.PEEK_MESSAGE: pop.handle_peek,
            RequestCode.NOTIFICATION: pop.handle_notification,
            RequestCode.BATCH_ACK_MESSAGE: pop.handle_batch_ack,
            RequestCode.POP_LITE_MESSAGE: self.remoting_lite.handle_pop_lite,
            RequestCode.LITE_SUBSCRIPTION_CTL: self.remoting_lite.handle_subscription_ctl,
            RequestCode.RECALL_MESSAGE: recall.handle_recall,
            RequestCode.POCKETMQ_MESSAGE_INFO: inspect.handle_message_info,
            RequestCode.POCKETMQ_DLQ: inspect.handle_dlq,
            # traffic, progress and clients (read only)
            RequestCode.GET_CONSUME_STATS: admin_stats.handle_get_consume_stats,
            RequestCode.GET_TOPIC_STATS_INFO: admin_stats.handle_get_topic_stats_info,
            RequestCode.GET_BROKER_RUNTIME_INFO: admin_stats.handle_get_broker_runtime_info,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: admin_stats.handle_get_consumer_connection_list,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: admin_stats.handle_get_producer_connection_list,
            RequestCode.GET_ALL_PRODUCER_INFO: admin_stats.handle_get_all_producer_info,
            RequestCode.GET_ALL_CONSUMER_OFFSET: admin_stats.handle_get_all_consumer_offset,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: admin_stats.handle_query_topic_consume_by_who,
            RequestCode.QUERY_TOPICS_BY_CONSUMER: admin_stats.handle_query_topics_by_consumer,
            RequestCode.GET_BROKER_CONSUME_STATS: admin_stats.handle_get_broker_consume_stats,
            RequestCode.VIEW_BROKER_STATS_DATA: admin_stats.handle_view_broker_stats_data,
            RequestCode.GET_TOPIC_CONFIG: admin_stats.handle_get_topic_config,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: admin_stats.handle_get_subscription_group_config,
            RequestCode.QUERY_CONSUME_TIME_SPAN: admin_stats.handle_query_consume_time_span,
        }
        handlers = {code: functools.partial(handler, self) for code, handler in table.items()}
        if self.acl is None:
            return handlers  # type: ignore[return-value]
        return {code: _access_checked(self.acl, h) for code, h in handlers.items()}  # type: ignore[arg-type]

    def _disconnected(self, connection: Connection) -> None:
        self.clients.connection_lost(connection)
        self.remoting_lite.connection_lost(connection)

    def _notify_consumer_ids_changed(self, group: str, connections: list[Channel]) -> None:
        ext = NotifyConsumerIdsChangedRequestHeader(consumer_group=group).to_ext_fields()
        for connection in connections:
            # the registry's channels are this remoting server's connections
            assert isinstance(connection, Connection)
            if not connection.closed:
                connection.send_oneway(
                    RemotingCommand(
                        code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields=dict(ext)
                    )
                )

    # -- background work ---------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        chores = self._chores()
        while True:
            await asyncio.sleep(self.config.consumer_offset_persist_s)
            await self.keep_house(chores)

    def _chores(self) -> Chores:
        """The periodic work, each part with its own Outage: a full or read-only disk that
        stops the saves says so once (not a traceback every 5 s) and stops nothing else."""
        loop = asyncio.get_running_loop()
        kept = "kept in memory and saved once the disk has room"
        again = "tried again next round"
        return Chores(
            on_loop=[
                # Deliveries the disk refused first (they log their own episodes), so the
                # progress saved next includes them.
                (
                    Outage("retrying refused delay-level deliveries", again),
                    self.schedule.retry_refused,
                ),
                (Outage("retrying refused timer deliveries", again), self.timer.retry_refused),
                (Outage("saving groups created on the fly", again), self.groups.save_unsaved),
                (
                    Outage("expiring idle clients", again),
                    lambda: self.clients.expire(loop.time() - self.config.client_channel_expiry_s),
                ),
            ],
            saves=[
                (Outage("saving consumer offsets", kept), self.offsets.save_later),
                (Outage("saving delay-level progress", kept), self.schedule.save_later),
                (Outage("saving the timer's progress", kept), self.timer.save_later),
            ],
        )

    async def keep_house(self, chores: Chores) -> None:
        """One round of the periodic work; what failed is tried again next round (consumer
        offsets not saved stay dirty). The saves' tables are encoded here, on the loop where
        they change, and written on a worker thread: each is an fsync (and a directory's),
        milliseconds to hundreds of them on a busy disk, which on the loop held up every
        client's answer."""
        for outage, work in chores.on_loop:
            outage.run(work)
        writes: list[tuple[Outage, Write]] = []
        for outage, save_later in chores.saves:
            try:
                write = save_later()
            except Exception as error:
                outage.failed(error)
                continue
            if write is None:
                outage.worked()
            else:
                writes.append((outage, write))
        if writes:
            self._saving = asyncio.ensure_future(asyncio.to_thread(_write_all, writes))
            # A stop cancels this task, not the thread: _stop waits for _saving before it
            # saves the same files itself.
            await asyncio.shield(self._saving)

    async def _clean_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.clean_resource_interval_s)
            self._expire_lite_topics()
            try:
                self.retention.run()
            except Exception:
                log.exception("retention pass failed")

    def _after_advance(self) -> None:
        """Clock-driven work that is not scheduled at a time, after a manual advance."""
        self._expire_lite_topics()
        self.retention.run()

    def _expire_lite_topics(self) -> None:
        try:
            self.lite_expiry.run_if_due()  # every liteTtlCheckInterval, as RocketMQ checks
        except Exception:
            log.exception("lite topic expiry failed")

    async def _register_loop(self, registered: asyncio.Event) -> None:
        """Register with every name server now and then every ``register_interval_s`` (or at
        once on a change), until cancelled. The connections stay open: ``close`` unregisters
        over them, then closes them."""
        connections = self._namesrv_connections
        for address in self.config.namesrv_addrs:
            connections.setdefault(address, OutboundConnection(address))
        whole = True  # the first round and the periodic ones send the whole table
        while True:
            self._register_now.clear()  # changes from now on trigger another round
            # A change sends only the changed topics (RocketMQ's registerIncrementBrokerData):
            # the whole table for each of 10,000 topics created one by one was quadratic.
            changes = self.topics.take_changes()
            increment = None if whole else changes
            whole = False
            for address, connection in connections.items():
                try:
                    await self._register(connection, increment)
                except (OSError, TimeoutError, ConnectionError) as error:
                    log.warning("registration with name server %s failed: %s", address, error)
                    whole = True  # it missed this round's changes
            registered.set()
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancel of
            # close() when the event is set at the same moment, and close() then hangs.
            try:
                async with asyncio.timeout(self.config.register_interval_s):
                    await self._register_now.wait()
            except TimeoutError:
                whole = True

    def _registration_header(self) -> RegisterBrokerRequestHeader:
        config = self.config
        host = config.advertised_host or config.host
        return RegisterBrokerRequestHeader(
            broker_name=config.broker_name,
            broker_addr=config.address,
            cluster_name=config.cluster_name,
            ha_server_addr=f"{host}:{config.port + 1}",
            broker_id=config.broker_id,
            heartbeat_timeout_millis=int(self.config.register_interval_s * 4 * 1000),
            compressed=False,
        )

    async def _register(
        self, connection: OutboundConnection, topics: dict[str, TopicConfig] | None = None
    ) -> None:
        """Register with the whole topic table, or with only ``topics`` (an increment).

        Lite topics' LMQs are left out, as RocketMQ leaves them out (they have no topic
        config there): a client routes to the LITE parent, and a broker with thousands of
        lite topics does not make every route lookup carry them."""
        table = self.topics.topics if topics is None else topics
        wrapper = TopicConfigSerializeWrapper(
            topic_config_table={name: config for name, config in table.items() if not is_lmq(name)},
            data_version=self.topics.data_version,
        )
        body = encode_json_body(RegisterBrokerBody(topic_config_serialize_wrapper=wrapper))
        request = self._signed(
            RemotingCommand(
                code=RequestCode.REGISTER_BROKER,
                ext_fields=self._registration_header().to_ext_fields(),
                body=body,
            )
        )
        response = await connection.request(request)
        if response.code != ResponseCode.SUCCESS:
            log.warning("name server refused registration: %s %s", response.code, response.remark)

    def _signed(self, request: RemotingCommand) -> RemotingCommand:
        """Sign a request to a name server with an admin account of the ACL (a name server
        with ACL takes (un)registrations from admin accounts only)."""
        admin = self.acl.an_admin if self.acl is not None else None
        if admin is not None:
            request.ext_fields = sign_fields(
                request.ext_fields, request.body, admin.access_key, admin.secret_key
            )
        return request

    async def _unregister(self) -> None:
        config = self.config
        header = UnregisterBrokerRequestHeader(
            broker_name=config.broker_name,
            broker_addr=config.address,
            cluster_name=config.cluster_name,
            broker_id=config.broker_id,
        )
        for address in config.namesrv_addrs:
            # The connection that registered (RocketMQ's BrokerController.shutdown also
            # unregisters before its outer API's channels close); a new one if there is none.
            connection = self._namesrv_connections.pop(address, None) or OutboundConnection(address)
            try:
                async with asyncio.timeout(1.0):
                    await connection.request(
                        self._signed(
                            RemotingCommand(
                                code=RequestCode.UNREGISTER_BROKER,
                                ext_fields=header.to_ext_fields(),
                            )
                        )
                    )
            except (OSError, TimeoutError, ConnectionError) as error:
                log.info("unregister from %s failed: %s", address, error)
            finally:
                await connection.close()
