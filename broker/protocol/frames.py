"""Remoting frames: ``RemotingCommand`` and its sans-I/O encoder and decoder.

Wire layout (all integers big-endian)::

    offset  size  field
    0       4     length        bytes after this field = 4 + header length + body length
    4       4     type|hlen     top byte: SerializeType; low 3 bytes: header length
    8       H     header        JSON text (type 0) or ROCKETMQ binary (type 1)
    8+H     rest  body          opaque bytes; none when the command has no body

ROCKETMQ binary header::

    code      2  signed short          (codes above 32767, e.g. POP, cannot be sent this way)
    language  1  LanguageCode byte
    version   2  signed short
    opaque    4  int
    flag      4  int
    remark    4+n  int length + UTF-8; length 0 = no remark
    extFields 4+m  int total length, then entries: short key length + key, int value length + value

Each peer answers in its own configured type, so decoders must accept both types on every
frame. Round trips lose only what the wire cannot tell apart: an empty body comes back as
``None``; in ROCKETMQ format an empty remark comes back as ``None`` and an empty
``ext_fields`` as ``None``.
"""

from __future__ import annotations

import struct
from typing import Annotated, Final

import msgspec
from msgspec import UNSET, UnsetType

from ._json import LenientJSONError, canonical_json, loads_lenient
from .codes import DEFAULT_VERSION, RPC_ONEWAY, RPC_TYPE, LanguageCode, SerializeType
from .errors import FrameTooLargeError, LocalProtocolError, MalformedFrameError

__all__ = [
    "FRAME_SIZE_MAX",
    "FrameDecoder",
    "RemotingCommand",
    "decode_frame",
    "encode_frame",
    "encode_frame_parts",
    "encode_json_success",
    "mark_protocol_type",
]

# Netty's LengthFieldBasedFrameDecoder(maxFrameLength=16 MiB) counts the 4-byte length field
# in the frame, so the largest accepted length *value* is FRAME_SIZE_MAX - 4.
FRAME_SIZE_MAX: Final = 16 * 1024 * 1024
_HEADER_LENGTH_MAX: Final = 0xFFFFFF  # 3 bytes in the type|hlen word
_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**31 - 1

_PREFIX = struct.Struct(">II")  # length, type|hlen
_U32 = struct.Struct(">I")
_RMQ_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remark length
_RMQ_FIXED_SIZE: Final = _RMQ_FIXED.size + 4  # + extFields length = 21
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_LANGUAGE_NAMES: Final = {int(lang): lang.name for lang in LanguageCode}
_LANGUAGE_BY_NAME: Final = {lang.name: lang for lang in LanguageCode}
_LANGUAGE_BY_CODE: Final = {int(lang): lang for lang in LanguageCode}
# JSON "language" may be a name, an ordinal (fastjson accepts both) or absent (Java: JAVA).
_LANGUAGE_FROM_JSON: Final[dict[object, LanguageCode]] = {None: LanguageCode.JAVA}
_LANGUAGE_FROM_JSON.update(_LANGUAGE_BY_NAME)
_LANGUAGE_FROM_JSON.update(_LANGUAGE_BY_CODE.items())
_JavaInt = Annotated[int, msgspec.Meta(ge=_INT_MIN, le=_INT_MAX)]
# Members as plain globals: an enum attribute lookup per frame is a measurable share.
_OTHER: Final = LanguageCode.OTHER
_JSON: Final = SerializeType.JSON


class RemotingCommand(msgspec.Struct, kw_only=True):
    """One request or response.

    ``ext_fields`` holds the custom-header fields as strings (see ``headers.py``); ``None``
    means "no map" and is omitted from JSON, ``{}`` is written as ``"extFields":{}``.
    ``serialize_type`` is the format the command was decoded from, and the default format
    ``encode_frame`` uses for it. An unknown language (name or byte) decodes as ``OTHER``.
    """

    code: int
    language: LanguageCode = LanguageCode.JAVA
    version: int = DEFAULT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] | None = None
    body: bytes | None = None
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def make_response(
        self,
        code: int,
        remark: str | None = None,
        *,
        ext_fields: dict[str, str] | None = None,
        body: bytes | None = None,
        language: LanguageCode = LanguageCode.JAVA,
        version: int = DEFAULT_VERSION,
    ) -> RemotingCommand:
        """A response to this request: same opaque, response bit set, same serialize type.

        The language and version are the responder's own (a Java broker says JAVA and its
        version). Answering in the request's format is always safe for the peer.
        """
        return RemotingCommand(
            code=code,
            language=language,
            version=version,
            opaque=self.opaque,
            flag=RPC_TYPE,
            remark=remark,
            ext_fields=ext_fields,
            body=body,
            serialize_type=self.serialize_type,
        )


