"""What a push consumer answers when a broker asks on an administrator's behalf (RocketMQ's
``ClientRemotingProcessor`` with ``MQClientInstance`` and ``DefaultMQPushConsumerImpl``):

* RESET_CONSUMER_CLIENT_OFFSET (220, oneway): the owned queues of the topic that the broker's
  table names stop pulling and consuming, take the new offset, commit it and are given up; the
  next rebalance (asked for at once) takes them again from there. RocketMQ waits 10 s between
  the two steps for consumption to end; here the drop itself waits for the message being
  consumed (up to ``close_timeout_ms``).
* GET_CONSUMER_STATUS_FROM_CLIENT (221): the offsets held for the topic
  (``GetConsumerStatusBody.messageQueueTable``).
* GET_CONSUMER_RUNNING_INFO (307): ``ConsumerRunningInfo``: the consumer's settings under the
  Java consumer's property names and the ``PROP_*`` ones, its subscriptions (the retry topic's
  too), each owned queue's ``ProcessQueueInfo`` and each subscribed topic's ``ConsumeStatus``.
* CONSUME_MESSAGE_DIRECTLY (309): the message in the body is given to the listener (not
  counted, not acknowledged); the answer is ``ConsumeMessageDirectlyResult``.

A request for another group is answered as RocketMQ's client answers one for a group it does
not have: SYSTEM_ERROR "The Consumer Group <g> not exist in this consumer".
"""

from __future__ import annotations

import asyncio
import inspect
import io
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pocketmq.broker.protocol import MQVersion, RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.admin_bodies import (
    PROP_CLIENT_VERSION,
    PROP_CONSUME_ORDERLY,
    PROP_CONSUME_TYPE,
    PROP_CONSUMER_START_TIMESTAMP,
    PROP_NAMESERVER_ADDR,
    PROP_THREADPOOL_CORE_SIZE,
    ConsumeMessageDirectlyResult,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerRunningInfo,
    GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusBody,
    GetConsumerStatusRequestHeader,
    ProcessQueueInfo,
    ResetOffsetBody,
    ResetOffsetBodyForC,
    ResetOffsetRequestHeader,
    decode_mq_table,
    encode_fastjson_body,
    mq_key,
)
from pocketmq.broker.protocol.errors import MalformedBodyError, RemoteProtocolError
from pocketmq.broker.protocol.headers import decode_json_body
from pocketmq.broker.protocol.message_codec import decode_message

from ._consumer_stats import ConsumerStats
from ._push_common import FROM_WHERE, MODELS, ConsumeResult, PushOptions, Subscriptions
from .connection import CLIENT_LANGUAGE, CLIENT_VERSION, Connection
from .message import MessageQueue, ReceivedMessage

if TYPE_CHECKING:
    from ._coordinator import Coordinator
    from ._core import ClientCore
    from ._fetcher import Fetcher
    from .offset_store import OffsetStore

__all__ = ["ConsumerAdminRequests"]

log = logging.getLogger("pocketmq.client.consumer")

_MIB = 1024 * 1024


def _version_desc(version: int) -> str:
    try:
        return MQVersion(version).name
    except ValueError:
        return f"V{version}"


