"""Typed custom headers (the ``extFields`` of a command) and JSON bodies.

Header rules, as Java's ``RemotingCommand`` applies them:

* encode: every non-null field becomes ``extFields[name] = String.valueOf(value)``: ints and
  longs in decimal, booleans ``"true"``/``"false"``; ``None`` is omitted.
* decode: unknown keys are ignored; a Boolean is true iff the text is ``"true"`` in any case
  (never an error). Where Java would log and leave the field null, we are explicit: a
  missing required field, or a number that does not parse or does not fit, raises
  ``MalformedHeaderError`` naming the key and value. An empty string counts as missing for
  non-string fields (ROCKETMQ-format peers and the Go client send ``""`` for "unset").

Attribute names are snake_case; the wire key of each field is its Java name (``rename``).
Bodies are msgspec Structs with fastjson's key names; ``decode_json_body`` also reads the
non-standard JSON fastjson writes (unquoted integer map keys etc., see ``_json.py``).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Final, Self, TypeVar

import msgspec
import msgspec.inspect as mi

from ._json import JAVA_ENUM, LenientJSONError, decode_json
from .codes import RequestCode
from .errors import MalformedBodyError, MalformedHeaderError

__all__ = [
    "BatchAck",
    "BatchAckMessageRequestBody",
    # header machinery
    "Int",
    "Long",
    "REQUEST_HEADERS",
    "RemotingHeader",
    "parse_send_message_header",
    "send_result_fields",
    # send
    "SendMessageRequestHeader",
    "SendMessageRequestHeaderV2",
    "SendMessageResponseHeader",
    "ReplyMessageRequestHeader",
    # pull and offsets
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "UpdateConsumerOffsetRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "ViewMessageRequestHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    # clients
    "GetConsumerListByGroupRequestHeader",
    "UnregisterClientRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    # transactions
    "EndTransactionRequestHeader",
    "CheckTransactionStateRequestHeader",
    # name server and admin
    "GetRouteInfoRequestHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "UnregisterBrokerRequestHeader",
    "CreateTopicRequestHeader",
    # POP (5.x)
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "AckMessageRequestHeader",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "PeekMessageRequestHeader",
    "NotificationRequestHeader",
    "NotificationResponseHeader",
    "RecallMessageRequestHeader",
    "RecallMessageResponseHeader",
    # bodies
    "BrokerData",
    "ClusterInfo",
    "ConsumerData",
    "ConsumerListBody",
    "DataVersion",
    "HeartbeatData",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "MessageQueue",
    "ProducerData",
    "QueueData",
    "RegisterBrokerBody",
    "SubscriptionData",
    "SubscriptionGroupConfig",
    "TopicConfig",
    "TopicConfigSerializeWrapper",
    "TopicRouteData",
    "UnlockBatchRequestBody",
    "decode_json_body",
    "encode_json_body",
]

T = TypeVar("T")

# Java's Integer and Long. msgspec checks the bounds when decoding JSON bodies;
# from_ext_fields checks them for headers.
Int = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Long = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]

_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")  # Integer.parseInt / Long.parseLong syntax
_SMALL_INT_MAX: Final = 1023
_SMALL_INTS: Final = {str(i): i for i in range(_SMALL_INT_MAX + 1)}  # canonical text -> value
_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _java_names(**overrides: str) -> Callable[[str], str]:
    """msgspec ``rename``: camelCase of the attribute unless listed in ``overrides``."""

    def rename(name: str) -> str:
        return overrides.get(name) or _camel(name)

    return rename


def _java_double(value: float) -> str:
    """``Double.toString``: plain between 1e-3 and 1e7, else ``d.dddE<n>``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)  # shortest digits, always with a fraction part ("5.0")
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    power = len(digits) - 1 + exponent
    return f"{'-' if sign else ''}{text[0]}.{text[1:] or '0'}E{power}"


# -- headers ---------------------------------------------------------------------------------

# Field kinds of the compiled spec.
_STR, _INT, _BOOL, _FLOAT = range(4)


