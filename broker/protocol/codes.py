"""Numbers of the RocketMQ 4.x remoting protocol.

Every value here is fixed by the Java implementation (``RequestCode``, ``ResponseCode``,
``RemotingSysResponseCode``, ``LanguageCode``, ``SerializeType``, ``MQVersion``,
``PullSysFlag``, ``PermName``); never renumber. ``MessageSysFlag`` is the record's
``store.record.SysFlag``.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag, StrEnum
from typing import Final

# ``sysFlag`` of messages (SEND header ``f`` and the stored record): the record's own flag bits,
# defined once with the record layout.
from pocketmq.store.record import SysFlag as MessageSysFlag

__all__ = [
    "DEFAULT_VERSION",
    "GO_CLIENT_VERSION",
    "RPC_ONEWAY",
    "RPC_TYPE",
    "ConsumeFromWhere",
    "ConsumeType",
    "ExpressionType",
    "LanguageCode",
    "MQVersion",
    "MessageModel",
    "MessageSysFlag",
    "Perm",
    "PullSysFlag",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "TransactionType",
]

# Flag masks. Java keeps the bit *indices* (RPC_TYPE = 0, RPC_ONEWAY = 1) and shifts them;
# here they are the masks themselves.
RPC_TYPE: Final = 0x1  # set: the command is a response
RPC_ONEWAY: Final = 0x2  # set: a request that gets no response


class SerializeType(IntEnum):
    """Header encoding, carried in the top byte of the frame's second word."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(IntEnum):
    """Sender's language. The byte goes in ROCKETMQ headers, the name in JSON headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13  # 5.x only; 4.9.x peers do not know it


class MQVersion(IntEnum):
    """Ordinals of Java's ``MQVersion.Version`` sent in the ``version`` field."""

    V3_0_11 = 37  # namesrv parses RegisterBrokerBody only from here on
    V4_0_0 = 213
    V4_1_0_SNAPSHOT = 232  # Java client refuses SQL92 pulls from older brokers
    V4_5_0 = 313
    V4_7_1 = 355
    V4_8_0 = 373
    V4_9_0 = 393
    V4_9_4 = 401  # namesrv sends standard (quoted-key) route JSON from here on
    V4_9_5 = 403
    V4_9_7 = 407
    V4_9_8 = 409
    V5_0_0 = 413
    V5_1_0 = 433
    V5_1_4 = 441
    V5_2_0 = 453
    V5_3_0 = 473
    V5_3_3 = 479


# The Go client always sends this, whatever its release.
GO_CLIENT_VERSION: Final = 317

# What we announce: a 4.9.x peer, new enough for standard route JSON and SQL92 pulls.
DEFAULT_VERSION: Final = int(MQVersion.V4_9_8)


