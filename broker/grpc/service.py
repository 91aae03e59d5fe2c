"""``apache.rocketmq.v2.MessagingService`` on top of the broker's own services.

Each RPC does what RocketMQ's proxy does with it, but calls the broker in-process: a send
goes through the send service (timers, transactions and all), a receive is a POP, an ack
or an invisible-time change is the POP service's, a dead-letter forward writes ``%DLQ%<group>``.
So a message sent over gRPC is consumed over remoting and the reverse.

Errors travel as the protocol expects them, in the response's ``status`` (the clients read
it and raise), never as a failed RPC; a request pocketmq cannot serve says so in the status.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.grpc.auth import (
    AuthError,
    GrpcAuth,
    PermissionDenied,
    grpc_resources,
    settings_resources,
)
from pocketmq.broker.grpc.convert import (
    PRIORITY_PROPERTY,
    GrpcStatusError,
    accepted_types,
    consistent_hash,
    to_message,
    to_put_message,
)
from pocketmq.broker.grpc.errors import STATUS_CODES, status_of
from pocketmq.broker.grpc.sessions import (
    DEFAULT_INVISIBLE_MS,
    TELEMETRY_QUEUE_MAX,
    Renewal,
    SessionRegistry,
    settings_reply,
)
from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2, service_pb2_grpc
from pocketmq.broker.services.acl import AccessControl, Account, Denied
from pocketmq.broker.services.faults import FaultKind
from pocketmq.broker.services.groups import validate_group_name
from pocketmq.broker.services.lite import (
    LITE_PROPERTY,
    LITE_RESET_EXCLUSIVE,
    LITE_RESET_UNSUBSCRIBE,
    LITE_SUBSCRIPTION_QUOTA,
    LMQ_PREFIX,
    POLICY_MIN,
    OffsetOption,
    bind_problem,
    is_exclusive,
    is_wildcard,
    lmq_name,
    resets_on,
    validate_lite_topic,
)
from pocketmq.broker.services.lite_offsets import reset_offset
from pocketmq.broker.services.pop import INVISIBLE_MS_MAX, PopError
from pocketmq.broker.services.pull import MessageFilter
from pocketmq.broker.services.recall import RecallOutcome, RecallService, build_recall_handle
from pocketmq.broker.services.sql_filter import SQL92, TAG
from pocketmq.broker.services.topics import (
    NOT_ALLOWED_SEND_TOPICS,
    PERM_READ,
    PERM_WRITE,
    is_system_topic,
    validate_topic_name,
)
from pocketmq.broker.services.transactions import COMMIT, ROLLBACK, HalfMessage
from pocketmq.store.javahash import java_string_hash
from pocketmq.store.record import Host, MessageRecord, decode_record

__all__ = ["GrpcSettings", "MessagingService"]

log = logging.getLogger("pocketmq.grpc")

pb = service_pb2
Code = definition_pb2.Code
Status = definition_pb2.Status
MessageType = definition_pb2.MessageType

INVISIBLE_MS_MIN_RECEIVE = 10_000  # minInvisibleTimeMillsForRecv
POLLING_MS_MIN = 5_000  # grpcClientConsumerMinLongPollingTimeoutMillis
POLLING_MS_MAX = 20_000  # grpcClientConsumerMaxLongPollingTimeoutMillis
RECEIVE_BATCH_MAX = 64
LITE_RECHECK_S = 1.0  # a lite receive looks again this often: subscriptions change meanwhile
# Topic message type -> the message types a send may carry (TopicMessageTypeValidator).
_SENDABLE = {
    "NORMAL": {MessageType.NORMAL},
    "FIFO": {MessageType.FIFO},
    "DELAY": {MessageType.DELAY},
    "TRANSACTION": {MessageType.TRANSACTION},
    "MIXED": {MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION},
    "PRIORITY": {MessageType.PRIORITY},
    "LITE": {MessageType.LITE},
}


# The proxy's answers for what the broker refuses; NOT_WAITING is pocketmq's (see recall.py).
_RECALL_CODES = {
    RecallOutcome.TOPIC_NOT_FOUND: Code.TOPIC_NOT_FOUND,
    RecallOutcome.BAD_HANDLE: Code.BAD_REQUEST,
    RecallOutcome.NOT_WAITING: Code.NOT_FOUND,
}


# A send a planned fault answers with a status (stored): the proxy's codes for those statuses.
_FAULT_CODES = {
    FaultKind.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    FaultKind.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
}


def _ok() -> Any:
    return Status(code=Code.OK, message="OK")


def _status(code: int, message: str) -> Any:
    return Status(code=code, message=message)


def _offset_option(request: Any) -> OffsetOption | None:
    """The request's OffsetOption (one of policy, offset, tail_n, timestamp), if it has one."""
    if not request.HasField("offset_option"):
        return None
    kind = request.offset_option.WhichOneof("offset_type")
    if kind is None:
        return None
    return OffsetOption(kind, int(getattr(request.offset_option, kind)))


