"""The generated protocol modules of ``apache.rocketmq.v2``, taken from the official client.

pocketmq copies no ``.proto`` file: the messages and the service base class come from the
``rocketmq-python-client`` wheel (the ``grpc`` extra), so they are the very ones the
official SDK speaks. Importing ``rocketmq`` itself would run the client's ``__init__``, which
creates ``~/logs/rocketmq_python/`` and reconfigures logging; a broker wants neither, so only
the ``rocketmq.grpc_protocol`` subpackage is loaded, under a transient package shell that is
removed again (a later ``import rocketmq`` in the same process then works as usual).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

__all__ = ["definition_pb2", "service_pb2", "service_pb2_grpc", "MissingGrpcError"]


class MissingGrpcError(ImportError):
    """The gRPC extra is not installed."""


def _load() -> tuple[types.ModuleType, types.ModuleType, types.ModuleType]:
    try:
        import grpc  # noqa: F401
    except ImportError as error:
        raise MissingGrpcError(
            "the gRPC front-end needs grpcio, which is not installed (from a pocketmq "
            "checkout: python3 -m pip install -e '.[grpc]')"
        ) from error
    names = ("definition_pb2", "service_pb2", "service_pb2_grpc")
    if "rocketmq" in sys.modules:  # the application imported the client already
        return tuple(importlib.import_module(f"rocketmq.grpc_protocol.{n}") for n in names)  # type: ignore[return-value]
    spec = importlib.util.find_spec("rocketmq")
    if spec is None or not spec.submodule_search_locations:
        raise MissingGrpcError(
            "the gRPC front-end needs the official protocol stubs (rocketmq-python-client), "
            "which are not installed (from a pocketmq checkout: python3 -m pip install -e "
            "'.[grpc]')"
        )
    shell = types.ModuleType("rocketmq")
    shell.__path__ = list(spec.submodule_search_locations)
    sys.modules["rocketmq"] = shell
    try:
        protocol_spec = importlib.util.find_spec("rocketmq.grpc_protocol")
        assert protocol_spec is not None and protocol_spec.submodule_search_locations
        # The subpackage's own __init__ only re-exports; a shell avoids nothing but keeps the
        # import order (definition before service) explicit.
        protocol = types.ModuleType("rocketmq.grpc_protocol")
        protocol.__path__ = list(protocol_spec.submodule_search_locations)
        sys.modules["rocketmq.grpc_protocol"] = protocol
        modules = tuple(importlib.import_module(f"rocketmq.grpc_protocol.{n}") for n in names)
    finally:
        sys.modules.pop("rocketmq", None)
        sys.modules.pop("rocketmq.grpc_protocol", None)
    return modules  # type: ignore[return-value]


definition_pb2, service_pb2, service_pb2_grpc = _load()
