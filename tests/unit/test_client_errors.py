"""Error mapping: RocketMQ response codes -> exception classes, and the retriable set."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.client import errors
from pocketmq.client.errors import (
    BrokerError,
    ClientError,
    ClientUsageError,
    ConnectionLostError,
    MessageTooLargeError,
    RequestTimeoutError,
    UnknownBrokerError,
    error_for_code,
)

# DefaultMQProducer.retryResponseCodes
RETRIABLE_SEND_CODES = {17, 14, 1, 2, 16, 204, 205, 1500}


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (1, errors.BrokerSystemError),
        (2, errors.SystemBusyError),
        (3, errors.RequestCodeNotSupportedError),
        (13, errors.MessageIllegalError),
        (14, errors.ServiceNotAvailableError),
        (16, errors.NoPermissionError),
        (17, errors.TopicNotExistError),
        (18, errors.TopicExistAlreadyError),
        (22, errors.QueryNotFoundError),
        (25, errors.SubscriptionError),
        (29, errors.InvalidParameterError),
        (204, errors.NoBuyerIdError),
        (205, errors.NotInCurrentUnitError),
        (215, errors.FlowControlError),
        (1500, errors.GoAwayError),
    ],
)
def test_known_codes_map_to_their_class(code: int, cls: type[BrokerError]) -> None:
    error = error_for_code(code, "remark text")
    assert type(error) is cls
    assert error.code == code
    assert error.remark == "remark text"
    assert "remark text" in str(error)


def test_the_message_names_the_code_as_rocketmq_does() -> None:
    assert str(error_for_code(604, "the clock is not manual")) == (
        "ILLEGAL_OPERATION (604): the clock is not manual"
    )
    assert str(error_for_code(17)) == "TOPIC_NOT_EXIST (17)"
    assert str(error_for_code(9999, "odd")) == "response code 9999: odd"


def test_retriable_codes_are_exactly_rocketmqs_retry_codes() -> None:
    for code in range(-2000, 3000):
        assert error_for_code(code).retriable is (code in RETRIABLE_SEND_CODES), code


@given(st.integers(), st.one_of(st.none(), st.text()))
def test_error_for_code_never_raises(code: int, remark: str | None) -> None:
    error = error_for_code(code, remark)
    assert isinstance(error, BrokerError)
    assert error.code == code


def test_unknown_code_is_unknown_broker_error() -> None:
    error = error_for_code(4242)
    assert isinstance(error, UnknownBrokerError)
    assert not error.retriable


def test_hierarchy_says_whose_fault() -> None:
    assert issubclass(ClientUsageError, ClientError) and issubclass(ClientUsageError, ValueError)
    assert issubclass(MessageTooLargeError, ClientUsageError)
    assert issubclass(RequestTimeoutError, TimeoutError)
    assert issubclass(ConnectionLostError, ConnectionError)
    assert ConnectionLostError("h:1").retriable
    assert not RequestTimeoutError("h:1", 10, 5).retriable
    assert not ClientUsageError("x").retriable
    too_large = MessageTooLargeError(10, 5)
    assert (too_large.size_bytes, too_large.size_bytes_max) == (10, 5)


def test_every_exported_name_exists() -> None:
    for name in errors.__all__:
        assert hasattr(errors, name)
