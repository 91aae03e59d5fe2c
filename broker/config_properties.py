"""Broker settings as RocketMQ users write them: ``broker.conf`` keys, units and values, mapped
onto ``BrokerConfig`` and its ``StoreConfig``. The command line (``pocketmq broker -c``), the
environment (``POCKETMQ_*``) and GET/UPDATE_BROKER_CONFIG (26/25) all go through this table.

Each setting has one key: RocketMQ's name (``BrokerConfig``, ``MessageStoreConfig``,
``NettyServerConfig``) where RocketMQ has the setting, in RocketMQ's unit (``fileReservedTime``
in hours, ``transactionTimeOut`` in milliseconds, ``timerMaxDelaySec`` in seconds...), else the
camelCase of the field's name. Its environment variable is ``POCKETMQ_`` and the field's name in
capitals (``POCKETMQ_FLUSH=sync``, ``POCKETMQ_FILE_RESERVED_TIME_H=12``), with the value in the
field's own unit and form (the unit ends the name). An empty value sets an optional setting to
none (``storePathRootDir=``: an in-memory store).

Order: defaults < the file < the environment < command-line flags.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.protocol.properties import (
    PropertiesSyntaxError,
    parse_entries,
    property_line,
)
from pocketmq.store.durations import parse_delay_levels

__all__ = [
    "DERIVED",
    "IGNORED",
    "SETTINGS",
    "ConfigProblem",
    "FileSettings",
    "Setting",
    "apply_settings",
    "config_properties",
    "environment_settings",
    "field_value",
    "find_setting",
    "markdown_rows",
    "read_config_file",
    "rewrite_config_file",
]

_FILE_SIZE_MAX = 1024 * 1024  # a broker.conf is a few KiB; this stops a wrong path early
_CONSUME_QUEUE_ENTRY_SIZE = 20  # bytes per consume-queue entry (mappedFileSizeConsumeQueue)


class ConfigProblem(ValueError):
    """A setting that cannot be used, said in one line: where, which key, what was expected."""


# -- kinds of value: text in a file or the environment <-> a field's value ----------------------


class Kind:
    """How a value is written: ``parse`` reads the file's (RocketMQ's) form, ``parse_env`` the
    environment's (the field's own form), ``format`` writes the file's form."""

    expected = "a value"

    def parse(self, text: str) -> Any:
        raise NotImplementedError

    def parse_env(self, text: str) -> Any:
        return self.parse(text)

    def format(self, value: Any) -> str:
        return str(value)


_INTEGER = re.compile(r"[+-]?\d+")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")


@dataclasses.dataclass(frozen=True)
class Text(Kind):
    allow_empty: bool = False
    expected: str = "some text"

    def parse(self, text: str) -> str:
        text = text.strip()  # RocketMQ trims strings (MixAll.properties2Object)
        if not text and not self.allow_empty:
            raise ValueError("expected some text, got nothing")
        return text


@dataclasses.dataclass(frozen=True)
class Integer(Kind):
    minimum: int = 0
    maximum: int = 2**63 - 1

    @property
    def expected(self) -> str:  # type: ignore[override]
        if self.maximum < 2**63 - 1:
            return f"a whole number from {self.minimum} to {self.maximum}"
        return f"a whole number, at least {self.minimum}"

    def parse(self, text: str) -> int:
        text = text.strip()
        if not _INTEGER.fullmatch(text) or not self.minimum <= int(text) <= self.maximum:
            raise ValueError(f"expected {self.expected}, got {text!r}")
        return int(text)


