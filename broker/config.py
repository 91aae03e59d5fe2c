"""Broker settings. Every limit is a named setting; defaults follow RocketMQ where it has one."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from pocketmq.store.config import StoreConfig

__all__ = ["BrokerConfig"]


class BrokerConfig(msgspec.Struct, kw_only=True):
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    broker_id: int = 0  # 0 = master
    host: str = "127.0.0.1"
    port: int = 10911
    # RocketMQ's fastListenPort, the "VIP channel": the same service on port - 2 (10909), where
    # 4.x clients (sendMessageWithVIPChannel, on by default before 4.5) and the dashboard send.
    # With port 0 it gets a free port of its own; taken, the broker goes on without it.
    vip_channel: bool = True
    # The address clients are told to use (routes, offset message IDs); default host:port.
    advertised_host: str | None = None
    # The port told with it (``--advertise HOST:PORT``): a container's port mapped to another
    # on the host. The broker still listens on ``port``; None: ``port``.
    advertised_port: int | None = None
    namesrv_addrs: list[str] = []
    # Repeatable runs (tests): the broker's random choices from random.Random(seed), and a
    # manual clock starting at a fixed time when none is given (Broker(seed=...), --seed).
    seed: int | None = None
    data_dir: Path | None = None  # None: an in-memory store
    store: StoreConfig = StoreConfig()
    # RocketMQ's flushDiskType. sync: a send is acknowledged after fsync (group commit).
    flush: Literal["sync", "async"] = "async"
    flush_interval_ms: int = 500  # flushIntervalCommitLog
    sync_flush_timeout_ms: int = 5000  # syncFlushTimeout -> FLUSH_DISK_TIMEOUT
    # Consume queues, index and checkpoint are flushed this often (flushIntervalConsumeQueue).
    flush_all_interval_ms: int = 1000
    auto_create_topic: bool = True  # autoCreateTopicEnable
    default_topic_queue_nums: int = 8  # defaultTopicQueueNums
    auto_create_subscription_group: bool = True
    broker_permission: int = 6  # read + write
    long_polling: bool = True  # longPollingEnable
    short_polling_ms: int = 1000  # shortPollingTimeMills
    long_poll_holds_max: int = 10_000  # pull requests held at once, all connections together
    pull_batch_max: int = 64  # maxMsgNums is clamped to this
    pull_bytes_max: int = 4 * 1024 * 1024
    # SQL92 subscriptions (MessageSelector.bySql): RocketMQ's enablePropertyFilter, which is
    # false by default there; on here, since an emulator should run the apps that use them.
    property_filter: bool = True
    # maxLmqConsumeQueueNum: LMQs (lite topics) the broker holds; a message making one more
    # is refused with LMQ_QUOTA_EXCEEDED (gRPC: LITE_TOPIC_QUOTA_EXCEEDED)
    max_lmq_consume_queue_num: int = 20_000
    batch_size_max: int = 4 * 1024 * 1024  # a SEND_BATCH_MESSAGE body
    register_interval_s: float = 30.0  # registerNameServerPeriod
    consumer_offset_persist_s: float = 5.0  # flushConsumerOffsetInterval
    client_channel_expiry_s: float = 120.0  # a client silent this long is dropped
    lock_expiry_ms: int = 60_000  # rocketmq.broker.rebalance.lockMaxLiveTime
    region_id: str = "DefaultRegion"
    timer_max_delay_ms: int = 3 * 24 * 3600 * 1000  # timerMaxDelaySec: 3 days
    file_reserved_time_h: float = 72.0  # fileReservedTime
    delete_when: str = "04"  # deleteWhen: hours of the day (local time) whole segments go
    disk_max_used_space_ratio: int = 75  # diskMaxUsedSpaceRatio
    disk_space_clean_forcibly_ratio: int = 85  # diskSpaceCleanForciblyRatio
    disk_space_warning_level_ratio: int = 90  # diskSpaceWarningLevelRatio: writes refused
    # cleanFileForciblyEnable (on in RocketMQ): past the forcible ratio, delete segments whose
    # messages are unexpired and unread. Off: such messages are kept, writes refused instead.
    clean_file_forcibly: bool = False
    delete_file_batch_max: int = 10  # deleteFileBatchMax
    clean_resource_interval_s: float = 10.0  # cleanResourceInterval
    transaction_timeout_ms: int = 6000  # transactionTimeOut: the first check, after birth
    # transactionCheckInterval: RocketMQ 4.x checks every 60 s, 5.x every 30 s; we follow 5.x.
    transaction_check_interval_ms: int = 30_000
    transaction_check_max: int = 15  # transactionCheckMax
    pop_in_flight_max: int = 100_000  # messages lent by POP and not yet acked, all groups
    # The RocketMQ 5.x gRPC front-end (the grpc extra); None: not started. 8081 is the
    # RocketMQ proxy's port.
    grpc_port: int | None = None
    # The HTTP front (health, Prometheus metrics, the admin JSON API, the dashboard:
    # docs/http.md); None: not started (the CLI starts it on 8082), 0: any free port.
    http_port: int | None = None
    # Create a topic a gRPC client asks a route for (message type MIXED). RocketMQ's proxy
    # never does: off by default, so an unknown topic is TOPIC_NOT_FOUND as there.
    grpc_auto_create_topics: bool = False
    # TLS on the gRPC port, as the proxy's tls.server.mode: "permissive" (TLS and plaintext on
    # one port, the proxy's default), "enforcing" (TLS only) or "off" (plaintext only).
    grpc_tls: str = "permissive"
    # The certificate and key (PEM) served over TLS; None: a self-signed one, made in the data
    # folder's tls/ at first start (for localhost, 127.0.0.1 and the advertised host).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # TLS on the remoting port too, beside plaintext (RocketMQ 4.x clients' tls.enable).
    remoting_tls: bool = False
    # Access key -> secret key: each an admin account of the ACL (``--access-key``).
    access_keys: dict[str, str] = {}
    # RocketMQ's plain_acl.yml (accounts, permissions, white addresses). With it or with
    # access_keys, every front (remoting, name server, gRPC) checks each request.
    acl_file: Path | None = None
    # RocketMQ's brokerConfigPath: the broker.conf that UPDATE_BROKER_CONFIG (25) saves changes
    # into; ``pocketmq broker -c FILE`` sets it to FILE. None: changes last until the stop.
    config_file: Path | None = None

    @property
    def address(self) -> str:
        return f"{self.advertised_host or self.host}:{self.advertised_port or self.port}"
