"""Sans-I/O codecs of RocketMQ's 4.x remoting protocol, shared by the broker and the SDK.

Imports only the standard library, msgspec and the store's pure record format (``store.record``
and the modules it shares, see tests/test_layering.py): no asyncio, no sockets, no store engine.
Modules:

* ``codes``: request/response/language codes, flag bits and other wire numbers
* ``frames``: ``RemotingCommand``, ``encode_frame``, ``decode_frame``, ``FrameDecoder``
* ``headers``: typed custom headers (extFields) and JSON bodies
* ``message_codec``: properties string, batch body, pulled commitlog records
* ``errors``: the ``ProtocolError`` tree
"""

from __future__ import annotations

from .codes import (
    DEFAULT_VERSION,
    RPC_ONEWAY,
    RPC_TYPE,
    LanguageCode,
    MQVersion,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from .errors import (
    FrameTooLargeError,
    LocalProtocolError,
    MalformedBodyError,
    MalformedFrameError,
    MalformedHeaderError,
    ProtocolError,
    RemoteProtocolError,
)
from .frames import (
    FRAME_SIZE_MAX,
    FrameDecoder,
    RemotingCommand,
    decode_frame,
    encode_frame,
    encode_frame_parts,
    encode_json_success,
)
from .headers import REQUEST_HEADERS, RemotingHeader, decode_json_body, encode_json_body

__all__ = [
    "DEFAULT_VERSION",
    "FRAME_SIZE_MAX",
    "REQUEST_HEADERS",
    "RPC_ONEWAY",
    "RPC_TYPE",
    "FrameDecoder",
    "FrameTooLargeError",
    "LanguageCode",
    "LocalProtocolError",
    "MQVersion",
    "MalformedBodyError",
    "MalformedFrameError",
    "MalformedHeaderError",
    "ProtocolError",
    "RemoteProtocolError",
    "RemotingCommand",
    "RemotingHeader",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "decode_frame",
    "decode_json_body",
    "encode_frame",
    "encode_frame_parts",
    "encode_json_success",
    "encode_json_body",
]