@dataclasses.dataclass(frozen=True)
class Number(Kind):
    """A number; ``scale``: how many of the field's unit one of the file's unit is
    (``registerNameServerPeriod`` in ms -> ``register_interval_s``: 0.001). ``minimum`` is in
    the field's unit."""

    minimum: float = 0
    scale: float = 1
    integral: bool = False  # the field is an int (timerMaxDelaySec -> timer_max_delay_ms)

    @property
    def expected(self) -> str:  # type: ignore[override]
        return self._expected(self.scale)

    def _expected(self, scale: float) -> str:
        return f"a number, at least {self.minimum / scale:g}"

    def _read(self, text: str, scale: float) -> float | int:
        text = text.strip()
        value = float(text) * scale if _NUMBER.fullmatch(text) else None
        if value is None or value < self.minimum - 1e-12:
            raise ValueError(f"expected {self._expected(scale)}, got {text!r}")
        return round(value) if self.integral else value

    def parse(self, text: str) -> float | int:
        return self._read(text, self.scale)

    def parse_env(self, text: str) -> float | int:
        return self._read(text, 1)

    def format(self, value: Any) -> str:
        shown = value / self.scale
        return str(round(shown)) if abs(shown - round(shown)) < 1e-6 else repr(shown)


@dataclasses.dataclass(frozen=True)
class Flag(Kind):
    expected: str = "true or false"

    def parse(self, text: str) -> bool:
        # Java's Boolean.parseBoolean takes anything but "true" for false: a typo (ture) would
        # silently turn a setting off. Here it is an error.
        word = text.strip().lower()
        if word not in ("true", "false"):
            raise ValueError(f"expected true or false, got {text.strip()!r}")
        return word == "true"

    def format(self, value: Any) -> str:
        return "true" if value else "false"


@dataclasses.dataclass(frozen=True)
class Choice(Kind):
    """One of a few words; ``words``: the file's word -> the field's value."""

    words: tuple[tuple[str, str], ...]

    @property
    def expected(self) -> str:  # type: ignore[override]
        return "one of " + ", ".join(word for word, _ in self.words)

    def parse(self, text: str) -> str:
        for word, value in self.words:
            if text.strip().lower() == word.lower():
                return value
        raise ValueError(f"expected {self.expected}, got {text.strip()!r}")

    def parse_env(self, text: str) -> str:
        values = [value for _, value in self.words]
        if text.strip().lower() in values:
            return text.strip().lower()
        return self.parse(text)

    def format(self, value: Any) -> str:
        return next(word for word, field_value in self.words if field_value == value)


@dataclasses.dataclass(frozen=True)
class DelayLevels(Kind):
    expected: str = 'levels like "1s 5s 10s 30s 1m 2h"'

    def parse(self, text: str) -> str:
        text = " ".join(text.split())
        try:
            parse_delay_levels(text)
        except ValueError as error:
            raise ValueError(f"expected {self.expected}: {error}") from None
        return text


@dataclasses.dataclass(frozen=True)
class DeleteWhen(Kind):
    expected: str = 'hours of the day 0-23, ";"-separated, like "04" or "04;16"'

    def parse(self, text: str) -> str:
        text = text.strip()
        hours = text.split(";")
        if not text or not all(h.strip().isdigit() and int(h) < 24 for h in hours):
            raise ValueError(f"expected {self.expected}, got {text!r}")
        return text


@dataclasses.dataclass(frozen=True)
class Addresses(Kind):
    """``host:port;host:port`` -> a list (RocketMQ's namesrvAddr)."""

    expected: str = '"host:port" addresses separated by ";"'

    def parse(self, text: str) -> list[str]:
        addresses = [a.strip() for a in text.split(";") if a.strip()]
        for address in addresses:
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit() or int(port) > 65535:
                raise ValueError(f"expected {self.expected}, got {address!r}")
        return addresses

    def format(self, value: Any) -> str:
        return ";".join(value)


@dataclasses.dataclass(frozen=True)
class Keys(Kind):
    """``ak:sk;ak2:sk2`` -> {access key: secret key}. Written with the secrets hidden."""

    expected: str = '"accessKey:secretKey" pairs separated by ";"'

    def parse(self, text: str) -> dict[str, str]:
        keys = {}
        for pair in (p.strip() for p in text.split(";")):
            if not pair:
                continue
            access, colon, secret = pair.partition(":")
            if not colon or not access.strip() or not secret.strip():
                raise ValueError(f"expected {self.expected}, got a pair without both")
            keys[access.strip()] = secret.strip()
        return keys

    def format(self, value: Any) -> str:
        return ";".join(f"{access}:******" for access in value)


