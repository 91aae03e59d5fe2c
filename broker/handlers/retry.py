"""CONSUMER_SEND_MSG_BACK (36): a consumer gives a message back for a later retry, or the DLQ
(the rules are the retry service's, ``broker/services/retry.py``)."""

from __future__ import annotations

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.handlers.common import bad_request, error_response
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.headers import ConsumerSendMsgBackRequestHeader
from pocketmq.broker.remoting.server import Connection

__all__ = ["handle_consumer_send_back"]


def handle_consumer_send_back(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    try:
        broker.retry.send_back(
            header.offset,
            header.group,
            delay_level=header.delay_level,
            origin_msg_id=header.origin_msg_id,
            max_reconsume_times=header.max_reconsume_times,
            remark=request.remark,
        )
    except BrokerError as error:
        return error_response(request, error)
    return request.make_response(ResponseCode.SUCCESS)
