"""The RocketMQ 5.x gRPC front-end (``apache.rocketmq.v2.MessagingService``), so the official
5.x SDKs work against pocketmq. Needs the ``grpc`` extra (from a pocketmq checkout:
``python3 -m pip install -e '.[grpc]'``); see docs/grpc.md."""

from __future__ import annotations

__all__ = ["grpc_available"]


def grpc_available() -> bool:
    """Whether grpcio and the official protocol stubs are installed."""
    try:
        from pocketmq.broker.grpc import stubs  # noqa: F401
    except ImportError:
        return False
    return True
