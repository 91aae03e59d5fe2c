"""Request-reply (RocketMQ 4.6+), the SDK's half: the properties a request carries, the reply a
consumer builds (``MessageUtil.createReplyMessage``), and the requests waiting for their reply
(``RequestFutureHolder``), matched by ``CORRELATION_ID`` when the broker pushes a reply
(PUSH_REPLY_MESSAGE_TO_CLIENT, as ``ClientRemotingProcessor.receiveReplyMessage`` reads it).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
import zlib
from collections.abc import Mapping
from typing import Final

from pocketmq.broker.protocol import RemotingCommand, ResponseCode
from pocketmq.broker.protocol.codes import MessageSysFlag
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.headers import ReplyMessageRequestHeader
from pocketmq.broker.protocol.message_codec import decode_properties
from pocketmq.store.topics import reply_topic

from .connection import CLIENT_LANGUAGE, CLIENT_VERSION, Connection
from .errors import ClientUsageError
from .message import PROPERTY_UNIQ_KEY, Message, MessageQueue, ReceivedMessage

__all__ = [
    "MESSAGE_TYPE_REPLY",
    "PROPERTY_CLUSTER",
    "PROPERTY_CORRELATION_ID",
    "PROPERTY_MESSAGE_TTL",
    "PROPERTY_MESSAGE_TYPE",
    "PROPERTY_REPLY_MESSAGE_ARRIVE_TIME",
    "PROPERTY_REPLY_TO_CLIENT",
    "PendingRequests",
    "create_reply",
    "reply_topic",
    "request_properties",
]

log = logging.getLogger("pocketmq.client.producer")

# MessageConst / MixAll names.
PROPERTY_CLUSTER: Final = "CLUSTER"  # set by the broker on every stored message
PROPERTY_CORRELATION_ID: Final = "CORRELATION_ID"
PROPERTY_REPLY_TO_CLIENT: Final = "REPLY_TO_CLIENT"
PROPERTY_MESSAGE_TTL: Final = "TTL"
PROPERTY_MESSAGE_TYPE: Final = "MSG_TYPE"
PROPERTY_REPLY_MESSAGE_ARRIVE_TIME: Final = "ARRIVE_TIME"
MESSAGE_TYPE_REPLY: Final = "reply"


def request_properties(
    properties: Mapping[str, str], correlation_id: str, client_id: str, timeout_ms: int
) -> dict[str, str]:
    """A request's properties (``prepareSendRequest``): its own, plus who waits for the reply
    and how long. Java sets no MSG_TYPE on a request; only a reply carries one."""
    out = dict(properties)
    out[PROPERTY_CORRELATION_ID] = correlation_id
    out[PROPERTY_REPLY_TO_CLIENT] = client_id
    out[PROPERTY_MESSAGE_TTL] = str(timeout_ms)
    return out


def new_correlation_id(rng: random.Random | None = None) -> str:
    """``CorrelationIdUtil.createCorrelationId``: a random UUID (from ``rng``: a seeded
    client's, the same in every run)."""
    if rng is None:
        return str(uuid.uuid4())
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def create_reply(
    request: ReceivedMessage | Message, body: bytes, *, properties: Mapping[str, str] | None = None
) -> Message:
    """The reply to ``request`` (``MessageUtil.createReplyMessage``): to the request's
    cluster's reply topic, with ``MSG_TYPE=reply`` and the request's correlation id, requester
    and TTL. ``ClientUsageError`` when the request has no ``CLUSTER`` (a message a broker did
    not store: only stored requests can be answered)."""
    cluster = request.properties.get(PROPERTY_CLUSTER)
    if cluster is None:
        raise ClientUsageError(
            f"create reply message fail, requestMessage error, property[{PROPERTY_CLUSTER}] "
            "is null."
        )
    props = dict(properties or {})
    props[PROPERTY_MESSAGE_TYPE] = MESSAGE_TYPE_REPLY
    for name in (PROPERTY_CORRELATION_ID, PROPERTY_REPLY_TO_CLIENT, PROPERTY_MESSAGE_TTL):
        value = request.properties.get(name)
        if value is not None:  # Java puts null, which the properties string leaves out
            props[name] = value
    return Message(topic=reply_topic(cluster), body=body, properties=props)


def reply_from_push(header: ReplyMessageRequestHeader, body: bytes) -> ReceivedMessage:
    """The pushed reply as a message (``receiveReplyMessage``): the body inflated when the
    replier compressed it, ``ARRIVE_TIME`` added."""
    if header.sys_flag & MessageSysFlag.COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as e:  # Java logs it and hands the body over as it came
            log.warning("reply body does not inflate: %s", e)
    props = decode_properties(header.properties) if header.properties else {}
    props[PROPERTY_REPLY_MESSAGE_ARRIVE_TIME] = str(int(time.time() * 1000))
    return ReceivedMessage(
        topic=header.topic,
        body=body,
        tags=props.get("TAGS"),
        keys=tuple(props["KEYS"].split()) if "KEYS" in props else (),
        properties=props,
        msg_id=props.get(PROPERTY_UNIQ_KEY, ""),
        offset_msg_id="",  # a pushed reply has no place in a store (yet)
        queue=MessageQueue(header.topic, "", header.queue_id),
        queue_offset=0,
        commitlog_offset=0,
        flag=header.flag,
        sys_flag=header.sys_flag,
        born_timestamp=header.born_timestamp,
        born_host=header.born_host,
        store_timestamp=header.store_timestamp,
        store_host=header.store_host,
        reconsume_times=header.reconsume_times or 0,
    )


class PendingRequests:
    """Requests waiting for their reply, by correlation id (``RequestFutureHolder``); the
    handler of PUSH_REPLY_MESSAGE_TO_CLIENT."""

    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[ReceivedMessage]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, correlation_id: str) -> asyncio.Future[ReceivedMessage]:
        future: asyncio.Future[ReceivedMessage] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        return future

    def discard(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    def deliver(self, reply: ReceivedMessage) -> bool:
        """Hand ``reply`` to its request; False (and a warning) when no request waits for it
        (late: the request timed out; or not ours)."""
        correlation_id = reply.properties.get(PROPERTY_CORRELATION_ID)
        future = self._waiting.pop(correlation_id, None) if correlation_id else None
        if future is None or future.done():
            log.warning(
                "receive reply message, but not matched any request, CorrelationId: %s, "
                "reply from host: %s",
                correlation_id,
                reply.born_host,
            )
            return False
        future.set_result(reply)
        return True

    async def on_push(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT from a broker: SUCCESS once read (matched or not, as
        Java answers), SYSTEM_ERROR when the push does not decode."""
        try:
            header = ReplyMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        except RemoteProtocolError as e:
            log.warning("%s: malformed reply push: %s", conn.addr, e)
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                "process reply message fail",
                language=CLIENT_LANGUAGE,
                version=CLIENT_VERSION,
            )
        self.deliver(reply_from_push(header, cmd.body or b""))
        return cmd.make_response(
            ResponseCode.SUCCESS, language=CLIENT_LANGUAGE, version=CLIENT_VERSION
        )