# -- JSON header ---------------------------------------------------------------------------


class _JsonHeaderOut(msgspec.Struct, gc=False):  # transient, never in a cycle
    # Field order is fastjson's alphabetical order; UNSET fields are left out like nulls.
    code: int
    extFields: dict[str, str] | UnsetType
    flag: int
    language: str
    opaque: int
    remark: str | UnsetType
    serializeTypeCurrentRPC: str
    version: int


class _JsonHeaderIn(msgspec.Struct, gc=False):  # transient, never in a cycle
    # Missing keys take Java's field defaults; unknown keys are ignored. Anything else
    # (out-of-range ints, non-string ext values, ...) fails here and takes the lenient path.
    code: _JavaInt = 0
    extFields: dict[str, str] | None = None
    flag: _JavaInt = 0
    language: str | _JavaInt | None = None
    opaque: _JavaInt = 0
    remark: str | None = None
    version: _JavaInt = 0


_json_encode = msgspec.json.Encoder().encode
_json_decode_header = msgspec.json.Decoder(_JsonHeaderIn).decode


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    code, opaque, flag, version = cmd.code, cmd.opaque, cmd.flag, cmd.version
    if not (  # Java ints (literals: cheaper than globals on this per-frame path)
        -2147483648 <= code <= 2147483647
        and -2147483648 <= opaque <= 2147483647
        and -2147483648 <= flag <= 2147483647
        and -2147483648 <= version <= 2147483647
    ):
        raise LocalProtocolError(
            "code, opaque, flag and version must fit a Java int",
            value=(code, opaque, flag, version),
        )
    ext = cmd.ext_fields
    remark = cmd.remark
    # Positional: this runs for every frame, and keyword arguments cost a measurable share.
    return _json_encode(
        _JsonHeaderOut(
            code,
            UNSET if ext is None else ext,
            flag,
            _LANGUAGE_NAMES.get(cmd.language, "OTHER"),
            opaque,
            UNSET if remark is None else remark,
            "JSON",
            version,
        )
    )


def _language_from_json(value: object) -> LanguageCode:
    if isinstance(value, bool) or not isinstance(value, str | int | None):
        return LanguageCode.OTHER
    return _LANGUAGE_FROM_JSON.get(value, LanguageCode.OTHER)


# Headers that are not standard JSON (single quotes, unquoted keys: what some old clients send)
# go to the pure-Python reader, about 0.2 us a byte on the event loop: bounded, so one frame
# cannot stall every other client (a real header is well under 1 KiB).
LENIENT_HEADER_MAX = 64 * 1024


