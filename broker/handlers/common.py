"""What every request handler shares."""

from __future__ import annotations

from pocketmq.broker.protocol import RemotingCommand, ResponseCode

__all__ = ["bad_request"]


def bad_request(request: RemotingCommand, error: Exception) -> RemotingCommand:
    """A header or body that does not parse: SYSTEM_ERROR naming what was wrong, as RocketMQ
    answers a request it cannot decode."""
    return request.make_response(ResponseCode.SYSTEM_ERROR, f"bad request: {error}")
