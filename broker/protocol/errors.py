"""Errors raised by the remoting codecs.

    ProtocolError
     +-- LocalProtocolError        we were asked to encode something the wire cannot carry
     +-- RemoteProtocolError       the peer sent bytes we cannot accept
          +-- FrameTooLargeError   the length field announces a frame over the limit
          +-- MalformedFrameError  the frame is broken (bad lengths, header not JSON, ...)
          +-- MalformedHeaderError a custom-header field in extFields is missing or unparsable
          +-- MalformedBodyError   a body (JSON, batch, pulled records) cannot be decoded

A ``FrameTooLargeError`` or ``MalformedFrameError`` means the byte stream is lost: the Java
peer closes the channel (``NettyDecoder``), and so should we. The other two concern a single
command; the connection can go on (answer with an error code).
"""

from __future__ import annotations

__all__ = [
    "FrameTooLargeError",
    "LocalProtocolError",
    "MalformedBodyError",
    "MalformedFrameError",
    "MalformedHeaderError",
    "ProtocolError",
    "RemoteProtocolError",
]


class ProtocolError(Exception):
    """Base class of every codec error."""


class LocalProtocolError(ProtocolError, ValueError):
    """A value cannot be encoded (e.g. a code outside a signed short in ROCKETMQ format)."""

    def __init__(self, reason: str, *, value: object = None) -> None:
        self.reason = reason
        self.value = value
        super().__init__(reason if value is None else f"{reason}: {value!r}")


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol.

    ``frames`` holds the commands a ``FrameDecoder.feed`` call decoded before it hit the
    error, so an adapter can still dispatch them before closing the connection.
    """

    frames: list[object]

    def __init__(self, text: str) -> None:
        self.frames = []
        super().__init__(text)


class FrameTooLargeError(RemoteProtocolError):
    """``size_bytes`` counts the 4-byte length field, as Netty does; over ``size_bytes_max``."""

    def __init__(self, size_bytes: int, size_bytes_max: int) -> None:
        self.size_bytes = size_bytes
        self.size_bytes_max = size_bytes_max
        super().__init__(f"frame of {size_bytes} bytes exceeds the maximum of {size_bytes_max}")


class MalformedFrameError(RemoteProtocolError):
    """A frame that cannot be decoded. ``offset`` is relative to the start of the frame."""

    def __init__(self, reason: str, *, offset: int | None = None) -> None:
        self.reason = reason
        self.offset = offset
        where = "" if offset is None else f" at byte {offset}"
        super().__init__(f"malformed frame{where}: {reason}")


class MalformedHeaderError(RemoteProtocolError, ValueError):
    """extFields key ``field`` is missing (``value is None``) or holds an unparsable value."""

    def __init__(self, field: str, value: str | None, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"header field {field!r} = {value!r}: {reason}")


class MalformedBodyError(RemoteProtocolError, ValueError):
    """A body cannot be decoded. ``offset`` is relative to the start of the body, if known."""

    def __init__(self, reason: str, *, offset: int | None = None) -> None:
        self.reason = reason
        self.offset = offset
        where = "" if offset is None else f" at byte {offset}"
        super().__init__(f"malformed body{where}: {reason}")