def _kind_of(t: mi.Type, where: str) -> tuple[int, int, int, bool]:
    """(kind, low, high, nullable) for a header field's type."""
    nullable = False
    if isinstance(t, mi.UnionType):
        others = [u for u in t.types if not isinstance(u, mi.NoneType)]
        nullable = len(others) < len(t.types)
        if len(others) != 1:
            raise TypeError(f"{where}: header fields must be one scalar type, optionally | None")
        t = others[0]
    if isinstance(t, mi.StrType):
        return _STR, 0, 0, nullable
    if isinstance(t, mi.BoolType):
        return _BOOL, 0, 0, nullable
    if isinstance(t, mi.IntType):
        low = _LONG_MIN if t.ge is None else t.ge
        high = _LONG_MAX if t.le is None else t.le
        return _INT, low, high, nullable
    if isinstance(t, mi.FloatType):
        return _FLOAT, 0, 0, nullable
    raise TypeError(f"{where}: unsupported header field type {t!r}")


class RemotingHeader(msgspec.Struct, frozen=True, kw_only=True, rename=_java_names()):
    """Base of every custom header. Subclasses declare fields of type str, Int, Long, bool or
    float (optionally ``| None``); a field without a default is required. Wire keys are the
    camelCase attribute names unless a subclass passes its own ``rename``."""

    _encode_ext: ClassVar[Callable[[Any], dict[str, str]] | None] = None
    _decode_ext: ClassVar[Callable[[Any], Any] | None] = None

    def to_ext_fields(self) -> dict[str, str]:
        """The extFields map Java would build: strings only, ``None`` fields left out."""
        encode = type(self).__dict__.get("_encode_ext")
        if encode is None:
            encode = type(self)._compile()[0]
        return encode(self)

    @classmethod
    def from_ext_fields(cls, ext: Mapping[str, str] | None) -> Self:
        """Parse an extFields map; see the module docstring for the rules."""
        decode = cls.__dict__.get("_decode_ext")
        if decode is None:
            decode = cls._compile()[1]
        return decode({} if ext is None else ext)

    @classmethod
    def _fields_spec(cls) -> tuple[Callable[[Any], dict[str, str]], Callable[[Any], Any]]:
        """The class's compiled (encoder, decoder); TypeError for an unsupported field."""
        encode, decode = cls.__dict__.get("_encode_ext"), cls.__dict__.get("_decode_ext")
        if encode is None or decode is None:
            return cls._compile()
        return encode, decode

    @classmethod
    def _compile(
        cls, keys: Mapping[str, str] | None = None
    ) -> tuple[Callable[[Any], dict[str, str]], Callable[[Any], Any]]:
        """Compile this class's encoder and decoder: straight-line code, one block per field,
        so every header of every request costs no loop over a spec (these run once or more per
        message). The rules are those of the module docstring, checked in field order.

        ``keys`` (attribute -> wire key) compiles a codec of this class for other wire keys
        (not cached); by default the class's own codec is compiled and cached on it."""
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        enc = ["def encode(self):", "    out = {}"]
        dec = ["def decode(ext):", "    get = ext.get"]
        args = []
        for i, f in enumerate(info.fields):
            attr, required = f.name, f.required
            key = f.encode_name if keys is None else keys[attr]
            if not required and f.default is msgspec.NODEFAULT:
                raise TypeError(f"{cls.__name__}.{attr}: header defaults must be plain values")
            kind, low, high, _ = _kind_of(f.type, f"{cls.__name__}.{attr}")
            value = f"self.{attr}"
            if kind == _STR:
                text = "v"
            elif kind == _INT:
                text = 'f"{v:d}"'  # digits for IntEnum/IntFlag values too
            elif kind == _BOOL:
                text = '"true" if v else "false"'
            else:
                text = "_java_double(v)"
            enc += [f"    v = {value}", "    if v is not None:", f"        out[{key!r}] = {text}"]
            var = f"v{i}"
            args.append(f"{attr}={var}")
            dec.append(f"    raw = get({key!r})")
            # An empty string counts as missing for every kind but str.
            dec.append("    if raw is None:" if kind == _STR else "    if not raw:")
            if required:
                dec.append(f"        raise _Error({key!r}, raw, 'required field is missing')")
            else:
                dec.append(f"        {var} = _defaults[{i}]")
            if kind == _STR:
                dec += ["    else:", f"        {var} = raw"]
            elif kind == _INT:
                dec.append("    else:")
                if low <= 0 and high >= _SMALL_INT_MAX:
                    # Most values are small (queue ids, flags, counts): one lookup, no parse.
                    dec += [f"        {var} = _small_int(raw)", f"        if {var} is None:"]
                    dec += _int_lines(var, key, low, high, indent=12)
                else:
                    dec += _int_lines(var, key, low, high, indent=8)
            elif kind == _BOOL:
                # Boolean.parseBoolean; the two usual spellings without a lower() call
                dec += [
                    "    else:",
                    f"        {var} = raw == 'true' or (raw != 'false' and raw.lower() == 'true')",
                ]
            else:
                dec += ["    else:", f"        {var} = _float({key!r}, raw)"]
        enc.append("    return out")
        dec.append(f"    return _cls({', '.join(args)})")
        namespace: dict[str, Any] = {
            "_cls": cls,
            "_Error": MalformedHeaderError,
            "_int_text": _INTEGER_TEXT.fullmatch,
            "_small_int": _SMALL_INTS.get,
            "_java_double": _java_double,
            "_float": _header_float,
            "_defaults": tuple(f.default for f in info.fields),
        }
        exec("\n".join(enc) + "\n" + "\n".join(dec), namespace)  # noqa: S102 - our own code
        if keys is None:
            cls._encode_ext = namespace["encode"]  # cached per class (ClassVars, not fields)
            cls._decode_ext = namespace["decode"]
        return namespace["encode"], namespace["decode"]


