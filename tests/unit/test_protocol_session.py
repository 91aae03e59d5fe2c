"""The sans-I/O request/response session, without sockets: two sessions talk through bytes."""

from __future__ import annotations

import pytest

from pocketmq.broker.protocol import (
    DEFAULT_VERSION,
    RPC_ONEWAY,
    RPC_TYPE,
    FrameDecoder,
    FrameTooLargeError,
    LanguageCode,
    LocalProtocolError,
    MalformedFrameError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    encode_frame,
)
from pocketmq.broker.protocol.session import OPAQUE_MAX, RemotingSession


def request(code: int = RequestCode.HEART_BEAT, body: bytes | None = None) -> RemotingCommand:
    return RemotingCommand(code=code, language=LanguageCode.PYTHON, body=body)


def wire(parts: object) -> bytes:
    return b"".join(parts)  # type: ignore[arg-type]


def test_a_request_and_its_answer_between_two_sessions() -> None:
    client: RemotingSession[str] = RemotingSession(language=LanguageCode.PYTHON, version=479)
    server: RemotingSession[str] = RemotingSession()
    sent = client.send_request(request(body=b"hi"), "token-1", 10.0, 3000)
    assert client.requests_pending == 1 and client.deadlines() == {1: 10.0}

    requests, answers, error = server.receive_data(wire(sent))
    assert error is None and answers == ()
    (got,) = requests
    assert (got.code, got.opaque, got.flag, got.body) == (RequestCode.HEART_BEAT, 1, 0, b"hi")

    answer = server.respond(got, got.make_response(ResponseCode.SUCCESS, "ok"))
    assert answer is not None
    requests, answers, error = client.receive_data(wire(answer))
    assert error is None and list(requests) == []
    ((token, response),) = answers
    assert token == "token-1" and response.remark == "ok" and response.flag & RPC_TYPE
    assert client.requests_pending == 0 and client.stray_responses == 0


def test_opaques_count_up_and_wrap_at_a_java_int() -> None:
    session: RemotingSession[int] = RemotingSession()
    sent = [request() for _ in range(3)]
    for i, cmd in enumerate(sent):
        session.send_request(cmd, i, 1.0, 1)
    assert [cmd.opaque for cmd in sent] == [1, 2, 3] == sorted(session.deadlines())
    session._opaque = OPAQUE_MAX - 1  # as after two billion requests
    first, second = request(), request()
    session.send_request(first, 10, 1.0, 1)
    session.send_request(second, 11, 1.0, 1)
    assert (first.opaque, second.opaque) == (OPAQUE_MAX, 1)


def test_a_read_holding_requests_and_answers_in_parts() -> None:
    session: RemotingSession[str] = RemotingSession()
    mine = request()
    session.send_request(mine, "mine", 5.0, 5000)
    peer_request = RemotingCommand(code=RequestCode.CHECK_TRANSACTION_STATE, opaque=77)
    stream = (
        encode_frame(peer_request)
        + encode_frame(mine.make_response(ResponseCode.SUCCESS))
        + encode_frame(RemotingCommand(code=0, opaque=999, flag=RPC_TYPE))  # nobody asked
        + encode_frame(RemotingCommand(code=40, opaque=78, flag=RPC_ONEWAY), SerializeType.ROCKETMQ)
    )
    requests: list[RemotingCommand] = []
    answered: list[str] = []
    for i in range(len(stream)):  # one byte at a time
        got, answers, error = session.receive_data(stream[i : i + 1])
        assert error is None
        requests += got
        answered += [token for token, _ in answers]
    assert [(r.code, r.opaque) for r in requests] == [(39, 77), (40, 78)]
    assert answered == ["mine"] and session.stray_responses == 1
    assert session.buffered_bytes == 0


def test_oneway_requests_wait_for_nothing_and_get_no_answer() -> None:
    session: RemotingSession[str] = RemotingSession()
    cmd = request()
    (frame,) = FrameDecoder().feed(wire(session.send_oneway(cmd)))
    assert frame.flag == RPC_ONEWAY and frame.opaque == 1 and session.requests_pending == 0
    peer = RemotingCommand(code=40, opaque=5, flag=RPC_ONEWAY)
    assert session.respond(peer, peer.make_response(ResponseCode.SUCCESS)) is None
    assert session.respond(request(), None) is None


def test_respond_passes_an_encoded_answer_and_keeps_a_body_apart() -> None:
    session: RemotingSession[str] = RemotingSession()
    peer = RemotingCommand(code=11, opaque=9)
    assert session.respond(peer, b"already encoded") == (b"already encoded",)
    parts = session.respond(peer, peer.make_response(ResponseCode.SUCCESS, body=b"records"))
    assert parts is not None and len(parts) == 2 and parts[1] == b"records"
    (decoded,) = FrameDecoder().feed(wire(parts))
    assert decoded.opaque == 9 and decoded.body == b"records"