def _java_timestamp(epoch_ms: int) -> str:
    """``consumeTimestamp`` as the Java consumer holds it: yyyyMMddHHmmss, local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(epoch_ms / 1000))


class ConsumerAdminRequests:
    """The handlers of one push consumer; ``install`` puts them in its pool's table."""

    def __init__(
        self,
        core: ClientCore,
        options: PushOptions,
        *,
        offsets: OffsetStore,
        subscriptions: Subscriptions,
        fetcher: Fetcher,
        coordinator: Coordinator,
        stats: ConsumerStats,
        started_ms: Callable[[], int],
    ) -> None:
        self._core = core
        self._options = options
        self._offsets = offsets
        self._subscriptions = subscriptions
        self._fetcher = fetcher
        self._coordinator = coordinator
        self._stats = stats
        self._started_ms = started_ms

    def install(self) -> None:
        handlers = self._core.pool.handlers
        handlers[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] = self.on_reset_offset
        handlers[RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT] = self.on_get_status
        handlers[RequestCode.GET_CONSUMER_RUNNING_INFO] = self.on_running_info
        handlers[RequestCode.CONSUME_MESSAGE_DIRECTLY] = self.on_consume_directly

    def _answer(
        self, cmd: RemotingCommand, code: int, remark: str | None = None, body: bytes | None = None
    ) -> RemotingCommand:
        return cmd.make_response(
            code, remark, body=body, language=CLIENT_LANGUAGE, version=CLIENT_VERSION
        )

    def _not_mine(self, cmd: RemotingCommand, group: str) -> RemotingCommand:
        return self._answer(
            cmd,
            ResponseCode.SYSTEM_ERROR,
            f"The Consumer Group <{group}> not exist in this consumer",
        )

    # -- RESET_CONSUMER_CLIENT_OFFSET --------------------------------------------------------

    async def on_reset_offset(self, conn: Connection, cmd: RemotingCommand) -> None:
        try:
            header = ResetOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
            table = _reset_table(cmd.body or b"{}")
        except RemoteProtocolError as error:
            log.warning("%s: malformed RESET_CONSUMER_CLIENT_OFFSET dropped: %s", conn.addr, error)
            return None
        log.info(
            "reset offset from broker %s: topic=%s group=%s timestamp=%d",
            conn.addr,
            header.topic,
            header.group,
            header.timestamp,
        )
        if header.group != self._options.group:
            log.info("[reset-offset] consumer does not exist. group=%s", header.group)
            return None
        await self._coordinator.reset_offsets(header.topic, table)
        return None

    # -- GET_CONSUMER_STATUS_FROM_CLIENT -----------------------------------------------------

    def _offsets_of(self, topic: str) -> dict[str, int]:
        table: dict[str, int] = {}
        for mq in sorted(self._fetcher.queues):
            offset = self._offsets.read(mq)
            if mq.topic == topic and offset is not None:
                table[mq_key(mq.to_wire())] = offset
        return table

    async def on_get_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            header = GetConsumerStatusRequestHeader.from_ext_fields(cmd.ext_fields)
        except RemoteProtocolError as error:
            return self._answer(cmd, ResponseCode.SYSTEM_ERROR, f"bad request: {error}")
        table = self._offsets_of(header.topic) if header.group == self._options.group else {}
        body = encode_fastjson_body(GetConsumerStatusBody(message_queue_table=table))
        return self._answer(cmd, ResponseCode.SUCCESS, body=body)

    # -- GET_CONSUMER_RUNNING_INFO -----------------------------------------------------------

    async def on_running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            header = GetConsumerRunningInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        except RemoteProtocolError as error:
            return self._answer(cmd, ResponseCode.SYSTEM_ERROR, f"bad request: {error}")
        if header.consumer_group != self._options.group:
            return self._not_mine(cmd, header.consumer_group)
        info = self.running_info()
        if header.jstack_enable:
            info.jstack = _task_dump()
        return self._answer(cmd, ResponseCode.SUCCESS, body=encode_fastjson_body(info))

    def properties(self) -> dict[str, str]:
        """The settings under the Java consumer's property names, then the PROP_* ones."""
        options, core = self._options, self._core
        max_reconsume = options.max_reconsume_times
        timestamp_ms = options.consume_timestamp_ms
        props: dict[str, Any] = {
            "consumerGroup": options.group,
            "messageModel": MODELS[options.message_model],
            "consumeFromWhere": FROM_WHERE[options.consume_from],
            "consumeTimestamp": _java_timestamp(timestamp_ms) if timestamp_ms else None,
            "consumeThreadMin": options.consume_concurrency,
            "consumeThreadMax": options.consume_concurrency,
            "pullBatchSize": options.pull_batch_size,
            "pullThresholdForQueue": options.max_cached_messages_per_queue,
            "pullThresholdSizeForQueue": options.max_cached_bytes_per_queue // _MIB,
            "consumeConcurrentlyMaxSpan": options.max_offset_span,
            "maxReconsumeTimes": -1 if max_reconsume is None else max_reconsume,
            "suspendCurrentQueueTimeMillis": int(options.orderly_retry_delay_ms),
            "brokerSuspendMaxTimeMillis": options.pull_suspend_ms,
            "consumerTimeoutMillisWhenSuspend": int(options.pull_timeout_ms),
            "heartbeatBrokerInterval": int(options.heartbeat_interval_s * 1000),
            "persistConsumerOffsetInterval": int(options.persist_interval_s * 1000),
            "pollNameServerInterval": int(core.routes.refresh_interval_s * 1000),
            "namesrvAddr": ";".join(core.routes.namesrv),
            "clientIP": core.client_ip,
            "instanceName": core.instance_name,
            "language": CLIENT_LANGUAGE.name,
            "unitMode": False,
            PROP_CONSUME_ORDERLY: options.orderly,
            PROP_THREADPOOL_CORE_SIZE: options.consume_concurrency,
            PROP_CONSUMER_START_TIMESTAMP: self._started_ms(),
            PROP_NAMESERVER_ADDR: "".join(f"{address};" for address in core.routes.namesrv),
            PROP_CONSUME_TYPE: "CONSUME_PASSIVELY",
            PROP_CLIENT_VERSION: _version_desc(CLIENT_VERSION),
        }
        return {
            key: (str(value).lower() if isinstance(value, bool) else str(value))
            for key, value in props.items()
            if value is not None
        }

    def running_info(self) -> ConsumerRunningInfo:
        loop_now = asyncio.get_running_loop().time()
        subscriptions = self._subscriptions.all()
        mq_table: dict[str, ProcessQueueInfo] = {}
        for mq, pq in sorted(self._fetcher.queues.items()):
            cached = sorted(pq.messages)
            committed = self._offsets.read(mq)
            mq_table[mq_key(mq.to_wire())] = ProcessQueueInfo(
                commit_offset=committed if committed is not None else -1,
                cached_msg_min_offset=cached[0] if cached else 0,
                cached_msg_max_offset=cached[-1] if cached else 0,
                cached_msg_count=len(cached),
                cached_msg_size_in_mi_b=pq.size_bytes // _MIB,
                locked=pq.lock_valid(loop_now),
                last_lock_timestamp=pq.last_lock_timestamp,
                dropped=pq.dropped,
                last_pull_timestamp=pq.last_pull_timestamp,
                last_consume_timestamp=pq.last_consume_timestamp,
            )
        return ConsumerRunningInfo(
            properties=self.properties(),
            subscription_set=sorted(
                (
                    sub.expression.subscription_data(topic, sub_version=sub.sub_version)
                    for topic, sub in subscriptions.items()
                ),
                key=lambda data: data.topic,
            ),
            mq_table=mq_table,
            status_table={topic: self._stats.status(topic) for topic in sorted(subscriptions)},
        )

    # -- CONSUME_MESSAGE_DIRECTLY ------------------------------------------------------------

    async def on_consume_directly(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            header = ConsumeMessageDirectlyResultRequestHeader.from_ext_fields(cmd.ext_fields)
            ext = decode_message(cmd.body or b"")
        except RemoteProtocolError as error:
            return self._answer(cmd, ResponseCode.SYSTEM_ERROR, f"bad request: {error}")
        if header.consumer_group != self._options.group:
            return self._not_mine(cmd, header.consumer_group)
        listener = self._options.listener
        if listener is None:
            return self._answer(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer Group <{header.consumer_group}> consumes by iterator in this "
                "consumer: no listener to consume the message directly",
            )
        message = ReceivedMessage.from_ext(
            ext, MessageQueue(ext.topic, header.broker_name or "", ext.queue_id)
        )
        log.info("consumeMessageDirectly receive new message: %s", message.msg_id)
        result = await consume_directly(listener, message, orderly=self._options.orderly)
        log.info("consumeMessageDirectly result of %s: %s", message.msg_id, result)
        return self._answer(cmd, ResponseCode.SUCCESS, body=encode_fastjson_body(result))


def _reset_table(body: bytes) -> dict[MessageQueue, int]:
    """The queues and offsets of a reset: ResetOffsetBody's map, or the list a broker sends when
    the tool that asked was a C++ one (ResetOffsetBodyForC)."""
    try:
        decoded = decode_json_body(body, ResetOffsetBody)
    except MalformedBodyError:
        listed = decode_json_body(body, ResetOffsetBodyForC)
        return {
            MessageQueue(item.topic, item.broker_name, item.queue_id): int(item.offset)
            for item in listed.offset_table
        }
    return {
        MessageQueue(mq.topic, mq.broker_name, mq.queue_id): int(offset)
        for mq, offset in decode_mq_table(decoded.offset_table).items()
    }


async def consume_directly(
    listener: Callable[[ReceivedMessage], Any], message: ReceivedMessage, *, orderly: bool
) -> ConsumeMessageDirectlyResult:
    """Run ``listener`` on ``message`` as ConsumeMessage{Concurrently,Orderly}Service's
    consumeMessageDirectly does: CR_SUCCESS, CR_LATER, or CR_THROW_EXCEPTION with the error as
    the remark. A listener returning None consumed the message (the SDK's rule): CR_SUCCESS."""
    result = ConsumeMessageDirectlyResult(order=orderly, auto_commit=True)
    began = time.monotonic()
    try:
        outcome = listener(message)
        if inspect.isawaitable(outcome):
            outcome = await outcome
    except Exception as error:  # the listener's failure is the answer, not ours
        result.consume_result = "CR_THROW_EXCEPTION"
        result.remark = f"{type(error).__name__}: {error}"
    else:
        if outcome is None or outcome == ConsumeResult.SUCCESS:
            result.consume_result = "CR_SUCCESS"
        elif outcome == ConsumeResult.RECONSUME_LATER:
            result.consume_result = "CR_LATER"
        else:  # anything else asks for a redelivery, as the dispatcher treats it
            result.consume_result = "CR_LATER"
            result.remark = f"the listener returned {outcome!r}"
    result.spent_time_mills = int((time.monotonic() - began) * 1000)
    return result


def _task_dump(tasks_max: int = 200) -> str:
    """The running tasks' stacks: a Python consumer's answer to ``jstackEnable``."""

    out = io.StringIO()
    for index, task in enumerate(asyncio.all_tasks()):
        if index >= tasks_max:
            out.write(f"... {len(asyncio.all_tasks()) - tasks_max} more tasks\n")
            break
        out.write(f'"{task.get_name()}"\n')
        task.print_stack(limit=8, file=out)
    return out.getvalue()