def _int_lines(var: str, key: str, low: int, high: int, *, indent: int) -> list[str]:
    """Compiled code: ``raw`` parsed as Integer.parseInt / Long.parseLong would, into ``var``."""
    pad = " " * indent
    return [
        f"{pad}if not (raw.isascii() and raw.isdigit()) and not _int_text(raw):",
        f"{pad}    raise _Error({key!r}, raw, 'not an integer')",
        f"{pad}{var} = int(raw)",
        f"{pad}if not {low} <= {var} <= {high}:",
        f"{pad}    raise _Error({key!r}, raw, 'out of range [{low}, {high}]')",
    ]


def _header_float(key: str, raw: str) -> float:
    try:
        if "_" in raw:  # Python-only syntax
            raise ValueError(raw)
        return float(raw)
    except ValueError:
        raise MalformedHeaderError(key, raw, "not a number") from None


# -- send ------------------------------------------------------------------------------------


class SendMessageRequestHeader(
    RemotingHeader, frozen=True, kw_only=True, rename=_java_names(broker_name="bname")
):
    """SEND_MESSAGE (10) with Java's long names; the canonical form of every send header."""

    producer_group: str
    topic: str
    default_topic: str  # auto-create template, "TBW102"
    default_topic_queue_nums: Int
    queue_id: Int
    sys_flag: Int  # MessageSysFlag
    born_timestamp: Long  # ms
    flag: Int  # user flag
    properties: str | None = None  # properties string (message_codec)
    reconsume_times: Int | None = None
    unit_mode: bool = False  # primitive in 4.9.x: always sent
    max_reconsume_times: Int | None = None
    batch: bool = False  # primitive in 4.9.x: always sent
    broker_name: str | None = None


_V2_KEYS: Final = {
    "producer_group": "a",
    "topic": "b",
    "default_topic": "c",
    "default_topic_queue_nums": "d",
    "queue_id": "e",
    "sys_flag": "f",
    "born_timestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsume_times": "j",
    "unit_mode": "k",
    "max_reconsume_times": "l",
    "batch": "m",
    "broker_name": "n",  # 4.9.5+
}