def topic_message_type(config: Any) -> str:
    """A topic's 5.x ``message.type`` attribute; NORMAL when it has none (TopicConfig)."""
    return (config.attributes or {}).get("message.type", "NORMAL")


@dataclass
class GrpcSettings:
    host: str = "127.0.0.1"
    port: int = 8081
    advertised_host: str = "127.0.0.1"
    auto_create_topics: bool = False
    acl: AccessControl | None = None  # None: every call is served, signed or not


class _Call:
    """What every RPC needs from its metadata."""

    __slots__ = ("account", "client_id", "peer")

    def __init__(self, client_id: str, peer: Host, account: Account | None = None) -> None:
        self.client_id = client_id
        self.peer = peer
        self.account = account  # the ACL account the call was signed with


def _peer_host(peer: str) -> Host:
    # "ipv4:127.0.0.1:5000", "ipv6:[::1]:5000"; anything else (unix sockets) is 0.0.0.0:0.
    try:
        kind, _, rest = peer.partition(":")
        if kind in ("ipv4", "ipv6"):
            host, _, port = rest.rpartition(":")
            return Host(ipaddress.ip_address(host.strip("[]")).packed, int(port))
    except ValueError:
        pass
    return Host(b"\0\0\0\0", 0)


def _peer_address(peer: str) -> str:
    # "ipv4:127.0.0.1:5000" -> "127.0.0.1:5000", "ipv6:[::1]:5000" -> "[::1]:5000"
    kind, sep, rest = peer.partition(":")
    return rest if sep and kind in ("ipv4", "ipv6") else peer


# The generated servicer base (a module loaded at run time, so Any to a type checker).
_Servicer: Any = service_pb2_grpc.MessagingServiceServicer