@dataclasses.dataclass(frozen=True)
class PerEntry(Kind):
    """A size in bytes (the file) -> entries of ``size`` bytes (the field)."""

    size: int = _CONSUME_QUEUE_ENTRY_SIZE

    @property
    def expected(self) -> str:  # type: ignore[override]
        return f"a positive number of bytes, a multiple of {self.size}"

    def parse(self, text: str) -> int:
        text = text.strip()
        if not text.isdigit() or int(text) <= 0 or int(text) % self.size:
            raise ValueError(f"expected {self.expected}, got {text!r}")
        return int(text) // self.size

    def parse_env(self, text: str) -> int:
        return Integer(1).parse(text)

    def format(self, value: Any) -> str:
        return str(value * self.size)


@dataclasses.dataclass(frozen=True)
class Optional(Kind):
    """An optional setting: an empty value is none."""

    inner: Kind
    to_field: Any = None  # e.g. Path: the type the text becomes

    @property
    def expected(self) -> str:  # type: ignore[override]
        return f"{self.inner.expected}, or nothing for none"

    def _wrap(self, value: Any) -> Any:
        return self.to_field(value) if self.to_field is not None else value

    def parse(self, text: str) -> Any:
        return None if not text.strip() else self._wrap(self.inner.parse(text))

    def parse_env(self, text: str) -> Any:
        return None if not text.strip() else self._wrap(self.inner.parse_env(text))

    def format(self, value: Any) -> str:
        return "" if value is None else self.inner.format(value)


_PORT = Integer(0, 65535)
_RATIO = Integer(0, 100)
_POSITIVE = Integer(1)
_MS = Integer(1)


# -- the table ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Setting:
    key: str  # the name in broker.conf and in GET/UPDATE_BROKER_CONFIG bodies
    field: str  # the field of BrokerConfig: "port", "store.delay_levels", "store.limits.x"
    kind: Kind
    unit: str  # the key's unit: "ms", "s", "h", "bytes" or ""
    live: bool  # UPDATE_BROKER_CONFIG may change it while the broker runs
    doc: str
    aliases: tuple[str, ...] = ()  # older spellings read too (4.x's mapedFileSizeCommitLog)
    rocketmq: bool = True  # the key is RocketMQ's (False: pocketmq's camelCase field name)

    @property
    def env(self) -> str:
        return "POCKETMQ_" + self.field.rsplit(".", 1)[-1].upper()


def _s(key: str, field: str, kind: Kind, unit: str, live: bool, doc: str, **kw: Any) -> Setting:
    return Setting(key, field, kind, unit, live, doc, **kw)


def _p(key: str, field: str, kind: Kind, unit: str, live: bool, doc: str, **kw: Any) -> Setting:
    return Setting(key, field, kind, unit, live, doc, rocketmq=False, **kw)


_S_FROM_MS = Number(minimum=0.001, scale=0.001)  # at least 1 ms  # a key in ms, a field in seconds