def test_error_answers_are_in_the_sessions_language() -> None:
    client: RemotingSession[str] = RemotingSession(language=LanguageCode.PYTHON, version=479)
    broker: RemotingSession[str] = RemotingSession()
    peer = RemotingCommand(code=4242, opaque=3, serialize_type=SerializeType.ROCKETMQ)
    answer = client.not_supported(peer)
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert answer.remark == " request type 4242 not supported"
    assert (answer.language, answer.version, answer.opaque) == (LanguageCode.PYTHON, 479, 3)
    assert answer.serialize_type == SerializeType.ROCKETMQ and answer.flag == RPC_TYPE
    failed = broker.failed(peer, "RuntimeError: bug")
    assert failed.code == ResponseCode.SYSTEM_ERROR and failed.remark == "RuntimeError: bug"
    assert (failed.language, failed.version) == (LanguageCode.JAVA, DEFAULT_VERSION)


def test_expire_takes_out_what_is_due_and_tells_the_next_deadline() -> None:
    session: RemotingSession[str] = RemotingSession()
    late = request()
    session.send_request(late, "a", 1.0, 1000)
    session.send_request(request(RequestCode.PULL_MESSAGE), "b", 3.0, 3000)
    session.send_request(request(), "c", 2.0, 2000)
    assert session.expire(0.5) == ([], 1.0)
    assert session.expire(2.0) == ([("a", RequestCode.HEART_BEAT, 1000), ("c", 34, 2000)], 3.0)
    assert session.requests_pending == 1
    # the answer to a request that timed out is dropped
    _, answers, _ = session.receive_data(encode_frame(late.make_response(ResponseCode.SUCCESS)))
    assert answers == [] and session.stray_responses == 1
    assert session.expire(10.0) == ([("b", RequestCode.PULL_MESSAGE, 3000)], float("inf"))


def test_forget_drops_only_the_callers_own_request() -> None:
    session: RemotingSession[object] = RemotingSession()
    token = object()
    cmd = request()
    session.send_request(cmd, token, 1.0, 1)
    session.forget(cmd.opaque, object())  # someone else's token: kept
    assert session.requests_pending == 1
    session.forget(cmd.opaque, token)
    session.forget(cmd.opaque, token)  # twice is harmless
    assert session.requests_pending == 0


def test_connection_lost_hands_back_every_pending_token() -> None:
    session: RemotingSession[str] = RemotingSession()
    for token in "xyz":
        session.send_request(request(), token, 1.0, 1)
    assert sorted(session.connection_lost()) == ["x", "y", "z"]
    assert session.requests_pending == 0 and session.expire(5.0) == ([], float("inf"))


def test_a_request_that_cannot_be_encoded_is_not_pending() -> None:
    session: RemotingSession[str] = RemotingSession()
    bad = RemotingCommand(code=200050, serialize_type=SerializeType.ROCKETMQ)  # not a short
    with pytest.raises(LocalProtocolError):
        session.send_request(bad, "t", 1.0, 1)
    assert session.requests_pending == 0


def test_a_broken_stream_delivers_what_came_before_and_stays_broken() -> None:
    session: RemotingSession[str] = RemotingSession()
    mine = request()
    session.send_request(mine, "mine", 1.0, 1)
    data = (
        encode_frame(RemotingCommand(code=34, opaque=1))
        + encode_frame(mine.make_response(ResponseCode.SUCCESS))
        + b"\x00\x00\x00\x02\x00\x00"  # length 2: no room for the header length
    )
    requests, answers, error = session.receive_data(data)
    assert isinstance(error, MalformedFrameError)
    assert [r.code for r in requests] == [34] and [t for t, _ in answers] == ["mine"]
    assert session.receive_data(encode_frame(request())) == ((), (), error)


def test_a_frame_over_the_limit_is_refused_as_soon_as_its_length_is_read() -> None:
    session: RemotingSession[str] = RemotingSession(frame_size_max=64)
    _, _, error = session.receive_data(encode_frame(request(body=b"x" * 100))[:8])
    assert isinstance(error, FrameTooLargeError) and session.error is error


def test_partial_frame_bytes_are_counted_as_they_arrive_and_can_be_let_go() -> None:
    session: RemotingSession[str] = RemotingSession()
    frame = encode_frame(request(body=b"x" * 1000))
    session.receive_data(frame[:3])
    assert session.buffered_bytes == 3
    session.receive_data(frame[3:500])
    assert session.buffered_bytes == 500  # what arrived, not what the length field announces
    session.discard_buffered()
    assert session.buffered_bytes == 0
