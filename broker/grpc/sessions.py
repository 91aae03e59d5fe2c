"""The gRPC clients a broker knows: their settings, their Telemetry stream, and the messages a
push consumer holds whose invisible time the broker keeps renewing.

A client is named by its ``x-mq-client-id``. Its settings arrive over Telemetry; the broker
answers with them merged with its own policy (GrpcClientSettingsManager): the body size limit
and the producer back-off, or the consumer's long-polling timeout, FIFO flag and retry
back-off. Producers are registered under each topic they publish to, the producer group
RocketMQ's proxy gives gRPC producers, so that transaction checks can find them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2
from pocketmq.broker.services.lite import (
    LITE_SUBSCRIPTION_QUOTA,
    LITE_TOPIC_SIZE_MAX,
    LiteSubscriptions,
)
from pocketmq.broker.services.pop import PopError
from pocketmq.store.durations import DEFAULT_DELAY_LEVELS, parse_delay_levels

__all__ = ["ClientSession", "Renewal", "SessionRegistry", "retry_delays_ms"]

log = logging.getLogger("pocketmq.grpc")

ClientType = definition_pb2.ClientType

# The proxy's defaults (ProxyConfig, GrpcClientSettingsManager).
LONG_POLLING_TIMEOUT_MS = 20_000  # grpcClientConsumerMaxLongPollingTimeoutMillis
RECEIVE_BATCH_SIZE = 32  # grpcClientConsumerLongPollingBatchSize
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1000
PRODUCER_BACKOFF_MULTIPLIER = 2.0
DEFAULT_INVISIBLE_MS = 60_000  # defaultInvisibleTimeMills, for auto-renewed receives
RENEW_AHEAD_MS = 10_000  # renewAheadTimeMillis
RENEW_MAX_MS = 3 * 3_600_000  # renewMaxTimeMillis
SESSION_EXPIRY_S = 120.0  # a client silent this long (no heartbeat, no stream) is dropped
TELEMETRY_QUEUE_MAX = 1024  # server commands waiting for one slow client

_LITE_CONSUMERS = (ClientType.LITE_PUSH_CONSUMER, ClientType.LITE_SIMPLE_CONSUMER)

# A consumer group's retry delays (CustomizedRetryPolicy): attempt n waits delays[n-1],
# beyond the list the last one. RocketMQ's default delay levels, whatever the broker's are.
_RETRY_DELAYS_MS = tuple(parse_delay_levels(DEFAULT_DELAY_LEVELS))


def retry_delays_ms() -> list[int]:
    return list(_RETRY_DELAYS_MS)


@dataclass(slots=True)
class ClientSession:
    client_id: str
    client_type: int = ClientType.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    topics: set[str] = field(default_factory=set)
    settings: object | None = None
    # Server -> client Telemetry commands (transaction checks); None while no stream is open.
    outbox: asyncio.Queue[object] | None = None
    last_seen: float = 0.0

    @property
    def is_producer(self) -> bool:
        return self.client_type == ClientType.PRODUCER


@dataclass(slots=True)
class Renewal:
    """A message an auto-renewing receive handed out, still held by its push consumer."""

    client_id: str
    group: str
    topic: str
    message_id: str
    handle: str  # the current receipt handle (the client still holds the first one)
    first_pop_ms: int
    attempt: int  # delivery attempt, for the back-off when the client goes away


@dataclass
class SessionRegistry:
    broker: BrokerCore
    sessions: dict[str, ClientSession] = field(default_factory=dict)
    renewals: dict[tuple[str, str, str], Renewal] = field(default_factory=dict)
    lite: LiteSubscriptions = field(default_factory=LiteSubscriptions)

    def touch(self, client_id: str) -> ClientSession:
        session = self.sessions.get(client_id)
        if session is None:
            session = self.sessions[client_id] = ClientSession(client_id)
            self.broker.stats.connection_opened("grpc")  # a gRPC client is its session
        session.last_seen = asyncio.get_running_loop().time()
        return session

    # -- settings -------------------------------------------------------------------------

    def apply_settings(self, session: ClientSession, settings: object) -> object:
        """Remember a client's settings and return the reply (settings merged with policy)."""
        session.client_type = settings.client_type  # type: ignore[attr-defined]
        reply = definition_pb2.Settings()
        reply.CopyFrom(settings)  # type: ignore[arg-type]
        reply.metric.Clear()
        reply.metric.on = False  # no OpenTelemetry exporter pointed at the broker
        kind = settings.WhichOneof("pub_sub")  # type: ignore[attr-defined]
        if kind == "publishing":
            session.topics = {t.name for t in settings.publishing.topics}  # type: ignore[attr-defined]
            reply.publishing.max_body_size = self.broker.store.config.limits.body_size_max
            reply.publishing.validate_message_type = True
            policy = reply.backoff_policy
            policy.Clear()
            policy.max_attempts = PRODUCER_MAX_ATTEMPTS
            policy.exponential_backoff.initial.FromMilliseconds(PRODUCER_BACKOFF_INITIAL_MS)
            policy.exponential_backoff.max.FromMilliseconds(PRODUCER_BACKOFF_MAX_MS)
            policy.exponential_backoff.multiplier = PRODUCER_BACKOFF_MULTIPLIER
        elif kind == "subscription":
            subscription = settings.subscription  # type: ignore[attr-defined]
            session.group = subscription.group.name
            session.topics = {entry.topic.name for entry in subscription.subscriptions}
            group = self.broker.groups.find_or_create(session.group) if session.group else None
            retry_max_times = group.retry_max_times if group is not None else 16
            # Lite consumers always take a lite topic's messages one after another (the
            # broker pops them in order), so their client must consume them that way too.
            reply.subscription.fifo = session.client_type in _LITE_CONSUMERS or bool(
                getattr(group, "consume_message_orderly", False)
            )
            reply.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
            # Lite consumers check a lite topic against these before asking the broker (left
            # at 0, every subscribe_lite fails on the client: "max length 0").
            reply.subscription.lite_subscription_quota = LITE_SUBSCRIPTION_QUOTA
            reply.subscription.max_lite_topic_size = LITE_TOPIC_SIZE_MAX
            requested = (
                subscription.long_polling_timeout.ToMilliseconds()
                if subscription.HasField("long_polling_timeout")
                else LONG_POLLING_TIMEOUT_MS
            )
            reply.subscription.long_polling_timeout.FromMilliseconds(
                min(max(requested, 5_000), LONG_POLLING_TIMEOUT_MS)
            )
            policy = reply.backoff_policy
            policy.Clear()
            policy.max_attempts = retry_max_times + 1
            for delay in retry_delays_ms():
                policy.customized_backoff.next.add().FromMilliseconds(delay)
        return reply

    def producers_of(self, topic: str) -> list[ClientSession]:
        return [
            s
            for s in self.sessions.values()
            if s.is_producer and topic in s.topics and s.outbox is not None
        ]

    def send_command(self, session: ClientSession, command: object) -> bool:
        if session.outbox is None:
            return False
        try:
            session.outbox.put_nowait(command)
        except asyncio.QueueFull:
            log.warning(
                "client %s reads its telemetry too slowly; command dropped", session.client_id
            )
            return False
        return True

    # -- auto-renewed receipt handles ----------------------------------------------------------

    def current_handle(self, client_id: str, group: str, message_id: str, handle: str) -> str:
        """The handle to act on: a renewed message's latest, else the one the client sent."""
        renewal = self.renewals.get((client_id, group, message_id))
        return renewal.handle if renewal is not None else handle

    def forget(self, client_id: str, group: str, message_id: str) -> None:
        self.renewals.pop((client_id, group, message_id), None)

    def hold(self, renewal: Renewal, deadline_ms: int) -> None:
        key = (renewal.client_id, renewal.group, renewal.message_id)
        self.renewals[key] = renewal
        self._arm(renewal, deadline_ms)

    def _arm(self, renewal: Renewal, deadline_ms: int) -> None:
        key = (renewal.client_id, renewal.group, renewal.message_id)
        handle = renewal.handle
        self.broker.scheduler.at(
            deadline_ms - RENEW_AHEAD_MS,
            lambda: self._renew(key, handle),
            alive=lambda: (r := self.renewals.get(key)) is not None and r.handle == handle,
        )

    def _renew(self, key: tuple[str, str, str], handle: str) -> None:
        renewal = self.renewals.get(key)
        if renewal is None or renewal.handle != handle:
            return
        now = self.broker.now_ms()
        if now - renewal.first_pop_ms >= RENEW_MAX_MS:
            self.renewals.pop(key, None)  # held too long: let it become visible again
            return
        try:
            new = self.broker.pop.change_invisible(
                renewal.group, renewal.topic, renewal.handle, DEFAULT_INVISIBLE_MS
            )
        except PopError as error:
            log.info("renewing %s for %s failed: %s", renewal.message_id, renewal.client_id, error)
            self.renewals.pop(key, None)
            return
        renewal.handle = str(new)
        self._arm(renewal, now + DEFAULT_INVISIBLE_MS)

    # -- departure ----------------------------------------------------------------------------

    def drop(self, client_id: str) -> None:
        """A client said goodbye or went silent: its held messages come back after their
        retry back-off, as the proxy's clearGroup does."""
        if self.sessions.pop(client_id, None) is not None:
            self.broker.stats.connection_closed("grpc")
        self.lite.drop_client(client_id)
        delays = retry_delays_ms()
        for key in [k for k in self.renewals if k[0] == client_id]:
            renewal = self.renewals.pop(key)
            delay = delays[min(max(renewal.attempt, 1), len(delays)) - 1]
            with contextlib.suppress(PopError):  # acknowledged or expired meanwhile
                self.broker.pop.change_invisible(
                    renewal.group, renewal.topic, renewal.handle, delay
                )

    def expire(self, now: float) -> None:
        for session in list(self.sessions.values()):
            if session.outbox is None and now - session.last_seen > SESSION_EXPIRY_S:
                log.info(
                    "gRPC client %s silent for %.0f s: dropped",
                    session.client_id,
                    now - session.last_seen,
                )
                self.drop(session.client_id)


def settings_reply(settings: object) -> object:
    return service_pb2.TelemetryCommand(
        status=definition_pb2.Status(code=definition_pb2.Code.OK, message="OK"),
        settings=settings,
    )