SETTINGS: tuple[Setting, ...] = (
    # identity and network
    _s("brokerName", "broker_name", Text(), "", False, "the broker's name"),
    _s("brokerClusterName", "cluster_name", Text(), "", False, "its cluster"),
    _s("brokerId", "broker_id", Integer(0), "", False, "0 = master"),
    _s("bindAddress", "host", Text(), "", False, "the address to listen on"),
    _s("listenPort", "port", _PORT, "", False, "the remoting port (0 = any free one)"),
    _s("brokerIP1", "advertised_host", Optional(Text()), "", False, "the host clients are told"),
    _p(
        "advertisedPort",
        "advertised_port",
        Optional(Integer(1, 65535)),
        "",
        False,
        "the port clients are told (a mapped port; default listenPort)",
    ),
    _s("namesrvAddr", "namesrv_addrs", Addresses(), "", False, "name servers, ';'-separated"),
    _p("vipChannel", "vip_channel", Flag(), "", False, "also serve on port - 2 (fastListenPort)"),
    _p("seed", "seed", Optional(Integer(0)), "", False, "repeatable runs: seeded choices, clock"),
    _s("regionId", "region_id", Text(), "", True, "MSG_REGION of sent messages"),
    _s("brokerPermission", "broker_permission", Integer(0, 7), "", True, "6 = read + write"),
    _s(
        "brokerConfigPath",
        "config_file",
        Optional(Text(), Path),
        "",
        False,
        "where UPDATE_BROKER_CONFIG saves changes (default: the -c file)",
    ),
    # the store
    _s(
        "storePathRootDir",
        "data_dir",
        Optional(Text(), Path),
        "",
        False,
        "the store folder (empty: in memory)",
    ),
    _s(
        "flushDiskType",
        "flush",
        Choice((("SYNC_FLUSH", "sync"), ("ASYNC_FLUSH", "async"))),
        "",
        False,
        "SYNC_FLUSH: a send is acknowledged after fsync",
    ),
    _s("flushIntervalCommitLog", "flush_interval_ms", _MS, "ms", True, "async flush interval"),
    _s("syncFlushTimeout", "sync_flush_timeout_ms", _MS, "ms", True, "then FLUSH_DISK_TIMEOUT"),
    _s(
        "flushIntervalConsumeQueue",
        "flush_all_interval_ms",
        _MS,
        "ms",
        True,
        "consume queues, index and checkpoint flush interval",
    ),
    _s(
        "mappedFileSizeCommitLog",
        "store.commitlog_segment_size",
        _POSITIVE,
        "bytes",
        False,
        "commitlog segment size",
        aliases=("mapedFileSizeCommitLog",),
    ),
    _s(
        "mappedFileSizeConsumeQueue",
        "store.consume_queue_entries_per_file",
        PerEntry(),
        "bytes",
        False,
        "consume-queue file size (20 bytes per entry)",
        aliases=("mapedFileSizeConsumeQueue",),
    ),
    _s("maxHashSlotNum", "store.index_slot_count", _POSITIVE, "", False, "index hash slots"),
    _s("maxIndexNum", "store.index_entry_count", Integer(2), "", False, "index entries per file"),
    _s("messageIndexEnable", "store.message_index_enable", Flag(), "", False, "index keys"),
    _s("maxMessageSize", "store.limits.body_size_max", _POSITIVE, "bytes", False, "body size max"),
    _p(
        "propertiesSizeMax",
        "store.limits.properties_size_max",
        Integer(1, 32767),
        "bytes",
        False,
        "properties size max (a short on disk)",
    ),
    _p("topicSizeMax", "store.limits.topic_size_max", Integer(1, 127), "", False, "topic length"),
    _p(
        "systemTopicSizeMax",
        "store.limits.system_topic_size_max",
        Integer(1, 255),
        "",
        False,
        "length of %RETRY% topics",
    ),
    _s("enabledAppendPropCRC", "store.append_record_crc", Flag(), "", False, "a CRC per record"),
    _s("checkCRCOnRecover", "store.check_crc_on_recover", Flag(), "", False, "check CRCs"),
    _p(
        "recoveryScan",
        "store.recovery_scan",
        Choice((("tail", "tail"), ("full", "full"))),
        "",
        False,
        "tail: from the checkpoint; full: every segment",
    ),
    _s("messageDelayLevel", "store.delay_levels", DelayLevels(), "", False, "delay levels"),
    # retention and disk
    _s("fileReservedTime", "file_reserved_time_h", Number(), "h", True, "keep segments this long"),
    _s("deleteWhen", "delete_when", DeleteWhen(), "", True, "hours when old segments go"),
    _s("diskMaxUsedSpaceRatio", "disk_max_used_space_ratio", _RATIO, "%", True, "clean above"),
    _s(
        "diskSpaceCleanForciblyRatio",
        "disk_space_clean_forcibly_ratio",
        _RATIO,
        "%",
        True,
        "clean forcibly above (30-85)",
    ),
    _s(
        "diskSpaceWarningLevelRatio",
        "disk_space_warning_level_ratio",
        _RATIO,
        "%",
        True,
        "refuse writes above (35-90)",
    ),
    _s("cleanFileForciblyEnable", "clean_file_forcibly", Flag(), "", True, "may drop unread"),
    _s("deleteFileBatchMax", "delete_file_batch_max", _POSITIVE, "", True, "segments per pass"),
    _s(
        "cleanResourceInterval",
        "clean_resource_interval_s",
        _S_FROM_MS,
        "ms",
        True,
        "retention pass interval",
    ),
    # topics, groups, consumers
    _s("autoCreateTopicEnable", "auto_create_topic", Flag(), "", True, "create topics on send"),
    _s("defaultTopicQueueNums", "default_topic_queue_nums", _POSITIVE, "", True, "their queues"),
    _s(
        "autoCreateSubscriptionGroup",
        "auto_create_subscription_group",
        Flag(),
        "",
        True,
        "create groups on first use",
    ),
    _s("longPollingEnable", "long_polling", Flag(), "", True, "hold pulls until a message"),
    _s("shortPollingTimeMills", "short_polling_ms", _MS, "ms", True, "else wait this long"),
    _p("longPollHoldsMax", "long_poll_holds_max", _POSITIVE, "", True, "pulls held at once"),
    _p("pullBatchMax", "pull_batch_max", _POSITIVE, "", True, "messages per pull, max"),
    _p("pullBytesMax", "pull_bytes_max", _POSITIVE, "bytes", True, "bytes per pull, max"),
    _s("enablePropertyFilter", "property_filter", Flag(), "", True, "SQL92 subscriptions"),
    _s(
        "maxLmqConsumeQueueNum",
        "max_lmq_consume_queue_num",
        _POSITIVE,
        "",
        True,
        "LMQs (lite topics) held",
    ),
    _p("batchSizeMax", "batch_size_max", _POSITIVE, "bytes", True, "SEND_BATCH_MESSAGE body max"),
    _s(
        "registerNameServerPeriod",
        "register_interval_s",
        _S_FROM_MS,
        "ms",
        True,
        "registration interval",
    ),
    _s(
        "flushConsumerOffsetInterval",
        "consumer_offset_persist_s",
        _S_FROM_MS,
        "ms",
        True,
        "consumer offsets saved every",
    ),
    _s(
        "channelExpiredTimeout",
        "client_channel_expiry_s",
        _S_FROM_MS,
        "ms",
        True,
        "a silent client is dropped after",
    ),
    _p("lockExpiryMs", "lock_expiry_ms", _MS, "ms", True, "a queue lock lasts (lockMaxLiveTime)"),
    _p("popInFlightMax", "pop_in_flight_max", _POSITIVE, "", True, "POP messages lent, all groups"),
    # delay, timer, transactions
    _s(
        "timerMaxDelaySec",
        "timer_max_delay_ms",
        Number(minimum=1000, scale=1000, integral=True),
        "s",
        True,
        "a timer message's delay max",
    ),
    _s("transactionTimeOut", "transaction_timeout_ms", _MS, "ms", True, "first check after"),
    _s("transactionCheckInterval", "transaction_check_interval_ms", _MS, "ms", True, "then every"),
    _s("transactionCheckMax", "transaction_check_max", _POSITIVE, "", True, "checks, then dropped"),
    # the gRPC front, TLS, ACL
    _p("grpcPort", "grpc_port", Optional(_PORT), "", False, "the 5.x gRPC port (empty: off)"),
    _p("httpPort", "http_port", Optional(_PORT), "", False, "the HTTP front's port (empty: off)"),
    _p("grpcAutoCreateTopics", "grpc_auto_create_topics", Flag(), "", False, "on a route query"),
    _p(
        "grpcTls",
        "grpc_tls",
        Choice((("permissive", "permissive"), ("enforcing", "enforcing"), ("off", "off"))),
        "",
        False,
        "TLS on the gRPC port",
    ),
    _p("tlsCert", "tls_cert", Optional(Text(), Path), "", False, "PEM certificate"),
    _p("tlsKey", "tls_key", Optional(Text(), Path), "", False, "its PEM key"),
    _p("remotingTls", "remoting_tls", Flag(), "", False, "TLS on the remoting port too"),
    _p("accessKeys", "access_keys", Keys(), "", False, "admin accounts ak:sk;ak:sk"),
    _p("aclFile", "acl_file", Optional(Text(), Path), "", False, "RocketMQ's plain_acl.yml"),
)