class SendMessageRequestHeaderV2(RemotingHeader, frozen=True, kw_only=True, rename=_V2_KEYS):
    """SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320): the same fields, keys ``a``..``n``."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Int
    queue_id: Int
    sys_flag: Int
    born_timestamp: Long
    flag: Int
    properties: str | None = None
    reconsume_times: Int | None = None
    unit_mode: bool = False
    max_reconsume_times: Int | None = None
    batch: bool = False
    broker_name: str | None = None

    @classmethod
    def from_v1(cls, header: SendMessageRequestHeader) -> SendMessageRequestHeaderV2:
        return cls(**msgspec.structs.asdict(header))

    def to_v1(self) -> SendMessageRequestHeader:
        return SendMessageRequestHeader(**msgspec.structs.asdict(self))


# The broker reads V2 keys for these codes and long names for SEND_MESSAGE.
_V2_SEND_CODES: Final = frozenset({RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})


def parse_send_message_header(code: int, ext: Mapping[str, str] | None) -> SendMessageRequestHeader:
    """The send header of a SEND_MESSAGE / _V2 / SEND_BATCH_MESSAGE request, as V1."""
    if code in _V2_SEND_CODES:
        # SendMessageRequestHeaderV2.from_ext_fields(ext).to_v1() in one step (every send):
        # the same fields, rules and errors, read from the V2 keys straight into V1.
        if ext is None:
            return _send_v2_as_v1({})
        if len(ext) == 13 and type(ext) is dict:
            return _usual_send_v2(ext)
        return _send_v2_as_v1(ext)
    return SendMessageRequestHeader.from_ext_fields(ext)


_send_v2_as_v1: Callable[[Mapping[str, str]], SendMessageRequestHeader] = (
    SendMessageRequestHeader._compile(_V2_KEYS)[1]
)
# The keys a V2 send carries but "l" (maxReconsumeTimes, sent only for a consumer's retry):
# what the SDK and RocketMQ's producers send for every message.
_USUAL_V2_KEYS: Final = tuple("abcdefghijkmn")
_usual_v2_values = operator.itemgetter(*_USUAL_V2_KEYS)
_BOOLEANS: Final = {"true": True, "false": False}


def _usual_send_v2(ext: dict[str, str]) -> SendMessageRequestHeader:
    """``_send_v2_as_v1`` for the usual send: the 13 usual keys, small canonical numbers, a
    born time of digits, booleans spelled "true"/"false". The values are taken in one call and
    checked together; anything else (a key missing, a number that needs the full parse, a
    value that is an error) goes to ``_send_v2_as_v1``, which gives the same header or error."""
    try:
        a, b, c, d, e, f, g, h, i, j, k, m, n = _usual_v2_values(ext)
    except KeyError:
        return _send_v2_as_v1(ext)
    small = _SMALL_INTS.get
    queue_nums, queue_id, sys_flag, flag, reconsume = (
        small(d),
        small(e),
        small(f),
        small(h),
        small(j),
    )
    unit_mode, batch = _BOOLEANS.get(k), _BOOLEANS.get(m)
    if (
        queue_nums is None
        or queue_id is None
        or sys_flag is None
        or flag is None
        or reconsume is None
        or unit_mode is None
        or batch is None
        or len(g) > 18  # up to 18 digits: never past a Java long
        or not g.isdigit()
        or not g.isascii()
    ):
        return _send_v2_as_v1(ext)
    return SendMessageRequestHeader(
        producer_group=a,
        topic=b,
        default_topic=c,
        default_topic_queue_nums=queue_nums,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=int(g),
        flag=flag,
        properties=i,
        reconsume_times=reconsume,
        unit_mode=unit_mode,
        batch=batch,
        broker_name=n,
    )


class SendMessageResponseHeader(
    RemotingHeader,
    frozen=True,
    kw_only=True,
    rename=_java_names(msg_region="MSG_REGION", trace_on="TRACE_ON"),
):
    """Send response. A SUCCESS response must carry it: Java reads extFields without a null check."""

    msg_id: str  # offsetMsgId (32 or 56 hex chars); comma-joined for a batch
    queue_id: Int
    queue_offset: Long  # first one for a batch
    transaction_id: str | None = None  # the message's UNIQ_KEY
    batch_uniq_id: str | None = None  # 5.x
    recall_handle: str | None = None  # 5.x
    msg_region: str | None = None  # broker regionId, "DefaultRegion"
    trace_on: bool | None = None


def send_result_fields(
    ext: Mapping[str, str] | None,
) -> tuple[str, int, int, str | None, str | None]:
    """``SendMessageResponseHeader.from_ext_fields(ext)`` as what a producer keeps of it: msg
    id, queue id, queue offset, transaction id and region. The answer to every send: the usual
    shape (a queue id up to 1023, an offset of up to 18 digits) is read straight from the map;
    anything else goes through ``from_ext_fields``, with the same values and errors."""
    if ext is not None:
        msg_id = ext.get("msgId")
        queue_id = _SMALL_INTS.get(ext.get("queueId", ""))
        offset = ext.get("queueOffset", "")
        if (
            msg_id is not None
            and queue_id is not None
            and len(offset) <= 18
            and offset.isdigit()
            and offset.isascii()
        ):
            return msg_id, queue_id, int(offset), ext.get("transactionId"), ext.get("MSG_REGION")
    header = SendMessageResponseHeader.from_ext_fields(ext)
    return (
        header.msg_id,
        header.queue_id,
        header.queue_offset,
        header.transaction_id,
        header.msg_region,
    )


class ReplyMessageRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326), broker -> requester: the reply's send header (as the
    replier sent it) with where it came from and when the broker took it; the body is the
    reply's body. Java's ReplyMessageRequestHeader (long names, primitives always sent)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: Int
    queue_id: Int
    sys_flag: Int
    born_timestamp: Long
    flag: Int
    properties: str | None = None
    reconsume_times: Int | None = None
    unit_mode: bool = False
    born_host: str  # the replier, "ip:port"
    store_host: str  # the broker, "ip:port"
    store_timestamp: Long


# -- pull and offsets -------------------------------------------------------------------------


class PullMessageRequestHeader(
    RemotingHeader, frozen=True, kw_only=True, rename=_java_names(broker_name="bname")
):
    """PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361)."""

    consumer_group: str
    topic: str
    queue_id: Int
    queue_offset: Long
    max_msg_nums: Int
    sys_flag: Int  # PullSysFlag
    commit_offset: Long
    suspend_timeout_millis: Long
    subscription: str | None = None
    sub_version: Long
    expression_type: str | None = None  # "TAG" / "SQL92"
    max_msg_bytes: Int | None = None  # 5.x
    broker_name: str | None = None


class PullMessageResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    suggest_which_broker_id: Long  # 0 = master
    next_begin_offset: Long
    min_offset: Long
    max_offset: Long  # one past the last message
    offset_delta: Long | None = None  # 5.x static topics
    topic_sys_flag: Int | None = None
    group_sys_flag: Int | None = None
    forbidden_type: Int | None = None


class QueryConsumerOffsetRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    consumer_group: str
    topic: str
    queue_id: Int
    set_zero_if_not_found: bool | None = None  # 5.x


class QueryConsumerOffsetResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    offset: Long


class UpdateConsumerOffsetRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    consumer_group: str
    topic: str
    queue_id: Int
    commit_offset: Long


class GetMaxOffsetRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str
    queue_id: Int
    committed: bool = True  # 5.x; Java's default


class GetMaxOffsetResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    offset: Long


class GetMinOffsetRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str
    queue_id: Int


class GetMinOffsetResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    offset: Long


class SearchOffsetRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str
    queue_id: Int
    timestamp: Long  # ms
    boundary_type: str | None = None  # 5.x: "lower" / "upper"


class SearchOffsetResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    offset: Long


class GetEarliestMsgStoretimeRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str
    queue_id: Int


class GetEarliestMsgStoretimeResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    timestamp: Long


class ViewMessageRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """VIEW_MESSAGE_BY_ID (33): ``offset`` is the commitlog offset; the body answers one record."""

    offset: Long
    topic: str | None = None


class QueryMessageRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str
    key: str
    max_num: Int
    begin_timestamp: Long
    end_timestamp: Long


class QueryMessageResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    index_last_update_timestamp: Long
    index_last_update_phyoffset: Long


# -- clients ---------------------------------------------------------------------------------


class GetConsumerListByGroupRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    consumer_group: str


class UnregisterClientRequestHeader(
    RemotingHeader, frozen=True, kw_only=True, rename=_java_names(client_id="clientID")
):
    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None


class NotifyConsumerIdsChangedRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    consumer_group: str


class ConsumerSendMsgBackRequestHeader(
    RemotingHeader, frozen=True, kw_only=True, rename=_java_names(broker_name="bname")
):
    offset: Long  # the message's commitlog offset
    group: str
    delay_level: Int  # 0: the broker uses 3 + reconsumeTimes
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: Int | None = None
    broker_name: str | None = None


# -- transactions ----------------------------------------------------------------------------


class EndTransactionRequestHeader(
    RemotingHeader, frozen=True, kw_only=True, rename=_java_names(broker_name="bname")
):
    """END_TRANSACTION (37), oneway; the remark carries the producer's exception text."""

    topic: str | None = None  # 5.x
    producer_group: str
    tran_state_table_offset: Long  # SendResult.queueOffset
    commit_log_offset: Long  # from offsetMsgId
    commit_or_rollback: Int  # TransactionType: 0 unknown, 8 commit, 12 rollback
    from_transaction_check: bool = False
    msg_id: str  # the client's UNIQ_KEY
    transaction_id: str | None = None
    broker_name: str | None = None