class RequestCode(IntEnum):
    """Request codes (``RequestCode.java``). The arrow says who sends it."""

    # --- messages: produce / consume (client -> broker)
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    CONSUMER_SEND_MSG_BACK = 36
    SEND_MESSAGE_V2 = 310  # Java default for single sends
    SEND_BATCH_MESSAGE = 320
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    LITE_PULL_MESSAGE = 361
    RECALL_MESSAGE = 370  # 5.x

    # --- client membership, rebalance and locks
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    GET_CONSUMER_LIST_BY_GROUP = 38
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    CHECK_CLIENT_CONFIG = 46
    GET_CLIENT_CONFIG = 47
    QUERY_ASSIGNMENT = 400  # 5.x

    # --- transactions
    END_TRANSACTION = 37  # producer -> broker, oneway
    CHECK_TRANSACTION_STATE = 39  # broker -> producer, oneway

    # --- broker -> client
    NOTIFY_CONSUMER_IDS_CHANGED = 40  # oneway
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326

    # --- broker administration and replication
    UPDATE_AND_CREATE_TOPIC = 17
    UPDATE_AND_CREATE_TOPIC_LIST = 18
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    RESET_CONSUMER_OFFSET_IN_CONSUMER = 211
    RESET_CONSUMER_OFFSET_IN_BROKER = 212
    DELETE_TOPIC_IN_BROKER = 215
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    QUERY_CONSUME_TIME_SPAN = 303
    VIEW_BROKER_STATS_DATA = 315
    GET_BROKER_CONSUME_STATS = 317
    GET_ALL_PRODUCER_INFO = 328
    QUERY_TOPICS_BY_CONSUMER = 343
    GET_TOPIC_CONFIG = 351
    GET_SUBSCRIPTIONGROUP_CONFIG = 352
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    CLEAN_UNUSED_TOPIC = 316
    DELETE_EXPIRED_COMMITLOG = 329

    # --- name server
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    BROKER_HEARTBEAT = 904  # 5.x

    # --- POP consumption (5.x). These do not fit a signed short: JSON headers only.
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    POP_ROLLBACK = 200056
    POP_LITE_MESSAGE = 200070  # a lite consumer's pop (PopLiteMessageProcessor)
    LITE_SUBSCRIPTION_CTL = 200071  # a lite consumer's subscriptions
    BATCH_ACK_MESSAGE = 200151

    # --- pocketmq's own admin requests (no RocketMQ request uses 9000-9099)
    POCKETMQ_CLOCK = 9001  # read, set or advance the broker's manual clock
    POCKETMQ_MESSAGE_INFO = 9002  # a message with its state and place (JSON body)
    POCKETMQ_DLQ = 9003  # list a group's dead-letter queue or resend from it (JSON body)
    POCKETMQ_TX = 9004  # list pending transactions or check one now (JSON body)


class ResponseCode(IntEnum):
    """Response codes (``RemotingSysResponseCode`` 0-4, ``ResponseCode`` the rest)."""

    # --- generic (RemotingSysResponseCode)
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4

    # --- send / store
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18

    # --- pull / offsets / subscriptions
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29

    # --- transactions and units
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202  # sic
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207

    # --- POP (5.x) and broker state
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    BROKER_NOT_EXIST = 211
    BROKER_DISPATCH_NOT_COMPLETE = 212
    BROADCAST_CONSUMPTION = 213
    FLOW_CONTROL = 215
    NOT_LEADER_FOR_QUEUE = 501
    ILLEGAL_OPERATION = 604
    GO_AWAY = 1500
    LMQ_QUOTA_EXCEEDED = 2017  # a new LMQ past maxLmqConsumeQueueNum
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED = 2018  # a client's lite topics past its quota

    # --- client-local (never on the wire; Java uses them for its own failures)
    RPC_UNKNOWN = -1000
    RPC_ADDR_IS_NULL = -1002
    RPC_SEND_TO_CHANNEL_FAILED = -1004
    RPC_TIME_OUT = -1006


class PullSysFlag(IntFlag):
    """``sysFlag`` of PULL_MESSAGE requests."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2  # long polling
    SUBSCRIPTION = 0x4  # the ``subscription`` field is valid
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10  # sent as LITE_PULL_MESSAGE (361)


class TransactionType(IntEnum):
    """``commitOrRollback`` of END_TRANSACTION (the sysFlag transaction bits)."""

    NOT = 0  # unknown: the broker will check back
    PREPARED = 0x4
    COMMIT = 0x8
    ROLLBACK = 0xC


class Perm(IntFlag):
    """Topic/broker permission bits (``PermName``); 6 = read + write."""

    INHERIT = 0x1
    WRITE = 0x2
    READ = 0x4
    PRIORITY = 0x8


class ConsumeType(StrEnum):
    """``ConsumerData.consumeType`` (enum name on the wire)."""

    CONSUME_ACTIVELY = "CONSUME_ACTIVELY"  # pull
    CONSUME_PASSIVELY = "CONSUME_PASSIVELY"  # push
    CONSUME_POP = "CONSUME_POP"


class MessageModel(StrEnum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(StrEnum):
    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ExpressionType(StrEnum):
    TAG = "TAG"
    SQL92 = "SQL92"