# Fields no key sets, and why (the completeness test reads this).
DERIVED: dict[str, str] = {
    "store.store_host": "the broker sets it from brokerIP1 (or bindAddress) and listenPort",
}

_WHY_REPLICATION = "no replication in pocketmq"
_WHY_THREADS = "no thread pools in pocketmq (one event loop)"
_WHY_PATHS = "every store file lives under storePathRootDir"
_WHY_FLUSH = "flushes are timed by flushIntervalCommitLog / flushIntervalConsumeQueue"
# RocketMQ keys pocketmq knows and does not use: named in the start WARNING as ignored.
IGNORED: dict[str, str] = {
    "brokerRole": _WHY_REPLICATION,
    "brokerIP2": _WHY_REPLICATION,
    "haListenPort": _WHY_REPLICATION,
    "haSendHeartbeatInterval": _WHY_REPLICATION,
    "slaveReadEnable": _WHY_REPLICATION,
    "enableSlaveActingMaster": _WHY_REPLICATION,
    "enableControllerMode": _WHY_REPLICATION,
    "controllerAddr": _WHY_REPLICATION,
    "enableDLegerCommitLog": _WHY_REPLICATION,
    "dLegerGroup": _WHY_REPLICATION,
    "dLegerPeers": _WHY_REPLICATION,
    "dLegerSelfId": _WHY_REPLICATION,
    "storePathCommitLog": _WHY_PATHS,
    "storePathConsumeQueue": _WHY_PATHS,
    "storePathIndex": _WHY_PATHS,
    "storeCheckpoint": _WHY_PATHS,
    "abortFile": _WHY_PATHS,
    "rocketmqHome": "nothing is read from a RocketMQ installation",
    "sendMessageThreadPoolNums": _WHY_THREADS,
    "pullMessageThreadPoolNums": _WHY_THREADS,
    "adminBrokerThreadPoolNums": _WHY_THREADS,
    "serverWorkerThreads": _WHY_THREADS,
    "serverSelectorThreads": _WHY_THREADS,
    "clientWorkerThreads": _WHY_THREADS,
    "useReentrantLockWhenPutMessage": _WHY_THREADS,
    "waitTimeMillsInSendQueue": _WHY_THREADS,
    "sendThreadPoolQueueCapacity": _WHY_THREADS,
    "pullThreadPoolQueueCapacity": _WHY_THREADS,
    "osPageCacheBusyTimeOutMills": "no page-cache busy check",
    "transientStorePoolEnable": "no off-heap write buffer",
    "commitIntervalCommitLog": "no off-heap write buffer",
    "flushCommitLogLeastPages": _WHY_FLUSH,
    "flushConsumeQueueLeastPages": _WHY_FLUSH,
    "flushCommitLogThoroughInterval": _WHY_FLUSH,
    "flushConsumeQueueThoroughInterval": _WHY_FLUSH,
    "warmMapedFileEnable": "segments are not prefaulted this way",
    "maxTransferCountOnMessageInMemory": "use pullBatchMax",
    "maxTransferBytesOnMessageInMemory": "use pullBytesMax",
    "maxTransferCountOnMessageInDisk": "use pullBatchMax",
    "maxTransferBytesOnMessageInDisk": "use pullBytesMax",
    "accessMessageInMemoryMaxRatio": "no memory/disk distinction",
    "deleteCommitLogFilesInterval": "segments go in batches of deleteFileBatchMax",
    "deleteConsumeQueueFilesInterval": "consume queues are cut with their segments",
    "destroyMapedFileIntervalForcibly": "files are not memory-mapped",
    "redeleteHangedFileInterval": "files are not memory-mapped",
    "aclEnable": "set aclFile (plain_acl.yml) or accessKeys to turn ACL on",
    "traceTopicEnable": "no trace topic",
    "msgTraceTopicName": "no trace topic",
    "fetchNamesrvAddrByAddressServer": "name servers come from namesrvAddr",
    "timerWheelEnable": "the timer is always on",
    "timerPrecisionMs": "the timer is exact to the millisecond",
    "enableLmq": "LMQs (lite topics) are always on",
    "enableMultiDispatch": "LMQs (lite topics) are always on",
    "duplicationEnable": _WHY_REPLICATION,
    "storeType": "one store type",
    "isolateLogEnable": "one log",
    "serverChannelMaxIdleTimeSeconds": "use --limit idle_timeout_s",
    "serverSocketSndBufSize": "the kernel sizes socket buffers",
    "serverSocketRcvBufSize": "the kernel sizes socket buffers",
    "notifyConsumerIdsChangedEnable": "consumers are always told",
    "rejectTransactionMessage": "transactions are always taken",
    "brokerTopicEnable": "no per-broker route topic",
    "clusterTopicEnable": "no per-cluster route topic",
    "enableCalcFilterBitMap": "SQL92 filters evaluate every message",
    "maxErrorRateOfBloomFilter": "SQL92 filters evaluate every message",
    "autoDeleteUnusedStats": "no stats tables",
    "listenPortHA": _WHY_REPLICATION,
}