def _decode_json_header(data: memoryview, body: bytes | None) -> RemotingCommand:
    try:
        h = _json_decode_header(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        if len(data) > LENIENT_HEADER_MAX:
            raise MalformedFrameError(
                f"header of {len(data)} bytes is not standard JSON; a header that is not is "
                f"read only up to {LENIENT_HEADER_MAX} bytes",
                offset=8,
            ) from None
        return _decode_json_header_lenient(data, body)
    except RecursionError:
        raise MalformedFrameError("header JSON nests too deeply", offset=8) from None
    return RemotingCommand(
        code=h.code,
        language=_LANGUAGE_FROM_JSON.get(h.language, _OTHER),
        version=h.version,
        opaque=h.opaque,
        flag=h.flag,
        remark=h.remark,
        ext_fields=h.extFields,
        body=body,
        serialize_type=_JSON,
    )


def _java_int(obj: dict[str, object], key: str) -> int:
    value = obj.get(key)
    if value is None:
        return 0
    if isinstance(value, bool):
        raise MalformedFrameError(f"header key {key!r} is a boolean", offset=8)
    if isinstance(value, str):  # fastjson coerces numeric strings into int fields
        try:
            value = int(value, 10)
        except ValueError:
            raise MalformedFrameError(
                f"header key {key!r} is not an integer: {value!r}", offset=8
            ) from None
    if not isinstance(value, int) or not _INT_MIN <= value <= _INT_MAX:
        raise MalformedFrameError(f"header key {key!r} is not a Java int: {value!r}", offset=8)
    return value


def _as_java_string(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return canonical_json(value)  # nested JSON: keep its text


def _decode_json_header_lenient(data: memoryview, body: bytes | None) -> RemotingCommand:
    try:
        obj = loads_lenient(data)
    except LenientJSONError as e:
        raise MalformedFrameError(f"header is not JSON: {e}", offset=8) from None
    if not isinstance(obj, dict):
        raise MalformedFrameError(f"header is JSON {type(obj).__name__}, not an object", offset=8)
    ext_obj = obj.get("extFields")
    ext: dict[str, str] | None
    if ext_obj is None:
        ext = None
    elif isinstance(ext_obj, dict):
        # a null value is a missing value for every Java reader of the map
        ext = {k: _as_java_string(v) for k, v in ext_obj.items() if v is not None}
    else:
        raise MalformedFrameError("extFields is not an object", offset=8)
    remark = obj.get("remark")
    return RemotingCommand(
        code=_java_int(obj, "code"),
        language=_language_from_json(obj.get("language")),
        version=_java_int(obj, "version"),
        opaque=_java_int(obj, "opaque"),
        flag=_java_int(obj, "flag"),
        remark=None if remark is None else _as_java_string(remark),
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType.JSON,
    )


# -- ROCKETMQ header -----------------------------------------------------------------------


def _encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    parts = [b""]  # placeholder for the fixed part
    ext = cmd.ext_fields
    ext_len = 0
    try:
        if ext:
            for key, value in ext.items():
                kb = key.encode()
                vb = value.encode()
                parts.append(_I16.pack(len(kb)))
                parts.append(kb)
                parts.append(_I32.pack(len(vb)))
                parts.append(vb)
                ext_len += 6 + len(kb) + len(vb)
        parts[0] = (
            _RMQ_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, len(remark))
            + remark
            + _I32.pack(ext_len)
        )
    except struct.error as e:
        # e.g. code 200050 (POP) or version > 32767 do not fit a short; Java would truncate
        raise LocalProtocolError(f"value does not fit the ROCKETMQ header: {e}") from None
    except AttributeError as e:
        raise LocalProtocolError(f"extFields keys and values must be str: {e}") from None
    return b"".join(parts)


def _utf8(raw: bytes) -> str:
    # Java decodes with replacement characters; try the fast strict decode first.
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def _decode_rocketmq_header(header: bytes, body: bytes | None) -> RemotingCommand:
    # Offsets in errors are relative to the frame (the header starts at byte 8).
    end = len(header)
    if end < _RMQ_FIXED_SIZE:
        raise MalformedFrameError(
            f"ROCKETMQ header of {end} bytes is shorter than {_RMQ_FIXED_SIZE}", offset=8
        )
    code, lang, version, opaque, flag, remark_len = _RMQ_FIXED.unpack_from(header, 0)
    p = _RMQ_FIXED.size
    if remark_len < 0 or remark_len > end - p - 4:
        raise MalformedFrameError(
            f"remark length {remark_len} exceeds the header", offset=8 + p - 4
        )
    remark = _utf8(header[p : p + remark_len]) if remark_len else None
    p += remark_len
    (ext_len,) = _I32.unpack_from(header, p)
    p += 4
    if ext_len < 0 or ext_len > end - p:
        raise MalformedFrameError(
            f"extFields length {ext_len} exceeds the header", offset=8 + p - 4
        )
    ext: dict[str, str] | None = None
    if ext_len:
        ext = {}
        e = p + ext_len
        unpack_i16 = _I16.unpack_from
        unpack_i32 = _I32.unpack_from
        while p < e:
            if e - p < 6:
                raise MalformedFrameError("truncated extFields entry", offset=8 + p)
            (klen,) = unpack_i16(header, p)
            p += 2
            if klen < 0 or klen > e - p - 4:
                raise MalformedFrameError(f"extFields key length {klen}", offset=8 + p - 2)
            q = p + klen
            (vlen,) = unpack_i32(header, q)
            v = q + 4
            if vlen < 0 or vlen > e - v:
                raise MalformedFrameError(f"extFields value length {vlen}", offset=8 + q)
            p = v + vlen
            try:
                ext[header[q - klen : q].decode()] = header[v:p].decode()
            except UnicodeDecodeError:
                ext[_utf8(header[q - klen : q])] = _utf8(header[v:p])
    # Bytes after extFields are ignored, as Java does.
    return RemotingCommand(
        code=code,
        language=_LANGUAGE_BY_CODE.get(lang, LanguageCode.OTHER),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


# -- frames --------------------------------------------------------------------------------


def mark_protocol_type(header_length: int, serialize_type: SerializeType) -> bytes:
    """The frame's second word (Java ``markProtocolType``): type byte, then 3-byte length."""
    if not 0 <= header_length <= _HEADER_LENGTH_MAX:
        raise LocalProtocolError("header length does not fit 3 bytes", value=header_length)
    return _U32.pack((int(serialize_type) << 24) | header_length)


def encode_frame_parts(
    cmd: RemotingCommand, serialize_type: SerializeType | None = None
) -> list[bytes]:
    """The frame as ``[prefix + header, body]`` (or just the first) for ``writelines``.

    Saves copying a large body. ``serialize_type`` defaults to ``cmd.serialize_type``.
    """
    stype = cmd.serialize_type if serialize_type is None else serialize_type
    # Plain int comparisons: an enum attribute lookup per frame is a measurable share.
    if stype == 0:  # JSON
        header = _encode_json_header(cmd)
    elif stype == 1:  # ROCKETMQ
        header = _encode_rocketmq_header(cmd)
    else:
        raise LocalProtocolError("unknown serialize type", value=stype)
    hlen = len(header)
    if hlen > _HEADER_LENGTH_MAX:
        raise LocalProtocolError("header longer than 16 MiB - 1 bytes", value=hlen)
    body = cmd.body
    if not body:
        return [_PREFIX.pack(4 + hlen, (stype << 24) | hlen) + header]
    length = 4 + hlen + len(body)
    if length > _INT_MAX:
        raise LocalProtocolError("frame longer than a Java int", value=length)
    return [_PREFIX.pack(length, (stype << 24) | hlen) + header, body]


def encode_json_success(opaque: int, ext_json: bytes, version: int = DEFAULT_VERSION) -> bytes:
    """``encode_frame(request.make_response(SUCCESS, ext_fields=ext))`` for a JSON request,
    where ``ext_json`` is ``ext`` already encoded as a JSON object: the frame of the answer a
    broker sends most (one per send), without a command and a header struct per answer.
    ``opaque`` is the request's (a Java int, as decoded)."""
    header = (
        b'{"code":0,"extFields":%b,"flag":1,"language":"JAVA","opaque":%d,'
        b'"serializeTypeCurrentRPC":"JSON","version":%d}' % (ext_json, opaque, version)
    )
    hlen = len(header)
    if hlen > _HEADER_LENGTH_MAX:
        raise LocalProtocolError("header longer than 16 MiB - 1 bytes", value=hlen)
    return _PREFIX.pack(4 + hlen, hlen) + header


def encode_frame(cmd: RemotingCommand, serialize_type: SerializeType | None = None) -> bytes:
    """Encode one whole frame. ``serialize_type`` defaults to ``cmd.serialize_type``."""
    return b"".join(encode_frame_parts(cmd, serialize_type))


def _decode_at(
    buf: memoryview, pos: int, frame_size_max: int
) -> tuple[RemotingCommand, int] | None:
    """Decode the frame starting at ``buf[pos]``; return it and where it ends, or None."""
    avail = len(buf) - pos
    if avail < 8:
        if avail >= 4:
            _check_length(_U32.unpack_from(buf, pos)[0], frame_size_max)
        return None
    length, word = _PREFIX.unpack_from(buf, pos)
    if length + 4 > frame_size_max or length < 4:  # the checks of _check_length, inline
        _check_length(length, frame_size_max)
    if avail < 4 + length:
        return None
    hlen = word & _HEADER_LENGTH_MAX
    if hlen > length - 4:
        raise MalformedFrameError(
            f"bad header length {hlen} for a frame length of {length}", offset=4
        )
    hend = pos + 8 + hlen
    end = pos + 4 + length
    body = bytes(buf[hend:end]) if end > hend else None
    stype = word >> 24
    if stype == 0:  # JSON
        return _decode_json_header(buf[pos + 8 : hend], body), end
    if stype == 1:  # ROCKETMQ
        return _decode_rocketmq_header(bytes(buf[pos + 8 : hend]), body), end
    raise MalformedFrameError(f"unknown serialize type {stype}", offset=4)


def _check_length(length: int, frame_size_max: int) -> None:
    # Fail as soon as the length is known, before buffering the frame (Netty failFast).
    if length + 4 > frame_size_max:
        raise FrameTooLargeError(length + 4, frame_size_max)
    if length < 4:
        raise MalformedFrameError(
            f"length field {length} leaves no room for the header length", offset=0
        )


def decode_frame(
    buf: bytes | bytearray | memoryview, *, frame_size_max: int = FRAME_SIZE_MAX
) -> tuple[RemotingCommand, int] | None:
    """Decode the frame at the start of ``buf``.

    Returns ``(command, bytes consumed)``, or ``None`` when ``buf`` holds only part of a frame.
    Raises ``FrameTooLargeError`` or ``MalformedFrameError`` (the stream is then unusable).
    """
    with memoryview(buf) as mv:
        return _decode_at(mv.cast("B") if mv.format != "B" else mv, 0, frame_size_max)


class FrameDecoder:
    """Incremental decoder: ``feed`` it bytes as they arrive, get whole commands back.

    Leftover bytes stay in one ``bytearray`` that is compacted once per ``feed`` call, so a
    read holding many frames costs linear time. After an error the decoder stays broken:
    every later ``feed`` raises the same error. The commands decoded by the failing call
    before the bad frame are on the error's ``frames`` attribute.
    """

    __slots__ = ("_buf", "_error", "frame_size_max")

    def __init__(self, *, frame_size_max: int = FRAME_SIZE_MAX) -> None:
        self.frame_size_max = frame_size_max
        self._buf = bytearray()
        self._error: Exception | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buf)

    def discard(self) -> None:
        """Let go of the bytes of a partial frame now (the stream is being closed)."""
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        if self._error is not None:
            raise self._error
        buf = self._buf
        if not buf and type(data) is bytes:
            # A read that starts a frame (nearly every read): its whole standard-JSON frames
            # are decoded here, on the bytes as read; the rest goes the general way.
            frames, start = self._whole_json_frames(data)
            if start == len(data):
                return frames
            if start:  # a view, not a copy: the general way copies what it keeps once
                data = memoryview(data)[start:]
        else:
            frames = []
        # With nothing buffered, decode straight from ``data`` and keep only its tail.
        source: bytes | bytearray | memoryview = buf if buf else data
        if buf:
            buf += data
        pos = 0
        try:
            with memoryview(source) as mv:
                view = mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv
                while True:
                    result = _decode_at(view, pos, self.frame_size_max)
                    if result is None:
                        break
                    cmd, pos = result
                    frames.append(cmd)
                if source is not buf:
                    buf += view[pos:]
                    pos = 0
        except (FrameTooLargeError, MalformedFrameError) as e:
            e.frames = list(frames)
            self._error = e
            raise
        if pos:
            del buf[:pos]
        return frames

    def _whole_json_frames(self, data: bytes) -> tuple[list[RemotingCommand], int]:
        """``_decode_at`` in a loop over ``data``, for the frames it decodes without an error
        or the lenient reader: whole, JSON, the header standard JSON. Returns them and where
        the first other one (or the end) starts: ``feed`` decodes from there the general way
        (which raises the error a bad frame gets)."""
        frames: list[RemotingCommand] = []
        pos, size, limit = 0, len(data), self.frame_size_max
        unpack, decode = _PREFIX.unpack_from, _json_decode_header
        while size - pos >= 8:
            length, word = unpack(data, pos)
            end = pos + 4 + length
            hend = pos + 8 + word
            # type 0 (JSON), a length within the limit, the header inside the frame, all read
            if word >> 24 or length + 4 > limit or hend > end or end > size:
                break
            try:
                h = decode(data[pos + 8 : hend])
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                break
            frames.append(
                RemotingCommand(
                    code=h.code,
                    language=_LANGUAGE_FROM_JSON.get(h.language, _OTHER),
                    version=h.version,
                    opaque=h.opaque,
                    flag=h.flag,
                    remark=h.remark,
                    ext_fields=h.extFields,
                    body=data[hend:end] if end > hend else None,
                    serialize_type=_JSON,
                )
            )
            pos = end
        return frames, pos
