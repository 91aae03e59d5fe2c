"""The RocketMQ 5.x gRPC front-end (``apache.rocketmq.v2.MessagingService``), so the official
5.x SDKs work against pocketmq. Needs the ``grpc`` extra (from a pocketmq checkout:
``python3 -m pip install -e '.[grpc]'``); see docs/grpc.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["grpc_available"]


def grpc_available() -> bool:
    """Whether grpcio, protobuf and the official protocol stubs are installed; found without
    importing them (together ~15 MiB resident, loaded only once the front is used, ``lazy.py``)."""
    for name in ("grpc", "google.protobuf"):
        try:
            if importlib.util.find_spec(name) is None:
                return False
        except ImportError:  # "google" itself missing
            return False
    # Not find_spec("rocketmq.grpc_protocol"): that would run the client package's __init__
    # (see stubs.py); the stubs are files in its folder.
    client = importlib.util.find_spec("rocketmq")
    if client is None or not client.submodule_search_locations:
        return False
    return any(
        (Path(folder) / "grpc_protocol" / "service_pb2.py").is_file()
        for folder in client.submodule_search_locations
    )
