"""CHECK_CLIENT_CONFIG (46): a consumer with a non-TAG subscription asks, at start, whether
this broker can filter by it (RocketMQ's ``ClientManageProcessor.checkClientConfig``).

TAG (or no subscription): SUCCESS. SQL92 with property filters off: SYSTEM_ERROR, "The broker
does not support consumer to filter message by SQL92". An expression that does not compile:
SUBSCRIPTION_PARSE_FAILED (23) with the parser's message as the remark."""

from __future__ import annotations

import msgspec

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.handlers.common import error_response
from pocketmq.broker.protocol import RemotingCommand, ResponseCode
from pocketmq.broker.protocol.errors import MalformedBodyError
from pocketmq.broker.protocol.headers import SubscriptionData, decode_json_body
from pocketmq.broker.remoting.server import Connection

__all__ = ["CheckClientRequestBody", "handle_check_client_config"]


class CheckClientRequestBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """RocketMQ's ``CheckClientRequestBody``."""

    client_id: str | None = None
    group: str | None = None
    subscription_data: SubscriptionData | None = None


def handle_check_client_config(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        body = decode_json_body(request.body or b"{}", CheckClientRequestBody)
    except MalformedBodyError as error:
        return request.make_response(ResponseCode.SYSTEM_ERROR, str(error))
    subscription = body.subscription_data
    if subscription is not None:
        try:
            broker.pulls.filter_of(subscription.sub_string, subscription.expression_type)
        except BrokerError as error:
            return error_response(request, error)
    return request.make_response(ResponseCode.SUCCESS)