_BY_KEY: dict[str, Setting] = {}
for _setting in SETTINGS:
    for _name in (_setting.key, *_setting.aliases):
        assert _name not in _BY_KEY, _name
        _BY_KEY[_name] = _setting
_BY_FIELD = {setting.field: setting for setting in SETTINGS}
assert len(_BY_FIELD) == len(SETTINGS)
assert not set(IGNORED) & set(_BY_KEY)


def find_setting(key: str) -> Setting | None:
    """The setting a key (or an older spelling of it) names; None for an unknown key."""
    return _BY_KEY.get(key)


# -- reading ------------------------------------------------------------------------------------


@dataclasses.dataclass
class FileSettings:
    """What a broker.conf sets: field -> value, and the keys that set nothing (with lines)."""

    path: Path
    values: dict[str, Any]
    unknown: list[tuple[str, int]]
    ignored: list[tuple[str, int]]

    def warning(self) -> str | None:
        """One line naming every key that set nothing, or None when there is none."""
        parts = []
        if self.unknown:
            names = ", ".join(f"{key} (line {line})" for key, line in self.unknown)
            parts.append(f"unknown keys, ignored: {names}")
        if self.ignored:
            names = ", ".join(f"{key} (line {line}: {IGNORED[key]})" for key, line in self.ignored)
            parts.append(f"RocketMQ settings pocketmq does not use, ignored: {names}")
        return f"{self.path}: {'; '.join(parts)}" if parts else None