class CheckTransactionStateRequestHeader(
    RemotingHeader, frozen=True, kw_only=True, rename=_java_names(broker_name="bname")
):
    """CHECK_TRANSACTION_STATE (39), broker -> producer, oneway; body = the half record."""

    topic: str | None = None  # 5.x
    tran_state_table_offset: Long
    commit_log_offset: Long
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    broker_name: str | None = None


# -- name server and admin -------------------------------------------------------------------


class GetRouteInfoRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    topic: str
    # 4.9.4+: ask for standard JSON (quoted brokerAddrs keys); so does request version >= 401
    accept_standard_json_only: bool | None = None


class RegisterBrokerRequestHeader(
    RemotingHeader, frozen=True, kw_only=True, rename=_java_names(zone_name="__ZONE_NAME")
):
    broker_name: str
    broker_addr: str  # "ip:10911"
    cluster_name: str
    ha_server_addr: str  # "ip:10912"
    broker_id: Long  # 0 = master
    heartbeat_timeout_millis: Long | None = None
    enable_acting_master: bool | None = None
    compressed: bool = False
    body_crc32: Int = 0  # 0 = not checked
    zone_name: str | None = None


class RegisterBrokerResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    ha_server_addr: str | None = None
    master_addr: str | None = None


class UnregisterBrokerRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: Long


class CreateTopicRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """UPDATE_AND_CREATE_TOPIC (17)."""

    topic: str
    default_topic: str
    read_queue_nums: Int
    write_queue_nums: Int
    perm: Int  # Perm bits
    topic_filter_type: str  # "SINGLE_TAG" / "MULTI_TAG"
    topic_sys_flag: Int | None = None
    order: bool = False
    attributes: str | None = None  # 5.x
    force: bool | None = None  # 5.x


# -- POP (5.x) -------------------------------------------------------------------------------


class PopMessageRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    consumer_group: str
    topic: str
    queue_id: Int  # -1 = any
    max_msg_nums: Int
    invisible_time: Long
    poll_time: Long
    born_time: Long
    init_mode: Int
    exp_type: str | None = None
    exp: str | None = None
    order: bool | None = None
    attempt_id: str | None = None


class PopMessageResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    pop_time: Long
    invisible_time: Long
    revive_qid: Int
    rest_num: Long
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None


class AckMessageRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    consumer_group: str
    topic: str
    queue_id: Int
    extra_info: str
    offset: Long


class ChangeInvisibleTimeRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    consumer_group: str
    topic: str
    queue_id: Int
    extra_info: str
    offset: Long
    invisible_time: Long


class ChangeInvisibleTimeResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    pop_time: Long
    invisible_time: Long
    revive_qid: Int


class PeekMessageRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """PEEK_MESSAGE (200052): read what a POP would hand out, lending nothing."""

    consumer_group: str
    topic: str
    queue_id: Int  # -1 = every queue
    max_msg_nums: Int


class NotificationRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """NOTIFICATION (200054): is there something to POP? Held up to ``poll_time`` if not."""

    consumer_group: str
    topic: str
    queue_id: Int  # -1 = every queue
    poll_time: Long
    born_time: Long
    order: bool | None = None
    attempt_id: str | None = None


class NotificationResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    has_msg: bool
    polling_full: bool = False


# -- RECALL (5.x) ----------------------------------------------------------------------------


class RecallMessageRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    """RECALL_MESSAGE (370): cancel a delayed message by the handle its send returned."""

    topic: str
    recall_handle: str
    producer_group: str | None = None


class RecallMessageResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    msg_id: str


# Request code -> header class for the requests that carry a custom header.
REQUEST_HEADERS: Final[Mapping[int, type[RemotingHeader]]] = {
    RequestCode.SEND_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeaderV2,
    RequestCode.SEND_BATCH_MESSAGE: SendMessageRequestHeaderV2,
    RequestCode.PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.LITE_PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
    RequestCode.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
    RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageRequestHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
    RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    RequestCode.END_TRANSACTION: EndTransactionRequestHeader,
    RequestCode.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
    RequestCode.REGISTER_BROKER: RegisterBrokerRequestHeader,
    RequestCode.UNREGISTER_BROKER: UnregisterBrokerRequestHeader,
    RequestCode.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
    RequestCode.POP_MESSAGE: PopMessageRequestHeader,
    RequestCode.ACK_MESSAGE: AckMessageRequestHeader,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: ChangeInvisibleTimeRequestHeader,
    RequestCode.PEEK_MESSAGE: PeekMessageRequestHeader,
    RequestCode.NOTIFICATION: NotificationRequestHeader,
    RequestCode.RECALL_MESSAGE: RecallMessageRequestHeader,
}


