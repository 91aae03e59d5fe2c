"""The ACL policy (broker/services/acl.py), the remoting signature (broker/protocol/signing.py)
and the gRPC date window and replay guard (broker/grpc/auth.py), without sockets."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from pathlib import Path

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode
from pocketmq.broker.protocol.headers import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    SubscriptionData,
    encode_json_body,
)
from pocketmq.broker.protocol.signing import sign_fields, signed_content
from pocketmq.broker.services.acl import (
    ADMIN_CODES,
    PUB,
    SUB,
    AccessControl,
    AclFileError,
    AddressPattern,
    Resource,
    remoting_resources,
)

ACL_YAML = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB
  - accessKey: rocketmq2
    secretKey: "87654321"
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""

CLIENT = "127.0.0.1:50000"


@pytest.fixture
def acl(tmp_path: Path) -> AccessControl:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_YAML)
    return AccessControl.load(path)


def request(
    code: int,
    fields: dict[str, str] | None = None,
    body: bytes | None = None,
    keys: tuple[str, str] | None = None,
) -> RemotingCommand:
    ext = dict(fields or {})
    if keys is not None:
        ext = sign_fields(ext, body, *keys)
    return RemotingCommand(code=code, ext_fields=ext, body=body)


USER = ("RocketMQ", "12345678")
ADMIN = ("rocketmq2", "87654321")


# -- the signature --------------------------------------------------------------------------


def test_signature_is_hmac_sha1_over_sorted_values_then_body() -> None:
    fields = {"topic": "T", "b": "x", "AccessKey": "ak", "Signature": "old"}
    # sorted keys: AccessKey, Signature (left out), b, topic
    assert signed_content(fields, b"BODY") == b"akxTBODY"
    signed = sign_fields({"topic": "T", "b": "x"}, b"BODY", "ak", "sk")
    expected = base64.b64encode(hmac.new(b"sk", b"akxTBODY", hashlib.sha1).digest()).decode()
    assert signed["Signature"] == expected
    assert signed["AccessKey"] == "ak"


def test_signing_leaves_the_callers_fields_alone() -> None:
    template = {"topic": "T"}
    sign_fields(template, None, "ak", "sk", "token")
    assert template == {"topic": "T"}
    assert sign_fields(template, None, "ak", "sk", "token")["SecurityToken"] == "token"


# -- the file -------------------------------------------------------------------------------


def test_the_rocketmq_shape_loads(acl: AccessControl) -> None:
    user = acl.accounts["RocketMQ"]
    assert user.secret_key == "12345678"  # an unquoted YAML number is still a key
    assert not user.admin
    assert user.topic_perms == {"topicA": 1, "topicB": PUB | SUB, "topicC": SUB}
    assert acl.accounts["rocketmq2"].admin
    assert acl.an_admin is acl.accounts["rocketmq2"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("accounts:\n  - accessKey: a\n    secretKy: b\n", "secretKy"),
        ("accounts:\n  - accessKey: a\n    secretKey: b\n    topicPerms: [t=WRITE]\n", "WRITE"),
        ("accounts:\n  - accessKey: a\n    secretKey: b\n    topicPerms: [t]\n", "NAME=PERM"),
        (
            "accounts:\n  - accessKey: a\n    secretKey: b\n    whiteRemoteAddress: 1.2.3.400\n",
            "1.2.3.400",
        ),
        ("accounts: [\n", "line 2"),
        ("globalWhiteRemoteAddresses: []\naccounts: []\n", "no accounts"),
        (
            "accounts:\n  - {accessKey: a, secretKey: b}\n  - {accessKey: a, secretKey: c}\n",
            "twice",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_file_and_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "acl.yml"
    path.write_text(text)
    with pytest.raises(AclFileError) as caught:
        AccessControl.load(path)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message
    assert problem in message


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(AclFileError, match="nothere.yml"):
        AccessControl.load(tmp_path / "nothere.yml")


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("*", ["1.2.3.4", "::1"], []),
        ("", [], ["127.0.0.1"]),
        ("10.10.103.*", ["10.10.103.7"], ["10.10.104.7"]),
        ("192.168.1.1-100", ["192.168.1.100"], ["192.168.1.101"]),
        ("192.168.1.{1,2}", ["192.168.1.2"], ["192.168.1.3"]),
        ("127.0.0.1,::1", ["::1", "127.0.0.1", "::ffff:127.0.0.1"], ["127.0.0.2"]),
    ],
)
def test_white_address_patterns(pattern: str, inside: list[str], outside: list[str]) -> None:
    matcher = AddressPattern(pattern)
    assert all(matcher.matches(host) for host in inside)
    assert not any(matcher.matches(host) for host in outside)


# -- remoting checks ------------------------------------------------------------------------

ADMIN_TABLE = sorted(int(code) for code in ADMIN_CODES)


@pytest.mark.parametrize("code", ADMIN_TABLE)
def test_admin_codes_need_the_admin_account(acl: AccessControl, code: int) -> None:
    fields = {"topic": "topicB", "consumerGroup": "groupB"}
    remark = acl.check_remoting(request(code, fields), CLIENT)
    assert remark is not None and "no AccessKey" in remark
    remark = acl.check_remoting(request(code, fields, keys=USER), CLIENT)
    assert remark is not None and "admin" in remark
    assert acl.check_remoting(request(code, fields, keys=ADMIN), CLIENT) is None
    assert acl.denied[code] == 2 and acl.allowed[code] == 1


def test_unknown_keys_and_bad_signatures_are_refused_without_echoing_secrets(
    acl: AccessControl,
) -> None:
    fields = {"b": "topicB"}
    stranger = acl.check_remoting(request(310, fields, keys=("nobody", "x")), CLIENT)
    assert stranger is not None and "no account" in stranger
    wrong = acl.check_remoting(request(310, fields, keys=("RocketMQ", "guess")), CLIENT)
    assert wrong is not None and "signature" in wrong and "guess" not in wrong
    tampered = request(310, fields, b"body", keys=USER)
    tampered.body = b"other"
    remark = acl.check_remoting(tampered, CLIENT)
    assert remark is not None and "signature" in remark and "12345678" not in remark
    assert acl.check_remoting(request(310, fields, b"body", keys=USER), CLIENT) is None


@pytest.mark.parametrize(
    ("code", "fields", "allowed"),
    [
        (RequestCode.SEND_MESSAGE_V2, {"b": "topicA"}, False),  # topicA=DENY
        (RequestCode.SEND_MESSAGE_V2, {"b": "topicB"}, True),  # PUB|SUB
        (RequestCode.SEND_MESSAGE_V2, {"b": "topicC"}, False),  # SUB only
        (RequestCode.SEND_MESSAGE, {"topic": "other"}, False),  # defaultTopicPerm DENY
        (RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%groupC"}, True),  # a redelivery: SUB
        (RequestCode.SEND_MESSAGE_V2, {"b": "%RETRY%groupA"}, False),
        (RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupC"}, True),
        (RequestCode.PULL_MESSAGE, {"topic": "topicC", "consumerGroup": "groupA"}, False),
        (RequestCode.PULL_MESSAGE, {"topic": "topicA", "consumerGroup": "groupC"}, False),
        (RequestCode.PULL_MESSAGE, {"topic": "topicB", "consumerGroup": "other"}, True),
        (RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "topicB", "consumerGroup": "groupA"}, False),
        (RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "topicB", "consumerGroup": "groupB"}, True),
        (RequestCode.POP_MESSAGE, {"topic": "topicA", "consumerGroup": "groupB"}, False),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "groupA"}, False),
        (RequestCode.QUERY_MESSAGE, {"topic": "topicC"}, True),
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "anything"}, True),  # signed is enough
    ],
)
def test_topic_and_group_permissions(
    acl: AccessControl, code: int, fields: dict[str, str], allowed: bool
) -> None:
    remark = acl.check_remoting(request(code, fields, keys=USER), CLIENT)
    assert (remark is None) == allowed, remark


def test_heartbeat_needs_sub_on_every_group_and_topic_it_names(acl: AccessControl) -> None:
    def heartbeat(group: str, topic: str) -> bytes:
        consumer = ConsumerData(
            group_name=group,
            consume_type="CONSUME_PASSIVELY",
            message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscription_data_set=[SubscriptionData(topic=topic, sub_string="*")],
            unit_mode=False,
        )
        return encode_json_body(HeartbeatData(client_id="c", consumer_data_set=[consumer]))

    ok = heartbeat("groupC", "topicC")
    assert acl.check_remoting(request(34, {}, ok, keys=USER), CLIENT) is None
    for body in (heartbeat("groupA", "topicC"), heartbeat("groupC", "topicA")):
        assert acl.check_remoting(request(34, {}, body, keys=USER), CLIENT) is not None
    garbage = acl.check_remoting(request(34, {}, b"{not json", keys=USER), CLIENT)
    assert garbage is not None and "heartbeat" in garbage


def test_old_java_clients_sign_before_adding_the_unique_key_flag(acl: AccessControl) -> None:
    signed = request(RequestCode.QUERY_MESSAGE, {"topic": "topicC"}, keys=USER)
    assert signed.ext_fields is not None
    signed.ext_fields["_UNIQUE_KEY_QUERY"] = "true"
    signed.version = 399  # 4.9.3
    assert acl.check_remoting(signed, CLIENT) is None
    signed.version = 401  # 4.9.4 signs it
    assert acl.check_remoting(signed, CLIENT) is not None


def test_white_addresses(acl: AccessControl) -> None:
    # globally white: no keys at all, admin codes included (as RocketMQ)
    assert acl.check_remoting(request(215, {"topic": "t"}), "10.10.103.9:4000") is None
    # the admin account's white address: its key without a signature
    unsigned = request(215, {"topic": "t", "AccessKey": "rocketmq2"})
    assert acl.check_remoting(unsigned, "192.168.1.20:4000") is None
    assert acl.check_remoting(unsigned, "192.168.2.20:4000") is not None


def test_remoting_resources_follow_rocketmq() -> None:
    resources = remoting_resources(
        request(RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "G"})
    )
    assert resources == [Resource("topic", "T", SUB), Resource("group", "G", SUB)]
    assert remoting_resources(request(320, {"b": "T"})) == [Resource("topic", "T", PUB)]


@pytest.mark.parametrize(
    ("code", "fields"),
    [
        (RequestCode.SEND_REPLY_MESSAGE, {"topic": "T"}),
        (RequestCode.SEND_REPLY_MESSAGE_V2, {"b": "T"}),
    ],
)
def test_a_reply_needs_pub_on_its_topic(code: int, fields: dict[str, str]) -> None:
    assert remoting_resources(request(code, fields)) == [Resource("topic", "T", PUB)]


@pytest.mark.parametrize("code", [RequestCode.PEEK_MESSAGE, RequestCode.NOTIFICATION])
def test_peek_and_notification_need_sub_on_topic_and_group(code: int) -> None:
    resources = remoting_resources(request(code, {"topic": "T", "consumerGroup": "G"}))
    assert resources == [Resource("topic", "T", SUB), Resource("group", "G", SUB)]


def test_a_batch_ack_needs_sub_on_every_topic_and_group_in_its_body() -> None:
    body = (
        b'{"acks":[{"c":"G1","t":"T1","so":0,"q":0,"pt":1,"it":1,"b":"AQ=="},'
        b'{"consumerGroup":"G2","topic":"T2","startOffset":0,"queueId":0,"popTime":1,'
        b'"invisibleTime":1}]}'
    )
    resources = remoting_resources(request(RequestCode.BATCH_ACK_MESSAGE, {}, body))
    assert resources == [
        Resource("topic", "T1", SUB),
        Resource("group", "G1", SUB),
        Resource("topic", "T2", SUB),
        Resource("group", "G2", SUB),
    ]
    with pytest.raises(ValueError, match="batch ack body unreadable"):
        remoting_resources(request(RequestCode.BATCH_ACK_MESSAGE, {}, b"{"))


def test_queue_locks_need_sub_on_their_group(acl: AccessControl) -> None:
    def lock(group: str) -> bytes:
        return encode_json_body(LockBatchRequestBody(consumer_group=group, client_id="c"))

    for code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        assert acl.check_remoting(request(code, {}, lock("groupC"), keys=USER), CLIENT) is None
        refused = acl.check_remoting(request(code, {}, lock("groupA"), keys=USER), CLIENT)
        assert refused is not None and "group:groupA" in refused


def test_ipv6_clients_are_matched_by_host() -> None:
    acl = AccessControl(global_white=["::1"])
    assert acl.check_remoting(request(215, {"topic": "t"}), "::1:5000") is None
    assert acl.check_remoting(request(215, {"topic": "t"}), "::2:5000") is not None


def test_denials_are_logged_once_per_client_per_second(
    acl: AccessControl, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", "pocketmq.acl")
    for _ in range(5):
        acl.check_remoting(request(215, {"topic": "t"}), "127.0.0.9:1")
    lines = [r for r in caplog.records if "127.0.0.9:1" in r.getMessage()]
    assert len(lines) == 1
    assert acl.denied[215] == 5


# -- gRPC: the date window and replays ------------------------------------------------------

grpc = pytest.importorskip("grpc")

from pocketmq.broker.grpc.auth import (  # noqa: E402
    AuthError,
    GrpcAuth,
    PermissionDenied,
    grpc_resources,
    sign,
)


def grpc_metadata(date: str, request_id: str, keys: tuple[str, str] = USER) -> dict[str, str]:
    return {
        "x-mq-date-time": date,
        "x-mq-request-id": request_id,
        "authorization": f"MQv2-HMAC-SHA1 Credential={keys[0]}, SignedHeaders=x-mq-date-time, "
        f"Signature={sign(keys[1], date)}",
    }


def stamp(epoch_s: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch_s))


NOW = 1_800_000_000.0  # a fixed "now" for the window: no wall clock in these tests


@pytest.mark.parametrize(
    ("date", "accepted"),
    [
        (stamp(NOW), True),
        (stamp(NOW - 90), True),  # a client clock a little behind
        (stamp(NOW + 5.5 * 3600), True),  # Python client in UTC+05:30: local time as "Z"
        (stamp(NOW - 8 * 3600 + 60), True),  # UTC-08:00, one minute late
        (stamp(NOW - 3 * 86400), False),  # three days ago
        ("20200101T000000Z", False),
        (stamp(NOW - 20 * 3600), False),  # beyond any zone
        (stamp(NOW - 3600 - 450), False),  # 7.5 minutes off every zone offset
        ("not-a-date", False),
    ],
)
def test_grpc_dates_must_be_recent(acl: AccessControl, date: str, accepted: bool) -> None:
    auth = GrpcAuth(acl, now=lambda: NOW)
    metadata = grpc_metadata(date, "req-1")
    if accepted:
        assert auth.check(metadata, "127.0.0.1:1", "QueryRouteRequest", []) is not None
    else:
        with pytest.raises(AuthError):
            auth.check(metadata, "127.0.0.1:1", "QueryRouteRequest", [])


def test_grpc_replays_are_refused_but_calls_in_the_same_second_are_not(
    acl: AccessControl,
) -> None:
    auth = GrpcAuth(acl, now=lambda: NOW)
    date = stamp(NOW)
    auth.check(grpc_metadata(date, "a"), CLIENT, "SendMessageRequest", [])
    auth.check(grpc_metadata(date, "b"), CLIENT, "SendMessageRequest", [])  # same signature
    with pytest.raises(AuthError, match="already received"):
        auth.check(grpc_metadata(date, "a"), CLIENT, "SendMessageRequest", [])
    assert acl.allowed["SendMessageRequest"] == 2
    assert acl.denied["SendMessageRequest"] == 1


def test_grpc_permissions(acl: AccessControl) -> None:
    from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2

    auth = GrpcAuth(acl, now=lambda: NOW)
    send = service_pb2.SendMessageRequest(
        messages=[definition_pb2.Message(topic=definition_pb2.Resource(name="topicA"))]
    )
    assert grpc_resources(send) == [Resource("topic", "topicA", PUB)]
    with pytest.raises(PermissionDenied, match="topicA"):
        auth.check(
            grpc_metadata(stamp(NOW), "x"), CLIENT, "SendMessageRequest", grpc_resources(send)
        )
    receive = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name="groupC"),
        message_queue=definition_pb2.MessageQueue(topic=definition_pb2.Resource(name="topicC")),
    )
    assert auth.check(
        grpc_metadata(stamp(NOW), "y"), CLIENT, "ReceiveMessageRequest", grpc_resources(receive)
    )


def test_telemetry_settings_name_their_topics_and_group(acl: AccessControl) -> None:
    from pocketmq.broker.grpc.auth import settings_resources
    from pocketmq.broker.grpc.stubs import definition_pb2
    from pocketmq.broker.services.acl import Denied

    def topic(name: str) -> definition_pb2.Resource:
        return definition_pb2.Resource(name=name)

    publishing = definition_pb2.Settings(
        publishing=definition_pb2.Publishing(topics=[topic("topicB"), topic("topicC")])
    )
    assert settings_resources(publishing) == [
        Resource("topic", "topicB", PUB),
        Resource("topic", "topicC", PUB),
    ]
    with pytest.raises(Denied, match="topicC"):  # topicC is SUB only
        acl.authorize(acl.accounts["RocketMQ"], "Settings", settings_resources(publishing))
    subscription = definition_pb2.Settings(
        subscription=definition_pb2.Subscription(
            group=topic("groupC"),
            subscriptions=[definition_pb2.SubscriptionEntry(topic=topic("topicC"))],
        )
    )
    acl.authorize(acl.accounts["RocketMQ"], "Settings", settings_resources(subscription))
    assert acl.allowed["Settings"] == 1 and acl.denied["Settings"] == 1