def read_config_file(path: str | os.PathLike[str]) -> FileSettings:
    """Read a broker.conf; ``ConfigProblem`` ("path:line: key: expected ...") for a value that
    is not what its key takes, or a file that cannot be read."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > _FILE_SIZE_MAX:
            raise ConfigProblem(f"{path}: {size} bytes, more than a config file's {_FILE_SIZE_MAX}")
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise ConfigProblem(f"{path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigProblem(
            f"{path}: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    try:
        entries = parse_entries(text)
    except PropertiesSyntaxError as error:
        raise ConfigProblem(f"{path}:{error.line}: {error.problem}") from None
    settings = FileSettings(path, {}, [], [])
    for entry in entries:
        setting = _BY_KEY.get(entry.key)
        if setting is None:
            target = settings.ignored if entry.key in IGNORED else settings.unknown
            target.append((entry.key, entry.first_line))
            continue
        try:
            settings.values[setting.field] = setting.kind.parse(entry.value)
        except ValueError as error:
            raise ConfigProblem(f"{path}:{entry.first_line}: {entry.key}: {error}") from None
    return settings


def environment_settings(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Field -> value for every ``POCKETMQ_<FIELD>`` variable set (in the field's own unit);
    ``ConfigProblem`` ("POCKETMQ_X: expected ...") for a value that is not one."""
    environ = os.environ if environ is None else environ
    values = {}
    for setting in SETTINGS:
        text = environ.get(setting.env)
        if text is None:
            continue
        try:
            values[setting.field] = setting.kind.parse_env(text)
        except ValueError as error:
            raise ConfigProblem(f"{setting.env}: {error}") from None
    return values