class MessagingService(_Servicer):
    def __init__(self, broker: BrokerCore, settings: GrpcSettings) -> None:
        self.broker = broker
        self.settings = settings
        self.sessions = SessionRegistry(broker)
        self._auth = GrpcAuth(settings.acl) if settings.acl is not None else None
        self._round_robin: dict[str, int] = {}
        broker.transactions.check_sources.append(self._transaction_targets)
        broker.lite_expiry.listeners.append(self._lite_expired)

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, context: Any, request: Any = None) -> _Call:
        metadata = {k.lower(): v for k, v in (context.invocation_metadata() or ())}
        account = None
        if self._auth is not None:
            # the signature, then what the request touches (Telemetry: the stream only)
            what = type(request).__name__ if request is not None else "Telemetry"
            resources = grpc_resources(request) if request is not None else ()
            try:
                peer = _peer_address(context.peer() or "")
                account = self._auth.check(metadata, peer, what, resources)
            except AuthError as error:
                raise GrpcStatusError(Code.UNAUTHORIZED, str(error)) from None
            except PermissionDenied as error:
                raise GrpcStatusError(Code.FORBIDDEN, str(error)) from None
        client_id = metadata.get("x-mq-client-id", "")
        if client_id:
            self.sessions.touch(client_id)
        return _Call(client_id, _peer_host(context.peer() or ""), account)

    async def _unary(
        self,
        response_type: Callable[..., Any],
        context: Any,
        work: Callable[[_Call], Any | Awaitable[Any]],
        request: Any = None,
    ) -> Any:
        try:
            call = self._call(context, request)
            result = work(call)
            if asyncio.iscoroutine(result):
                result = await result
            return result
        except GrpcStatusError as error:
            return response_type(status=_status(error.code, str(error)))
        except BrokerError as error:  # a service's refusal, in the front's own codes
            return response_type(status=status_of(error))
        except Exception as error:  # one client's request never takes the broker down
            log.exception("gRPC %s failed", response_type.__name__)
            return response_type(status=_status(Code.INTERNAL_ERROR, f"internal error: {error}"))

    def _topic(self, name: str, *, for_write: bool = False) -> Any:
        if not name:
            raise GrpcStatusError(Code.ILLEGAL_TOPIC, "topic name cannot be empty")
        problem = validate_topic_name(name)
        if problem:
            raise GrpcStatusError(Code.ILLEGAL_TOPIC, problem)
        config = self.broker.topics.get(name)
        if config is None and self.settings.auto_create_topics and not is_system_topic(name):
            # An emulator convenience (off by default, as RocketMQ's proxy never creates one):
            # a topic that accepts every message type.
            config = self.broker.topics.create(name, attributes={"message.type": "MIXED"})
            self.broker.schedule_registration()
        if config is None:
            raise GrpcStatusError(Code.TOPIC_NOT_FOUND, f"topic {name} does not exist")
        if for_write and name in NOT_ALLOWED_SEND_TOPICS:
            raise GrpcStatusError(Code.FORBIDDEN, f"sending to topic {name} is forbidden")
        return config

    def _group(self, name: str) -> Any:
        problem = validate_group_name(name)
        if problem:
            raise GrpcStatusError(Code.ILLEGAL_CONSUMER_GROUP, problem)
        group = self.broker.groups.find_or_create(name)
        if group is None:
            raise GrpcStatusError(
                Code.CONSUMER_GROUP_NOT_FOUND, f"consumer group {name} does not exist"
            )
        return group

    def _endpoints(self, requested: Any) -> Any:
        """Where clients reach this broker's gRPC port: the address they dialled (it reached
        us), or the advertised host."""
        if requested is not None and len(requested.addresses) > 0:
            return requested
        host = self.settings.advertised_host
        try:
            scheme = (
                definition_pb2.AddressScheme.IPv6
                if ipaddress.ip_address(host).version == 6
                else definition_pb2.AddressScheme.IPv4
            )
        except ValueError:
            scheme = definition_pb2.AddressScheme.DOMAIN_NAME
        return definition_pb2.Endpoints(
            scheme=scheme, addresses=[definition_pb2.Address(host=host, port=self.settings.port)]
        )

    def _broker_of(self, endpoints: Any) -> Any:
        return definition_pb2.Broker(
            name=self.broker.config.broker_name, id=0, endpoints=self._endpoints(endpoints)
        )

    # -- routes -------------------------------------------------------------------------------

    async def QueryRoute(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            config = self._topic(request.topic.name)
            broker = self._broker_of(request.endpoints)
            types = accepted_types(topic_message_type(config))
            readable = bool(config.perm & PERM_READ)
            writable = bool(config.perm & PERM_WRITE)
            permission = definition_pb2.Permission
            queues = []
            for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
                can_read = readable and queue_id < config.read_queue_nums
                can_write = writable and queue_id < config.write_queue_nums
                queues.append(
                    definition_pb2.MessageQueue(
                        topic=request.topic,
                        id=queue_id,
                        permission=(
                            permission.READ_WRITE
                            if can_read and can_write
                            else permission.READ
                            if can_read
                            else permission.WRITE
                            if can_write
                            else permission.NONE
                        ),
                        broker=broker,
                        accept_message_types=types,
                    )
                )
            return pb.QueryRouteResponse(status=_ok(), message_queues=queues)

        return await self._unary(pb.QueryRouteResponse, context, work, request)

    async def QueryAssignment(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            config = self._topic(request.topic.name)
            group = self._group(request.group.name)
            if not config.perm & PERM_READ or config.read_queue_nums <= 0:
                return pb.QueryAssignmentResponse(
                    status=_status(Code.FORBIDDEN, "no readable queue")
                )
            broker = self._broker_of(request.endpoints)
            permission = definition_pb2.Permission.READ_WRITE
            # FIFO groups get every queue (consumed one by one, in order); others one
            # assignment per broker, queue -1: POP from all queues (RouteActivity).
            # A lite consumer's one assignment stands for all its lite topics' queues.
            ids = (
                range(config.read_queue_nums)
                if getattr(group, "consume_message_orderly", False)
                and topic_message_type(config) != "LITE"
                else [-1]
            )
            assignments = [
                definition_pb2.Assignment(
                    message_queue=definition_pb2.MessageQueue(
                        topic=request.topic, id=i, permission=permission, broker=broker
                    )
                )
                for i in ids
            ]
            return pb.QueryAssignmentResponse(status=_ok(), assignments=assignments)

        return await self._unary(pb.QueryAssignmentResponse, context, work, request)

    # -- clients ---------------------------------------------------------------------------------

    async def Heartbeat(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            if request.HasField("group") and request.group.name:
                self._group(request.group.name)
            if call.client_id:
                session = self.sessions.touch(call.client_id)
                if request.client_type:
                    session.client_type = request.client_type
            return pb.HeartbeatResponse(status=_ok())

        return await self._unary(pb.HeartbeatResponse, context, work, request)

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            if call.client_id:
                self.sessions.drop(call.client_id)
            return pb.NotifyClientTerminationResponse(status=_ok())

        return await self._unary(pb.NotifyClientTerminationResponse, context, work, request)

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        try:
            call = self._call(context)
        except GrpcStatusError as error:
            yield pb.TelemetryCommand(status=_status(error.code, str(error)))
            return
        if not call.client_id:
            yield pb.TelemetryCommand(
                status=_status(Code.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is required")
            )
            return
        session = self.sessions.touch(call.client_id)
        outbox: asyncio.Queue[Any] = asyncio.Queue(maxsize=TELEMETRY_QUEUE_MAX)
        session.outbox = outbox
        closed = object()

        async def read() -> None:
            try:
                async for command in request_iterator:
                    self.sessions.touch(call.client_id)
                    if command.HasField("settings"):
                        refusal = self._settings_refusal(call, command.settings)
                        if refusal is not None:
                            outbox.put_nowait(refusal)
                            continue
                        reply = self.sessions.apply_settings(session, command.settings)
                        outbox.put_nowait(settings_reply(reply))
                    # thread stack traces and verify results: nothing asked for them
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a broken stream ends only this client's telemetry
                log.info("telemetry of %s ended: %s", call.client_id, error)
            finally:
                outbox.put_nowait(closed)

        reader = asyncio.create_task(read(), name=f"telemetry-{call.client_id}")
        try:
            while True:
                command = await outbox.get()
                if command is closed:
                    break
                yield command
        finally:
            reader.cancel()
            if session.outbox is outbox:
                session.outbox = None

    def _settings_refusal(self, call: _Call, settings: Any) -> Any | None:
        """A FORBIDDEN reply when the settings name a topic or group the account may not use
        (publishing: PUB on each topic; subscription: SUB on the group and its topics)."""
        if self._auth is None or call.account is None:
            return None
        try:
            self._auth.acl.authorize(call.account, "Settings", settings_resources(settings))
        except Denied as denial:
            return pb.TelemetryCommand(status=_status(Code.FORBIDDEN, str(denial)))
        return None

    def _transaction_targets(self, producer_group: str) -> list[Any]:
        """Transaction checks for gRPC producers of a topic (their producer group)."""

        def target_for(session: Any) -> Callable[[MessageRecord, HalfMessage], None]:
            def check(real: MessageRecord, half: HalfMessage) -> None:
                command = pb.TelemetryCommand(
                    recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
                        message=to_message(real), transaction_id=half.transaction_id
                    )
                )
                self.sessions.send_command(session, command)

            return check

        return [target_for(s) for s in self.sessions.producers_of(producer_group)]

    # -- send -------------------------------------------------------------------------------------

    async def SendMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self._unary(
            pb.SendMessageResponse, context, lambda call: self._send(request, call), request
        )

    def _send(self, request: Any, call: _Call) -> Any:
        if len(request.messages) == 0:
            raise GrpcStatusError(Code.MESSAGE_CORRUPTED, "no message to send")
        topic_name = request.messages[0].topic.name
        sender = self.broker.send
        config = self._topic(topic_name, for_write=True)
        sender.check_topic(topic_name)
        sender.check_writable(config)
        sendable = _SENDABLE.get(topic_message_type(config), set())
        now = self.broker.now_ms()
        messages = []
        for message in request.messages:
            if message.topic.name != topic_name:
                raise GrpcStatusError(Code.MESSAGE_CORRUPTED, "topic in message is not same")
            kind = message.system_properties.message_type
            if kind == MessageType.LITE and MessageType.LITE not in sendable:
                raise GrpcStatusError(
                    Code.UNSUPPORTED,
                    f"LITE messages are not supported by topic {topic_name} "
                    f"({topic_message_type(config)}); only by a LITE parent topic",
                )
            if kind not in sendable:
                raise GrpcStatusError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"topic {topic_name} is {topic_message_type(config)}; it does not accept "
                    f"{MessageType.Name(kind)} messages",
                )
            if kind == MessageType.LITE:
                problem = validate_lite_topic(topic_name, message.system_properties.lite_topic)
                if problem:
                    raise GrpcStatusError(Code.ILLEGAL_LITE_TOPIC, problem)
            messages.append(
                to_put_message(
                    message,
                    born_host=call.peer,
                    producer_group=topic_name,
                    body_size_max=self.broker.store.config.limits.body_size_max,
                    now_ms=now,
                )
            )
        first = messages[0].properties or {}
        group = first.get("__SHARDINGKEY") if len(messages) == 1 else None
        entries = []
        for put in messages:
            priority = (put.properties or {}).get(PRIORITY_PROPERTY)
            lite = (put.properties or {}).get(LITE_PROPERTY)
            if lite is not None:
                # A lite topic is a one-queue LMQ of its own, made at its first message.
                put.topic = sender.lite_queue(config, lite)
                queue_id = 0
            elif group:
                queue_id = consistent_hash(java_string_hash(group), config.write_queue_nums)
            elif priority is not None:
                # RIP-80: queue N holds priority N; a priority past the last queue is the highest.
                queue_id = min(int(priority), config.write_queue_nums - 1)
            else:
                queue_id = self._next_queue(topic_name, config.write_queue_nums)
            put.queue_id = queue_id
            properties = put.properties
            assert properties is not None
            status = _ok()
            if sender.faults.sends:  # planned faults (broker.faults): nothing planned, one test
                faulted, fault = sender.faulted_put(put, properties)
                if faulted is None:  # SYSTEM_BUSY: the proxy's TOO_MANY_REQUESTS, not stored
                    raise GrpcStatusError(Code.TOO_MANY_REQUESTS, "system busy (a planned fault)")
                result = faulted
                if fault is not None:  # stored; the status the proxy gives that SendStatus
                    status = _status(_FAULT_CODES[fault], f"send status {fault.value} (a fault)")
            else:
                result = sender.put(put, properties)
            message_id = properties["UNIQ_KEY"]
            deliver = properties.get("TIMER_DELIVER_MS")
            entries.append(
                pb.SendResultEntry(
                    status=status,
                    message_id=message_id,
                    transaction_id=message_id if properties.get("TRAN_MSG") == "true" else "",
                    offset=result.queue_offset,
                    recall_handle=(
                        build_recall_handle(
                            topic_name, self.broker.config.broker_name, int(deliver), message_id
                        )
                        if deliver and deliver.isdigit() and int(deliver) > now
                        else ""
                    ),
                )
            )
        if entries[0].status.code != Code.OK:  # a planned fault's status, for the whole call
            return pb.SendMessageResponse(status=entries[0].status, entries=entries)
        if self.broker.flush.sync:
            return self._durable(entries, result.end_offset)
        return pb.SendMessageResponse(status=_ok(), entries=entries)

    async def _durable(self, entries: list[Any], end_offset: int) -> Any:
        if await self.broker.flush.wait_durable(end_offset):
            return pb.SendMessageResponse(status=_ok(), entries=entries)
        status = _status(Code.MASTER_PERSISTENCE_TIMEOUT, "flush to disk timed out")
        for entry in entries:
            entry.status.CopyFrom(status)
        return pb.SendMessageResponse(status=status, entries=entries)

    def _next_queue(self, topic: str, queues: int) -> int:
        # Round robin per topic, as the proxy's write selector does.
        counter = self._round_robin.get(topic, 0)
        self._round_robin[topic] = counter + 1
        return counter % max(queues, 1)

    async def RecallMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            service = RecallService(
                topics=self.broker.topics,
                timer=self.broker.timer,
                broker_name=self.broker.config.broker_name,
                now_ms=self.broker.now_ms,
            )
            outcome, message_id, reason = service.recall(request.topic.name, request.recall_handle)
            if outcome is not RecallOutcome.RECALLED:
                raise GrpcStatusError(_RECALL_CODES[outcome], reason)
            return pb.RecallMessageResponse(status=_ok(), message_id=message_id)

        return await self._unary(pb.RecallMessageResponse, context, work, request)

    # -- transactions ------------------------------------------------------------------------------

    async def EndTransaction(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            self._topic(request.topic.name)
            if not request.transaction_id.strip():
                raise GrpcStatusError(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
            half = self.broker.transactions.pending.get(request.transaction_id)
            if half is None:
                raise GrpcStatusError(
                    Code.INVALID_TRANSACTION_ID,
                    f"no transaction {request.transaction_id} is pending "
                    "(ended already, or never begun here)",
                )
            resolution = definition_pb2.TransactionResolution
            outcome = {resolution.COMMIT: COMMIT, resolution.ROLLBACK: ROLLBACK}.get(
                request.resolution, 0
            )
            self.broker.transactions.end(
                half.physical_offset,
                half.producer_group,
                outcome,
                from_check=request.source == definition_pb2.TransactionSource.SOURCE_SERVER_CHECK,
            )
            return pb.EndTransactionResponse(status=_ok())

        return await self._unary(pb.EndTransactionResponse, context, work, request)

    # -- receive --------------------------------------------------------------------------------------

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        try:
            call = self._call(context, request)
            plan = self._receive_plan(request, context)
        except GrpcStatusError as error:
            yield pb.ReceiveMessageResponse(status=_status(error.code, str(error)))
            return
        group, topic, batch, invisible_ms, polling_ms, selector, fifo = plan
        lite = topic_message_type(self.broker.topics.get(topic)) == "LITE"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + polling_ms / 1000
        while True:
            try:
                if lite:
                    sources = self._lite_sources(group, topic, call.client_id)
                    keys = [(source, 0) for source in sources]
                    popped = self._pop_lite(sources, group, batch, invisible_ms, selector)
                else:
                    keys = self.broker.pop.queues_for(group, topic, -1)
                    popped = self.broker.pop.pop(
                        group, topic, -1, batch, invisible_ms, fifo, selector.tags, sql=selector.sql
                    )
            except PopError as error:
                yield pb.ReceiveMessageResponse(status=status_of(error))
                return
            if popped:
                break
            remaining = deadline - loop.time()
            if remaining <= 0 or not self.broker.holds.can_hold():
                yield pb.ReceiveMessageResponse(
                    status=_status(Code.MESSAGE_NOT_FOUND, "no new message")
                )
                return
            await self.broker.holds.wait_any(
                keys, min(remaining, LITE_RECHECK_S) if lite else remaining
            )
        yield pb.ReceiveMessageResponse(status=_ok())
        for item in popped:
            record = decode_record(item.raw, check_crc=False)
            original_topic = (
                record.properties.get("RETRY_TOPIC", topic)
                if record.topic.startswith("%RETRY%")
                else topic
                if lite
                else record.topic
            )
            handle = str(item.handle)
            if request.auto_renew and call.client_id:
                self.sessions.hold(
                    Renewal(
                        call.client_id,
                        group,
                        item.topic if lite else topic,
                        record.unique_key or "",
                        handle,
                        item.handle.pop_time,
                        record.reconsume_times + 1,
                    ),
                    item.handle.pop_time + item.handle.invisible_ms,
                )
            yield pb.ReceiveMessageResponse(
                message=to_message(
                    record,
                    topic=original_topic,
                    receipt_handle=handle,
                    invisible_ms=invisible_ms,
                )
            )
        delivered = pb.ReceiveMessageResponse()
        delivered.delivery_timestamp.FromMilliseconds(self.broker.now_ms())
        yield delivered

    def _lite_sources(self, group: str, parent: str, client_id: str) -> list[str]:
        """The LMQs of the lite topics this client may pop that hold messages: a wildcard
        group's client every lite topic of the parent, others those they subscribed to and
        were not evicted from."""
        table = self.sessions.lite
        if table.is_wildcard(group, parent, client_id):
            prefix = f"{LMQ_PREFIX}{parent}|"
            return sorted(t for t in self.broker.topics.topics if t.startswith(prefix))
        names = (lmq_name(parent, lite) for lite in table.poppable(group, parent, client_id))
        return sorted(name for name in names if self.broker.topics.get(name) is not None)

    def _pop_lite(
        self, sources: list[str], group: str, batch: int, invisible_ms: int, selector: Any
    ) -> list[Any]:
        # In order: a lite topic is handed out again only when all taken from it is acked.
        popped: list[Any] = []
        for source in sources:
            if len(popped) >= batch:
                break
            popped.extend(
                self.broker.pop.pop(
                    group,
                    source,
                    0,
                    batch - len(popped),
                    invisible_ms,
                    True,
                    selector.tags,
                    sql=selector.sql,
                )
            )
        return popped

    def _receive_plan(
        self, request: Any, context: Any
    ) -> tuple[str, str, int, int, int, MessageFilter, bool]:
        topic = request.message_queue.topic.name
        config = self._topic(topic)
        group_config = self._group(request.group.name)
        if topic_message_type(config) == "LITE":
            self._check_bound(group_config, topic)
        expression = request.filter_expression
        kind = SQL92 if expression.type == definition_pb2.FilterType.SQL else TAG
        try:
            selector = self.broker.pulls.filter_of(expression.expression, kind)
        except BrokerError as error:  # a bad expression: ILLEGAL_FILTER_EXPRESSION
            raise GrpcStatusError(STATUS_CODES[error.kind], str(error)) from None
        if request.auto_renew:
            invisible_ms = DEFAULT_INVISIBLE_MS
        else:
            invisible_ms = request.invisible_duration.ToMilliseconds()
            if not INVISIBLE_MS_MIN_RECEIVE <= invisible_ms <= INVISIBLE_MS_MAX:
                raise GrpcStatusError(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    f"the invisible time {invisible_ms} ms is outside "
                    f"[{INVISIBLE_MS_MIN_RECEIVE}, {INVISIBLE_MS_MAX}] ms",
                )
        polling_ms = (
            request.long_polling_timeout.ToMilliseconds()
            if request.HasField("long_polling_timeout")
            else POLLING_MS_MAX
        )
        polling_ms = min(max(polling_ms, POLLING_MS_MIN), POLLING_MS_MAX)
        remaining = context.time_remaining()
        if remaining is not None:
            # Answer before the client's deadline, with a little room for the way back.
            room_ms = int(remaining * 1000) - 500
            if room_ms < POLLING_MS_MIN:
                if room_ms <= 0:
                    raise GrpcStatusError(
                        Code.ILLEGAL_POLLING_TIME,
                        "The deadline time remaining is not enough for polling",
                    )
            polling_ms = min(polling_ms, max(room_ms, 0))
        batch = min(max(request.batch_size, 1), RECEIVE_BATCH_MAX)
        fifo = bool(getattr(group_config, "consume_message_orderly", False))
        return request.group.name, topic, batch, invisible_ms, polling_ms, selector, fifo

    # -- ack, invisible time, DLQ -----------------------------------------------------------------

    async def AckMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            group = request.group.name
            self._group(group)
            topic = request.topic.name
            results = []
            for entry in request.entries:
                handle = self.sessions.current_handle(
                    call.client_id, group, entry.message_id, entry.receipt_handle
                )
                try:
                    self.broker.pop.ack(group, self._held_topic(topic, entry), handle)
                    status = _ok()
                    self.sessions.forget(call.client_id, group, entry.message_id)
                except PopError as error:
                    status = status_of(error)
                results.append(
                    pb.AckMessageResultEntry(
                        message_id=entry.message_id,
                        receipt_handle=entry.receipt_handle,
                        status=status,
                    )
                )
            codes = {r.status.code for r in results}
            if not results:
                top = _status(Code.BAD_REQUEST, "no entry to acknowledge")
            elif len(codes) == 1:
                top = results[0].status
            else:
                top = _status(Code.MULTIPLE_RESULTS, "entries have different results")
            return pb.AckMessageResponse(status=top, entries=results)

        return await self._unary(pb.AckMessageResponse, context, work, request)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            group = request.group.name
            self._group(group)
            invisible_ms = request.invisible_duration.ToMilliseconds()
            if not 0 <= invisible_ms <= INVISIBLE_MS_MAX:
                raise GrpcStatusError(
                    Code.ILLEGAL_INVISIBLE_TIME,
                    f"the invisible time {invisible_ms} ms is outside [0, {INVISIBLE_MS_MAX}] ms",
                )
            handle = self.sessions.current_handle(
                call.client_id, group, request.message_id, request.receipt_handle
            )
            new = self.broker.pop.change_invisible(
                group, self._held_topic(request.topic.name, request), handle, max(invisible_ms, 1)
            )
            # The consumer took the message back (a nack): the broker stops renewing it.
            self.sessions.forget(call.client_id, group, request.message_id)
            return pb.ChangeInvisibleDurationResponse(status=_ok(), receipt_handle=str(new))

        return await self._unary(pb.ChangeInvisibleDurationResponse, context, work, request)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            group = request.group.name
            self._group(group)
            handle = self.sessions.current_handle(
                call.client_id, group, request.message_id, request.receipt_handle
            )
            self.broker.pop.forward_to_dead_letter(
                group,
                self._held_topic(request.topic.name, request),
                handle,
                by="the consumer (ForwardMessageToDeadLetterQueue)",
                reason=(
                    f"gave up at delivery attempt {request.delivery_attempt} of "
                    f"{request.max_delivery_attempts}"
                ),
            )
            self.sessions.forget(call.client_id, group, request.message_id)
            return pb.ForwardMessageToDeadLetterQueueResponse(status=_ok())

        return await self._unary(pb.ForwardMessageToDeadLetterQueueResponse, context, work, request)

    @staticmethod
    def _check_bound(group: Any, parent: str) -> None:
        problem = bind_problem(group.group_name, group.attributes or {}, parent)
        if problem:  # RocketMQ's INVALID_PARAMETER, which the proxy answers as BAD_REQUEST
            raise GrpcStatusError(Code.BAD_REQUEST, problem)

    @staticmethod
    def _held_topic(topic: str, request: Any) -> str:
        """Where a received message is held: a lite one in its lite topic's LMQ (the client
        names the parent topic and the lite topic)."""
        return lmq_name(topic, request.lite_topic) if request.lite_topic else topic

    # -- lite subscriptions ------------------------------------------------------------------------

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:  # noqa: N802
        def work(call: _Call) -> Any:
            parent = request.topic.name
            config = self._topic(parent)
            if topic_message_type(config) != "LITE":
                raise GrpcStatusError(
                    Code.UNSUPPORTED,
                    f"lite subscriptions are not supported by topic {parent} "
                    f"({topic_message_type(config)}); only by a LITE parent topic",
                )
            group = request.group.name
            self._check_bound(self._group(group), parent)
            if not call.client_id:
                raise GrpcStatusError(
                    Code.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is required"
                )
            lites = list(request.lite_topic_set)
            for lite in lites:
                problem = validate_lite_topic(parent, lite)
                if problem:
                    raise GrpcStatusError(Code.ILLEGAL_LITE_TOPIC, problem)
            attributes = self._group(group).attributes or {}
            self._apply_lite_action(request, call.client_id, group, parent, lites, attributes)
            return pb.SyncLiteSubscriptionResponse(status=_ok())

        return await self._unary(pb.SyncLiteSubscriptionResponse, context, work, request)

    def _apply_lite_action(
        self,
        request: Any,
        client_id: str,
        group: str,
        parent: str,
        lites: list[str],
        attributes: dict[str, str],
    ) -> None:
        """What LiteSubscriptionRegistryImpl does with each of the four actions."""
        table = self.sessions.lite
        action = definition_pb2.LiteSubscriptionAction
        exclusive = is_exclusive(attributes)
        if request.action == action.PARTIAL_ADD:
            if is_wildcard(attributes):  # RocketMQ's IllegalStateException: ILLEGAL_OPERATION
                raise GrpcStatusError(
                    Code.BAD_REQUEST,
                    f"subscribe lite operation is not supported for group {group}: it is a "
                    "wildcard group (lite.sub.wildcard), which takes every lite topic",
                )
            self._check_quota(table.of(group, parent, client_id) | set(lites))
            for eviction in table.add_partial(group, parent, client_id, lites, exclusive=exclusive):
                self._notify_unsubscribe(eviction.client_id, eviction.lite)
                if resets_on(attributes, LITE_RESET_EXCLUSIVE):
                    reset_offset(
                        self.broker.pop,
                        group,
                        lmq_name(parent, eviction.lite),
                        OffsetOption("policy", POLICY_MIN),
                    )
            option = _offset_option(request)
            if option is not None:
                for lite in lites:
                    reset_offset(self.broker.pop, group, lmq_name(parent, lite), option)
        elif request.action == action.COMPLETE_ADD:
            self._check_quota(set(lites))
            if is_wildcard(attributes):
                table.add_wildcard(group, parent, client_id)
            for lite in table.add_complete(group, parent, client_id, lites, exclusive=exclusive):
                self._notify_unsubscribe(client_id, lite)  # its earlier notice was lost
        elif request.action == action.PARTIAL_REMOVE:
            held = table.of(group, parent, client_id) & set(lites)
            table.remove(group, parent, client_id, lites)
            if resets_on(attributes, LITE_RESET_UNSUBSCRIBE):
                for lite in sorted(held):
                    reset_offset(
                        self.broker.pop,
                        group,
                        lmq_name(parent, lite),
                        OffsetOption("policy", POLICY_MIN),
                    )
        else:  # COMPLETE_REMOVE: the client drops all its lite subscriptions
            table.remove_all(group, parent, client_id)

    @staticmethod
    def _check_quota(after: set[str]) -> None:
        if len(after) > LITE_SUBSCRIPTION_QUOTA:
            raise GrpcStatusError(
                Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                f"{len(after)} lite subscriptions exceed the quota {LITE_SUBSCRIPTION_QUOTA}",
            )

    def _notify_unsubscribe(self, client_id: str, lite: str) -> None:
        """NotifyUnsubscribeLiteCommand over the client's Telemetry stream (notifyUnsubscribeLite:
        a client without one is only logged)."""
        session = self.sessions.sessions.get(client_id)
        command = pb.TelemetryCommand(
            notify_unsubscribe_lite_command=pb.NotifyUnsubscribeLiteCommand(lite_topic=lite)
        )
        if session is None or not self.sessions.send_command(session, command):
            log.warning("cannot tell client %s to unsubscribe lite topic %s", client_id, lite)

    def _lite_expired(self, parent: str, lite: str) -> None:
        # cleanSubscription(lmqName, notifyClient=false): the clients are not told
        for group, client_id in self.sessions.lite.drop_lite(parent, lite):
            log.info(
                "lite topic %s of %s expired: left %s's subscription (%s)",
                lite,
                parent,
                client_id,
                group,
            )

    # -- not served --------------------------------------------------------------------------------

    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802
        yield pb.PullMessageResponse(
            status=_status(
                Code.NOT_IMPLEMENTED, "PullMessage over gRPC is not implemented; use ReceiveMessage"
            )
        )

    async def UpdateOffset(self, request: Any, context: Any) -> Any:  # noqa: N802
        return pb.UpdateOffsetResponse(
            status=_status(Code.NOT_IMPLEMENTED, "UpdateOffset over gRPC is not implemented")
        )

    async def GetOffset(self, request: Any, context: Any) -> Any:  # noqa: N802
        return pb.GetOffsetResponse(
            status=_status(Code.NOT_IMPLEMENTED, "GetOffset over gRPC is not implemented")
        )

    async def QueryOffset(self, request: Any, context: Any) -> Any:  # noqa: N802
        return pb.QueryOffsetResponse(
            status=_status(Code.NOT_IMPLEMENTED, "QueryOffset over gRPC is not implemented")
        )