# -- JSON bodies -----------------------------------------------------------------------------


def encode_json_body(body: msgspec.Struct) -> bytes:
    """Standard JSON (integer map keys quoted, as fastjson's BrowserCompatible mode)."""
    return msgspec.json.encode(body)


def decode_json_body(data: bytes | bytearray | memoryview | str, type_: type[T]) -> T:
    """Decode a JSON body, accepting fastjson's non-standard output; ``MalformedBodyError``."""
    try:
        return decode_json(data, type_)
    except LenientJSONError as e:
        raise MalformedBodyError(f"not JSON: {e.reason}", offset=None) from None
    except msgspec.ValidationError as e:
        raise MalformedBodyError(f"unexpected JSON for {type_!r}: {e}") from None


class MessageQueue(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Hashable, so it can go in sets and dict keys."""

    topic: str
    broker_name: str
    queue_id: Int


class LockBatchRequestBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """LOCK_BATCH_MQ (41) body."""

    consumer_group: str
    client_id: str
    only_this_broker: bool = False
    mq_set: list[MessageQueue] = []


class UnlockBatchRequestBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """UNLOCK_BATCH_MQ (42) body; same shape as the lock request."""

    consumer_group: str
    client_id: str
    only_this_broker: bool = False
    mq_set: list[MessageQueue] = []


class LockBatchResponseBody(
    msgspec.Struct, frozen=True, kw_only=True, rename={"lock_ok_mq_set": "lockOKMQSet"}
):
    lock_ok_mq_set: list[MessageQueue] = []


class ConsumerListBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """GET_CONSUMER_LIST_BY_GROUP (38) response body (``GetConsumerListByGroupResponseBody``)."""

    consumer_id_list: list[str] = []


class ProducerData(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    group_name: str


class SubscriptionData(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    class_filter_mode: bool = False
    topic: str
    sub_string: str  # "*" or "a || b"
    tags_set: list[str] = []
    code_set: list[int] = []  # String.hashCode() of each tag
    sub_version: Long = 0  # ms timestamp
    expression_type: str = "TAG"  # ExpressionType


# Java enums as names, read from names or ordinals (rocketmq-client-cpp writes ordinals);
# the constants in RocketMQ's declaration order.
ConsumeTypeName = Annotated[
    str, msgspec.Meta(extra={JAVA_ENUM: ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")})
]
MessageModelName = Annotated[str, msgspec.Meta(extra={JAVA_ENUM: ("BROADCASTING", "CLUSTERING")})]
ConsumeFromWhereName = Annotated[
    str,
    msgspec.Meta(
        extra={
            JAVA_ENUM: (
                "CONSUME_FROM_LAST_OFFSET",
                "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",  # deprecated
                "CONSUME_FROM_MIN_OFFSET",  # deprecated
                "CONSUME_FROM_MAX_OFFSET",  # deprecated
                "CONSUME_FROM_FIRST_OFFSET",
                "CONSUME_FROM_TIMESTAMP",
            )
        }
    ),
]
TopicFilterTypeName = Annotated[str, msgspec.Meta(extra={JAVA_ENUM: ("SINGLE_TAG", "MULTI_TAG")})]


class ConsumerData(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    group_name: str
    consume_type: ConsumeTypeName
    message_model: MessageModelName
    consume_from_where: ConsumeFromWhereName  # deprecated names too
    subscription_data_set: list[SubscriptionData] = []
    unit_mode: bool = False


class HeartbeatData(
    msgspec.Struct, frozen=True, kw_only=True, rename=_java_names(client_id="clientID")
):
    """HEART_BEAT (34) body."""

    client_id: str  # "ip@instanceName"
    producer_data_set: list[ProducerData] = []
    consumer_data_set: list[ConsumerData] = []
    heartbeat_fingerprint: int = 0  # 5.x; non-zero selects heartbeat V2
    without_sub: bool = False  # 5.x


class QueueData(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """One broker's queues of a topic. Before 4.9.0 ``topicSysFlag`` was spelt ``topicSynFlag``;
    both are read, only the new name is written (omitted defaults equal Java's zeros)."""

    broker_name: str
    read_queue_nums: Int
    write_queue_nums: Int
    perm: Int  # Perm bits; 6 = read + write
    topic_sys_flag: Int = 0
    topic_syn_flag: Int | None = None  # read-only alias, folded into topic_sys_flag

    def __post_init__(self) -> None:
        if self.topic_syn_flag is not None:
            if not self.topic_sys_flag:
                msgspec.structs.force_setattr(self, "topic_sys_flag", self.topic_syn_flag)
            msgspec.structs.force_setattr(self, "topic_syn_flag", None)


class BrokerData(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]  # broker id -> "ip:port"; 0 = master
    zone_name: str | None = None
    enable_acting_master: bool = False


class TopicRouteData(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """GET_ROUTEINFO_BY_TOPIC (105) response body."""

    order_topic_conf: str | None = None  # "brokerA:4;brokerB:4"
    queue_datas: list[QueueData] = []
    broker_datas: list[BrokerData] = []
    filter_server_table: dict[str, list[str]] = {}
    topic_queue_mapping_by_broker: dict[str, Any] | None = None  # 5.x static topics


class ClusterInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """GET_BROKER_CLUSTER_INFO (106) body; Java writes it with unquoted integer keys."""

    broker_addr_table: dict[str, BrokerData] = {}
    cluster_addr_table: dict[str, list[str]] = {}


class DataVersion(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    timestamp: Long = 0
    counter: Long = 0  # an AtomicLong in Java, written as a number
    state_version: Long = 0  # 5.x


class TopicConfig(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    topic_name: str
    read_queue_nums: Int = 16
    write_queue_nums: Int = 16
    perm: Int = 6
    topic_filter_type: TopicFilterTypeName = "SINGLE_TAG"
    topic_sys_flag: Int = 0
    order: bool = False
    attributes: dict[str, str] = {}  # 5.x


class SubscriptionGroupConfig(msgspec.Struct, kw_only=True, rename="camel"):
    """A consumer group's settings: the body of UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) and
    the values of GET_ALL_SUBSCRIPTIONGROUP_CONFIG, every field with RocketMQ's default (a
    RocketMQ broker replaces the whole config with what it is sent)."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: Int = 1
    retry_max_times: Int = 16  # retryMaxTimes
    broker_id: Long = 0
    which_broker_when_consume_slowly: Long = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: Int = 0
    consume_timeout_minute: Int = 15
    attributes: dict[str, str] = {}  # 5.x


class TopicConfigSerializeWrapper(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    topic_config_table: dict[str, TopicConfig] = {}
    data_version: DataVersion = DataVersion()


class RegisterBrokerBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """REGISTER_BROKER (103) body, uncompressed form only (header ``compressed=false``)."""

    topic_config_serialize_wrapper: TopicConfigSerializeWrapper = TopicConfigSerializeWrapper()
    filter_server_list: list[str] = []


class BatchAck(msgspec.Struct, kw_only=True):
    """One entry of BatchAckMessageRequestBody.acks: fastjson writes the short names, and reads
    the long ones too (BatchAck's @JSONField alternateNames)."""

    c: str | None = None
    consumerGroup: str | None = None  # noqa: N815
    t: str | None = None
    topic: str | None = None
    r: str | None = None
    retry: str | None = None
    so: int | None = None
    startOffset: int | None = None  # noqa: N815
    q: int | None = None
    queueId: int | None = None  # noqa: N815
    rq: int | None = None
    reviveQueueId: int | None = None  # noqa: N815
    pt: int | None = None
    popTime: int | None = None  # noqa: N815
    it: int | None = None
    invisibleTime: int | None = None  # noqa: N815
    b: str | None = None  # BitSet.toByteArray() as base64: bit i acknowledges startOffset + i
    bitSet: str | None = None  # noqa: N815


class BatchAckMessageRequestBody(msgspec.Struct, kw_only=True):
    """BATCH_ACK_MESSAGE (200151)'s body."""

    brokerName: str | None = None  # noqa: N815
    acks: list[BatchAck] | None = None