def apply_settings(base: BrokerConfig, *layers: Mapping[str, Any]) -> BrokerConfig:
    """``base`` with each layer's field values set on it, later layers winning. A store setting
    the store refuses (a segment too small for the largest message) is a ``ConfigProblem``."""
    values: dict[str, Any] = {}
    for layer in layers:
        values.update(layer)
    broker = {k: v for k, v in values.items() if "." not in k}
    store = {k[6:]: v for k, v in values.items() if k.startswith("store.") and k.count(".") == 1}
    limits = {k[13:]: v for k, v in values.items() if k.startswith("store.limits.")}
    try:
        if limits:
            store["limits"] = msgspec.structs.replace(base.store.limits, **limits)
        if store:
            broker["store"] = msgspec.structs.replace(base.store, **store)
    except ValueError as error:
        raise ConfigProblem(f"store settings: {error}") from None
    return msgspec.structs.replace(base, **broker)


def field_value(config: BrokerConfig, field: str) -> Any:
    value: Any = config
    for part in field.split("."):
        value = getattr(value, part)
    return value


def config_properties(config: BrokerConfig) -> list[tuple[str, str]]:
    """Every setting as RocketMQ names and writes it, sorted by key (GET_BROKER_CONFIG)."""
    pairs = [(s.key, s.kind.format(field_value(config, s.field))) for s in SETTINGS]
    return sorted(pairs)


# -- writing changes back -----------------------------------------------------------------------


def rewrite_config_file(path: Path, changes: Mapping[str, str]) -> None:
    """Set ``changes`` (key -> value text) in a broker.conf: each key's line is replaced in
    place (comments and the other lines kept; an older spelling of a key counts as it), and
    keys it lacks are added at the end. Written to a new file, synced, then renamed over."""
    text = path.read_bytes().decode("utf-8") if path.exists() else ""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    pending = dict(changes)
    replaced: dict[int, str | None] = {}  # 0-based first line -> new text; None: dropped
    for entry in parse_entries(text):
        setting = _BY_KEY.get(entry.key)
        key = setting.key if setting is not None else entry.key
        if key not in changes:
            continue
        new = property_line(key, changes[key]) if key in pending else None  # a repeat: gone
        pending.pop(key, None)
        replaced[entry.first_line - 1] = new
        for extra in range(entry.first_line, entry.last_line):
            replaced[extra] = None
    out: list[str] = []
    for index, line in enumerate(lines):
        new_line = replaced.get(index, line)
        if new_line is not None:
            out.append(new_line)
    out.extend(property_line(key, value) for key, value in pending.items())
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        file.write("".join(line + "\n" for line in out))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def markdown_rows(settings: Iterable[Setting] = SETTINGS) -> list[str]:
    """The table of settings as markdown rows: key, origin, field, environment variable, unit,
    default, changeable live, meaning (docs/configuration.md is checked against them)."""
    rows = []
    defaults = BrokerConfig()
    for s in settings:
        key = f"`{s.key}`" + "".join(f" (or `{alias}`)" for alias in s.aliases)
        default = s.kind.format(field_value(defaults, s.field))
        cells = (
            key,
            "RocketMQ" if s.rocketmq else "pocketmq",
            f"`{s.field}`",
            f"`{s.env}`",
            s.unit or "–",
            f"`{default}`" if default else "(none)",
            "yes" if s.live else "no",
            s.doc,
        )
        rows.append("| " + " | ".join(cells) + " |")
    return rows
