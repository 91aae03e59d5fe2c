"""The per-message fast paths agree with the general code they shortcut.

Header codecs are compiled per class; record decoding has a shortcut for the common record;
the JSON header, the producer's send request, the broker's offset message ids and property
parsing are written out by hand. Each is checked here against a straightforward reference
(the general code, or the rule as written before), on generated and corrupted inputs, errors
included. Also: client timeouts (one timer per connection) and the iterator's slots.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import struct
import time
import zlib
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.broker.protocol import (
    LanguageCode,
    MalformedHeaderError,
    RemotingCommand,
    RequestCode,
    SerializeType,
    decode_frame,
    encode_frame,
    encode_json_success,
)
from pocketmq.broker.protocol import headers as H
from pocketmq.broker.protocol import message_codec as MC
from pocketmq.broker.protocol.codes import MessageSysFlag
from pocketmq.broker.protocol.errors import MalformedBodyError
from pocketmq.broker.protocol.frames import _encode_json_header, _JsonHeaderOut
from pocketmq.client import (
    ConsumeResult,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from pocketmq.client.connection import Connection, make_request
from pocketmq.client.errors import CorruptMessageError, RequestTimeoutError

from .test_client_fake_server import fake_cluster, wait_until
from .test_protocol_headers import HEADER_CLASSES

# -- header codecs: the generic loop they replace ----------------------------------------------

_INTEGER_TEXT = re.compile(r"[+-]?[0-9]+")


def _spec(cls: type[H.RemotingHeader]) -> list[tuple[str, str, int, bool, int, int]]:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    out = []
    for f in info.fields:
        kind, low, high, _ = H._kind_of(f.type, f.name)
        out.append((f.name, f.encode_name, kind, f.required, low, high))
    return out


def reference_to_ext(header: H.RemotingHeader) -> dict[str, str]:
    out: dict[str, str] = {}
    for attr, key, kind, _, _, _ in _spec(type(header)):
        value = getattr(header, attr)
        if value is None:
            continue
        if kind == H._STR:
            out[key] = value
        elif kind == H._INT:
            out[key] = f"{value:d}"
        elif kind == H._BOOL:
            out[key] = "true" if value else "false"
        else:
            out[key] = H._java_double(value)
    return out


def reference_from_ext(cls: type[H.RemotingHeader], ext: dict[str, str]) -> H.RemotingHeader:
    kwargs: dict[str, Any] = {}
    for attr, key, kind, required, low, high in _spec(cls):
        raw = ext.get(key)
        if raw is None or (not raw and kind != H._STR):
            if required:
                raise MalformedHeaderError(key, raw, "required field is missing")
            continue
        if kind == H._STR:
            kwargs[attr] = raw
        elif kind == H._INT:
            if not (raw.isascii() and raw.isdigit()) and not _INTEGER_TEXT.fullmatch(raw):
                raise MalformedHeaderError(key, raw, "not an integer")
            value = int(raw)
            if not low <= value <= high:
                raise MalformedHeaderError(key, raw, f"out of range [{low}, {high}]")
            kwargs[attr] = value
        elif kind == H._BOOL:
            kwargs[attr] = raw.lower() == "true"
        else:
            try:
                if "_" in raw:
                    raise ValueError(raw)
                kwargs[attr] = float(raw)
            except ValueError:
                raise MalformedHeaderError(key, raw, "not a number") from None
    return cls(**kwargs)


def outcome(fn: Any, *args: Any) -> Any:
    try:
        return ("ok", fn(*args))
    except MalformedHeaderError as e:
        return ("error", str(e))


# Values that hit every branch: small ints (the cached ones and just past), signs, zeros,
# spaces, non-ASCII digits, Java int/long limits, booleans in any case, floats, junk.
HEADER_TEXT = st.one_of(
    st.sampled_from(
        [
            "", "0", "1", "7", "1023", "1024", "-1", "+5", "007", " 5", "5 ", "٣", "1_0",
            "2147483647", "2147483648", "-2147483648", "-2147483649", "9223372036854775807",
            "9223372036854775808", "true", "TRUE", "True", "false", "FALSE", "yes", "1.5",
            "NaN", "-Infinity", "1e3", "abc",
        ]
    ),
    st.integers(-(2**64), 2**64).map(str),
    st.text(max_size=6),
)  # fmt: skip


@settings(max_examples=30)
@given(data=st.data())
@pytest.mark.parametrize("cls", HEADER_CLASSES, ids=lambda c: c.__name__)
def test_compiled_header_decoder_matches_the_generic_loop(
    cls: type[H.RemotingHeader], data: st.DataObject
) -> None:
    keys = [key for _, key, *_ in _spec(cls)]
    ext = data.draw(st.dictionaries(st.sampled_from(keys + ["other"]), HEADER_TEXT))
    assert outcome(cls.from_ext_fields, ext) == outcome(reference_from_ext, cls, ext)


@settings(max_examples=20)
@given(data=st.data())
@pytest.mark.parametrize("cls", HEADER_CLASSES, ids=lambda c: c.__name__)
def test_compiled_header_encoder_matches_the_generic_loop(
    cls: type[H.RemotingHeader], data: st.DataObject
) -> None:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    strategies = {}
    for f in info.fields:
        kind, low, high, nullable = H._kind_of(f.type, f.name)
        base = {
            H._STR: st.text(max_size=8),
            H._INT: st.integers(low, high),
            H._BOOL: st.booleans(),
            H._FLOAT: st.floats(allow_nan=False),
        }[kind]
        strategies[f.name] = st.none() | base if nullable else base
    header = data.draw(st.builds(cls, **strategies))
    ext = header.to_ext_fields()
    assert ext == reference_to_ext(header)
    assert list(ext) == list(reference_to_ext(header))  # same order: same JSON bytes


@settings(max_examples=300)
@given(st.dictionaries(st.sampled_from(list("abcdefghijklmn") + ["x"]), HEADER_TEXT))
def test_v2_send_header_parses_as_v2_then_v1(ext: dict[str, str]) -> None:
    def two_steps(ext: dict[str, str]) -> H.SendMessageRequestHeader:
        return H.SendMessageRequestHeaderV2.from_ext_fields(ext).to_v1()

    fast = outcome(H.parse_send_message_header, RequestCode.SEND_MESSAGE_V2, ext)
    assert fast == outcome(two_steps, ext)


_USUAL_V2_TEXT = st.one_of(
    HEADER_TEXT, st.sampled_from(["0", "3", "true", "false", "1795716035808", "9" * 18, "9" * 19])
)


@settings(max_examples=400)
@given(
    st.fixed_dictionaries({key: _USUAL_V2_TEXT for key in "abcdefghijkmn"}),
    st.sampled_from([None, "l", "x"]),
)
def test_usual_v2_send_header_parses_as_the_general_one(
    ext: dict[str, str], swap: str | None
) -> None:
    # the 13 keys of the usual send (its shortcut), or 13 with one of them swapped for another
    if swap is not None:
        del ext["abcdefghijkmn"[len(ext["a"]) % 13]]
        ext[swap] = "5"
    assert len(ext) == 13

    def two_steps(ext: dict[str, str]) -> H.SendMessageRequestHeader:
        return H.SendMessageRequestHeaderV2.from_ext_fields(ext).to_v1()

    fast = outcome(H.parse_send_message_header, RequestCode.SEND_MESSAGE_V2, ext)
    assert fast == outcome(two_steps, ext)


def test_v2_send_header_of_the_sdk() -> None:
    producer = Producer("g", namesrv="127.0.0.1:1")
    header = producer._header(MessageQueue("T", "b", 3), "WAIT\x01true\x02", flag=5)
    ext = header.to_ext_fields()
    parsed = H.parse_send_message_header(RequestCode.SEND_MESSAGE_V2, ext)
    assert parsed == header.to_v1()
    assert H.parse_send_message_header(RequestCode.SEND_BATCH_MESSAGE, ext) == header.to_v1()


# -- properties ----------------------------------------------------------------------------------


def reference_decode_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for segment in text.split("\x02"):
        index = segment.find("\x01")
        if len(segment) >= 3 and 0 < index < len(segment) - 1:
            out[segment[:index]] = segment[index + 1 :]
    return out


@settings(max_examples=500)
@given(st.text(alphabet="ab\x01\x02é", max_size=16))
def test_decode_properties_follows_the_java_rule(text: str) -> None:
    assert MC.decode_properties(text) == reference_decode_properties(text)


# -- records -------------------------------------------------------------------------------------

HOSTS = st.sampled_from(["127.0.0.1", "10.1.2.3", "::1", "fe80::1"])
RECORDS = st.builds(
    MC.MessageExt,
    topic=st.one_of(st.text("Tab%_-", min_size=1, max_size=12), st.just("T" * 200)),
    body=st.binary(max_size=40),
    flag=st.integers(-(2**31), 2**31 - 1),
    properties=st.dictionaries(
        st.text("KEYS_abc", min_size=1, max_size=6), st.text("ab\x01é ", max_size=6)
    ),
    queue_id=st.integers(0, 7),
    queue_offset=st.integers(0, 2**40),
    commitlog_offset=st.integers(0, 2**40),
    sys_flag=st.sampled_from([0, int(MessageSysFlag.COMPRESSED), 4, 8]),
    born_host=HOSTS,
    born_port=st.integers(0, 65535),
    store_host=HOSTS,
    store_port=st.integers(0, 65535),
    reconsume_times=st.integers(0, 20),
)


def all_fields(message: ReceivedMessage) -> dict[str, Any]:
    return {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}


@settings(max_examples=150)
@given(st.lists(RECORDS, max_size=4), st.data())
def test_record_shortcut_matches_the_general_decoder(
    messages: list[MC.MessageExt], data: st.DataObject
) -> None:
    messages = [
        msgspec.structs.replace(m, body=zlib.compress(m.body))
        if m.sys_flag & MessageSysFlag.COMPRESSED
        else m
        for m in messages
    ]
    body = bytearray(b"".join(MC.encode_message_record(m) for m in messages))
    # corrupt some of them: flipped bytes and cut tails must end the list the same way
    if body and data.draw(st.booleans()):
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(body) - 1))
            body[i] = data.draw(st.integers(0, 255))
    if body and data.draw(st.booleans()):
        del body[data.draw(st.integers(0, len(body) - 1)) :]
    raw = bytes(body)
    queue = MessageQueue("T", "broker-a", 1)
    check_crc = data.draw(st.booleans())
    views = [
        ReceivedMessage.from_ext(m, queue) for m in MC.decode_messages(raw, check_crc=check_crc)
    ]
    try:
        MC.decode_messages(raw, check_crc=check_crc, strict=True)
        whole = True
    except MalformedBodyError:
        whole = False
    try:
        fast = ReceivedMessage.from_records(raw, queue, check_crc=check_crc)
        broken = False
    except CorruptMessageError as error:
        # never a silent end: the good messages before the bad record come with the error
        fast, broken = error.messages, True
        assert error.queue_offset == (fast[-1].queue_offset + 1 if fast else None)
    assert broken == (not whole)
    # the text fields first read one by one (each decodes them all), then compared whole
    name = data.draw(st.sampled_from(["tags", "keys", "properties", "msg_id", "born_host"]))
    assert [getattr(m, name) for m in fast] == [getattr(m, name) for m in views]
    assert fast == views
    assert [all_fields(m) for m in fast] == [all_fields(m) for m in views]


def test_a_flipped_body_byte_is_never_handed_over() -> None:
    queue = MessageQueue("T", "broker-a", 1)
    records = [
        MC.encode_message_record(MC.MessageExt(topic="T", body=b"body-%d" % i, queue_offset=i))
        for i in range(3)
    ]
    damaged = bytearray(records[1])
    damaged[-4 - 3] ^= 0x01  # the body's third byte from its end (then TOPICLEN, "T", PROPLEN)
    raw = records[0] + bytes(damaged) + records[2]
    with pytest.raises(CorruptMessageError, match="body CRC") as caught:
        ReceivedMessage.from_records(raw, queue)
    assert [m.body for m in caught.value.messages] == [b"body-0"]
    assert caught.value.queue_offset == 1
    # opting out reads it as the Java client does
    unchecked = ReceivedMessage.from_records(raw, queue, check_crc=False)
    assert [m.body for m in unchecked][0::2] == [b"body-0", b"body-2"]
    assert unchecked[1].body != b"body-1"


def test_pulled_message_decodes_its_texts_on_first_read() -> None:
    ext = MC.MessageExt(
        topic="T",
        body=b"x",
        properties={"UNIQ_KEY": "u1", "TAGS": "a", "KEYS": "k1 k2"},
        store_host="10.0.0.7",
        store_port=10911,
        commitlog_offset=4096,
    )
    queue = MessageQueue("T", "broker-a", 1)
    (message,) = ReceivedMessage.from_records(MC.encode_message_record(ext), queue)
    assert "properties" not in vars(message)  # nothing decoded while only the body is read
    assert message.body == b"x" and message.queue_offset == ext.queue_offset
    assert message.keys == ("k1", "k2")
    assert vars(message)["tags"] == "a" and message.msg_id == "u1"
    assert message.offset_msg_id == MC.offset_msg_id("10.0.0.7", 10911, 4096)
    assert message.store_host == "10.0.0.7:10911"
    assert dataclasses.replace(message, reconsume_times=1).properties == message.properties


def test_pulled_retry_message_keeps_its_original_topic() -> None:
    ext = MC.MessageExt(topic="%RETRY%g", body=b"x", properties={"RETRY_TOPIC": "Orders"})
    queue = MessageQueue("%RETRY%g", "broker-a", 0)
    (message,) = ReceivedMessage.from_records(MC.encode_message_record(ext), queue)
    assert message.topic == "Orders" and message.queue == queue


def test_record_shortcut_refuses_a_negative_properties_length() -> None:
    # 40000 bytes of properties: as a Java short the length is negative, the record is bad
    record = MC.encode_message_record(MC.MessageExt(topic="T", body=b"x", properties={}))
    big = record[:-2] + (40000).to_bytes(2, "big") + b"a\x01b\x02" * 10000
    big = len(big).to_bytes(4, "big") + big[4:]
    with pytest.raises(CorruptMessageError) as caught:
        ReceivedMessage.from_records(big, MessageQueue("T", "b", 0))
    assert caught.value.messages == [] and caught.value.queue_offset is None
    assert MC.decode_messages(big) == []


# -- frames --------------------------------------------------------------------------------------


@settings(max_examples=200)
@given(
    st.dictionaries(st.text(max_size=12), st.text(max_size=40), max_size=6),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**31), 2**31 - 1),
)
def test_encoded_success_is_the_frame_of_the_response(
    ext: dict[str, str], opaque: int, version: int
) -> None:
    request = RemotingCommand(code=310, opaque=opaque, ext_fields={"a": "g"})
    expected = encode_frame(request.make_response(0, ext_fields=ext, version=version))
    assert encode_json_success(opaque, msgspec.json.encode(ext), version) == expected


def _frame(header: bytes, body: bytes = b"", stype: int = 0, length: int | None = None) -> bytes:
    size = 4 + len(header) + len(body) if length is None else length
    return struct.pack(">iI", size, (stype << 24) | len(header)) + header + body


# Frames the decoder's whole-JSON-frame loop takes, and ones it hands to the general path.
_FRAME_PARTS = [
    encode_frame(RemotingCommand(code=310, opaque=1, ext_fields={"i": "a\x01b"}, body=b"xy")),
    encode_frame(RemotingCommand(code=0, flag=1, ext_fields={"msgId": "AB"})),
    encode_frame(RemotingCommand(code=34, body=b"{}", serialize_type=SerializeType.ROCKETMQ)),
    _frame(b"{'code':11,opaque:3}"),  # lenient JSON
    _frame(b'{"code":"12"}'),  # a string where an int goes: lenient reader
    _frame(b"not json"),
    _frame(b"{}", stype=7),
    _frame(b'{"code":1}', length=2),
    _frame(b'{"code":1}', length=2**30),
    _frame(b'{"code":1}' * 3, length=9),
]


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from(_FRAME_PARTS), min_size=1, max_size=6),
    st.lists(st.integers(0, 10_000), max_size=6),
)
def test_decoder_reads_bytes_as_the_general_path(parts: list[bytes], cuts: list[int]) -> None:
    # bytes take the whole-JSON-frame loop; a bytearray of the same stream never does
    from pocketmq.broker.protocol.frames import FrameDecoder

    stream = b"".join(parts)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})

    def run(kind: type) -> list[Any]:
        decoder, out = FrameDecoder(frame_size_max=2**20), []
        for start, end in zip(points, points[1:], strict=False):
            try:
                out.append(decoder.feed(kind(stream[start:end])))
            except Exception as error:  # noqa: BLE001 - compared, type and text
                out.append((type(error), str(error), getattr(error, "frames", None)))
                break
        return [*out, decoder.buffered_bytes]

    assert run(bytes) == run(bytearray)


def reference_json_header(cmd: RemotingCommand) -> bytes:
    return msgspec.json.encode(
        _JsonHeaderOut(
            code=cmd.code,
            extFields=msgspec.UNSET if cmd.ext_fields is None else cmd.ext_fields,
            flag=cmd.flag,
            language=LanguageCode(cmd.language).name,
            opaque=cmd.opaque,
            remark=msgspec.UNSET if cmd.remark is None else cmd.remark,
            serializeTypeCurrentRPC="JSON",
            version=cmd.version,
        )
    )


@given(
    st.builds(
        RemotingCommand,
        code=st.integers(-(2**31), 2**31 - 1),
        language=st.sampled_from(list(LanguageCode)),
        version=st.integers(-(2**31), 2**31 - 1),
        opaque=st.integers(-(2**31), 2**31 - 1),
        flag=st.integers(-(2**31), 2**31 - 1),
        remark=st.none() | st.text(max_size=8),
        ext_fields=st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
    )
)
def test_json_header_encoder(cmd: RemotingCommand) -> None:
    assert _encode_json_header(cmd) == reference_json_header(cmd)


# -- the producer's request ----------------------------------------------------------------------


def test_send_request_is_the_v2_header_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1700000000.123)
    producer = Producer("g", namesrv="127.0.0.1:1")
    for mq, flag in [
        (MessageQueue("T", "broker-a", 3), 0),
        (MessageQueue("T", "broker-a", 3), 9),
        (MessageQueue("U", "broker-b", 0), 0),
    ]:
        fast = producer._send_request(mq, "WAIT\x01true\x02", b"body", flag)
        header = producer._header(mq, "WAIT\x01true\x02", flag=flag)
        slow = make_request(RequestCode.SEND_MESSAGE_V2, header, body=b"body")
        assert encode_frame(fast) == encode_frame(slow)
    producer.group = "other"  # public attributes: a change is seen
    producer.default_topic_queue_nums = 16
    mq = MessageQueue("T", "broker-a", 3)
    ext = producer._send_request(mq, "p", b"b", 0).ext_fields
    assert ext is not None and (ext["a"], ext["d"]) == ("other", "16")


# -- the producer's view of the answer ------------------------------------------------------------


@settings(max_examples=400)
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "msgId": HEADER_TEXT,
            "queueId": HEADER_TEXT,
            "queueOffset": st.one_of(HEADER_TEXT, st.just("9" * 18), st.just("9" * 19)),
            "transactionId": HEADER_TEXT,
            "MSG_REGION": HEADER_TEXT,
            "TRACE_ON": HEADER_TEXT,
        },
    )
)
def test_send_result_fields_are_the_response_headers(ext: dict[str, str]) -> None:
    def header_fields(ext: dict[str, str]) -> tuple[Any, ...]:
        h = H.SendMessageResponseHeader.from_ext_fields(ext)
        return h.msg_id, h.queue_id, h.queue_offset, h.transaction_id, h.msg_region

    assert outcome(H.send_result_fields, ext) == outcome(header_fields, ext)


# -- the broker's offset message id --------------------------------------------------------------


async def test_send_answers_the_brokers_offset_message_id() -> None:
    from pocketmq.broker.app import Broker
    from pocketmq.broker.handlers.send import _offset_msg_id

    async with Broker(port=0, store=None) as broker:

        class Conn:
            attributes: dict[str, Any] = {}

        for offset in (0, 1, 1234567, 2**40 + 5, 2**63 - 1):
            assert _offset_msg_id(broker, Conn(), offset) == broker.offset_msg_id(offset)  # type: ignore[arg-type]


async def test_send_success_frame_is_the_general_answer() -> None:
    """The answer to a JSON send written from a template is the frame of ``_maybe_wait``'s
    response map, for odd transaction ids and regions too (escaped as the map's encoder does)."""
    from pocketmq.broker.app import Broker
    from pocketmq.broker.handlers.send import (
        _maybe_wait,
        _offset_msg_id,
        _response_ext,
        _success_frame,
    )
    from pocketmq.store.message_store import PutResult

    async with Broker(port=0, store=None) as broker:

        class Conn:
            attributes: dict[str, Any] = {}

        conn: Any = Conn()
        for offset, queue_id, queue_offset, uniq, region in [
            (0, 0, 0, "0102FC0000000137F60B1A0DC300000001", "DefaultRegion"),
            (2**63 - 1, 1023, 2**62, None, "DefaultRegion"),
            (1234567, 7, 99, 'a"b\\c\x01\u00e9\U0001f600', 'r"\x02\u00fc'),
            (42, 3, 5, "", None),
        ]:
            broker.config.region_id = region  # type: ignore[assignment]
            properties = {"WAIT": "true"} if uniq is None else {"UNIQ_KEY": uniq}
            request = RemotingCommand(code=310, opaque=offset % 2**31, ext_fields={})
            result = PutResult(offset, 100, queue_offset, 0)
            ext = _response_ext(
                _offset_msg_id(broker, conn, offset), queue_id, queue_offset, uniq, region
            )
            expected = _maybe_wait(broker, request, result, ext, False)
            got = _success_frame(broker, conn, request.opaque, result, queue_id, properties)
            assert got == expected
        assert _success_frame(broker, conn, 1, PutResult(2**63, 1, 0, 0), 0, {}) is None
        huge = {"UNIQ_KEY": "\x01" * (0xFFFFFF // 6 + 1)}  # escaped past a header's length
        assert _success_frame(broker, conn, 1, PutResult(0, 1, 0, 0), 0, huge) is None


# -- client timeouts -----------------------------------------------------------------------------


async def _silent_server() -> tuple[asyncio.Server, str]:
    class Silent(asyncio.Protocol):
        pass

    server = await asyncio.get_running_loop().create_server(Silent, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_short_timeout_is_not_held_back_by_a_longer_one() -> None:
    server, addr = await _silent_server()
    conn = await Connection.open(addr)
    try:
        route = RequestCode.GET_ROUTEINFO_BY_TOPIC
        long = asyncio.create_task(conn.invoke(make_request(route), 30_000))
        await asyncio.sleep(0)
        started = asyncio.get_running_loop().time()
        with pytest.raises(RequestTimeoutError):
            await conn.invoke(make_request(route), 50)
        # a guard against waiting for the 30 s one, not a timing assertion
        assert asyncio.get_running_loop().time() - started < 10
        results = await asyncio.gather(
            *(conn.invoke(make_request(route), 20 + 10 * i) for i in range(5)),
            return_exceptions=True,
        )
        assert all(isinstance(r, RequestTimeoutError) for r in results)
        assert not long.done() and conn.requests_pending == 1
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        assert conn.requests_pending == 0 and not conn._deadlines
    finally:
        await conn.aclose()
        server.close()


# -- the iterator's slots ------------------------------------------------------------------------


async def test_iterator_holds_at_most_consume_concurrency_unacknowledged() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        for i in range(4):
            await broker.put("T", 0, b"m%d" % i, {"UNIQ_KEY": f"U{i}"})
        consumer = PushConsumer(
            "CG",
            namesrv=broker.addr,
            client_ip="127.0.0.1",
            consume_from="first",
            consume_concurrency=2,
        )
        consumer.subscribe("T")
        async with consumer:
            first = await consumer.receive(timeout_ms=5000)
            second = await consumer.receive(timeout_ms=5000)
            with pytest.raises(TimeoutError):  # both slots are taken
                await consumer.receive(timeout_ms=200)
            await consumer.ack(first)
            third = await consumer.receive(timeout_ms=5000)
            await consumer.ack(second, ConsumeResult.SUCCESS)
            await consumer.ack(third)
            fourth = await consumer.receive(timeout_ms=5000)
            await consumer.ack(fourth)
            await wait_until(
                lambda: consumer.committed_offset(MessageQueue("T", "broker-a", 0)) == 4
            )
        assert [m.body for m in (first, second, third, fourth)] == [b"m0", b"m1", b"m2", b"m3"]


async def test_listener_mode_consumes_a_batch_concurrently() -> None:
    async with fake_cluster() as cluster:
        cluster.add_topic("T", 1)
        broker = cluster.brokers[0]
        for i in range(6):
            await broker.put("T", 0, b"m%d" % i, {"UNIQ_KEY": f"U{i}"})
        running = 0
        peak = 0
        release = asyncio.Event()

        async def listener(message: ReceivedMessage) -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await release.wait()
            running -= 1

        consumer = PushConsumer(
            "CG",
            namesrv=broker.addr,
            client_ip="127.0.0.1",
            consume_from="first",
            consume_concurrency=4,
            listener=listener,
        )
        consumer.subscribe("T")
        async with consumer:
            await wait_until(lambda: peak == 4)  # one pulled batch, spread over the workers
            release.set()
            await wait_until(
                lambda: consumer.committed_offset(MessageQueue("T", "broker-a", 0)) == 6
            )


def test_send_request_carries_the_message() -> None:
    producer = Producer("g", namesrv="127.0.0.1:1")
    props = producer._properties(Message(topic="T", body=b"x", tags="A", keys=["k"]))
    text = producer._properties_text(props)
    cmd = producer._send_request(MessageQueue("T", "b", 0), text, b"x", 3)
    assert cmd.code == RequestCode.SEND_MESSAGE_V2 and cmd.serialize_type == SerializeType.JSON
    assert cmd.ext_fields is not None and cmd.ext_fields["i"] == text and cmd.ext_fields["h"] == "3"


# -- batches -------------------------------------------------------------------------------------


@settings(max_examples=300)
@given(st.text(alphabet="ab\x01\x02", max_size=14))
def test_canonical_properties_means_reencoding_gives_the_same_text(text: str) -> None:
    properties = MC.decode_properties(text)
    assert MC.is_canonical_properties(text, properties) == (
        MC.encode_properties(properties) == text
    )


async def test_batch_stores_each_messages_properties_as_re_encoding_would() -> None:
    from pocketmq.broker.app import Broker
    from pocketmq.broker.handlers.send import handle_send

    texts = [
        "UNIQ_KEY\x01A\x02WAIT\x01true\x02",  # canonical: stored as sent
        "b\x01x\x02a\x011\x02a\x012\x02\x01bad\x02tail",  # repeated, malformed: re-encoded
        "",
    ]
    batch = MC.encode_batch_texts((b"m%d" % i, i, text) for i, text in enumerate(texts))
    async with Broker(port=0, store=None) as broker:
        producer = Producer("g", namesrv="127.0.0.1:1")
        header = producer._header(MessageQueue("BatchT", "broker-a", 0), "WAIT\x01true\x02")
        request = make_request(RequestCode.SEND_BATCH_MESSAGE, header, body=batch)

        class Conn:
            remote_address = "127.0.0.1:5555"
            attributes: dict[str, Any] = {}

        answer = handle_send(broker, request, Conn())  # type: ignore[arg-type]
        assert isinstance(answer, bytes)  # the encoded frame of a JSON request's answer
        response, _ = decode_frame(answer) or (None, 0)
        assert isinstance(response, RemotingCommand) and response.code == 0
        assert response.ext_fields is not None
        assert response.ext_fields["transactionId"] == "A,,"
        got = broker.store.get_messages("BatchT", 0, 0, 10)
        records = MC.decode_messages(b"".join(bytes(v) for _, _, v in got.messages))
        assert [r.body for r in records] == [b"m0", b"m1", b"m2"]
        for record, text in zip(records, texts, strict=True):
            assert record.properties == MC.decode_properties(text)
        ids = response.ext_fields["msgId"].split(",")
        assert ids == [broker.offset_msg_id(p) for _, p, _ in got.messages]
