"""The broker's runtime info: GET_BROKER_RUNTIME_INFO's table, as RocketMQ builds it
(AdminBrokerProcessor.prepareRuntimeInfo over DefaultMessageStore.getRuntimeInfo,
StoreStatsService.getRuntimeInfo and ScheduleMessageService.buildRunningStats).

Every value is a string, as in RocketMQ. mqadmin brokerStatus prints the table;
rocketmq-exporter parses most keys as numbers (a missing key fails its whole scrape), the
dashboard reads ``getTotalTps``, ``putTps``, ``getTransferredTps``, ``msgPutTotalTodayNow``,
``msgGetTotalTodayNow`` and ``brokerVersionDesc``. Keys about parts pocketmq does not have are
present with what is true of it: thread-pool queues are 0 (requests run on the event loop, there
is no pool to queue in, so the capacities are 0 too); ``dispatchBehindBytes`` is 0 (the consume
queues are written with the commit log); without a transient store pool
``remainTransientStoreBufferNumbs`` is Integer.MAX_VALUE, as RocketMQ reports it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pocketmq.broker.protocol.codes import DEFAULT_VERSION, MQVersion
from pocketmq.broker.services.schedule import ScheduleService
from pocketmq.broker.services.stats import BrokerStats
from pocketmq.broker.services.topics import SCHEDULE_TOPIC
from pocketmq.store.message_store import MessageStore

__all__ = ["human_bytes", "runtime_info", "runtime_text"]

_INT_MAX = 2**31 - 1
# StoreStatsService.PUT_MESSAGE_ENTIRE_TIME_MAX_DESC, for the buckets of BrokerStats.put_times
_DISTRIBUTION_NAMES = (
    "[<=0ms]",
    "[0~10ms]",
    "[10~50ms]",
    "[50~100ms]",
    "[100~200ms]",
    "[200~500ms]",
    "[500ms~1s]",
    "[1~2s]",
    "[2~3s]",
    "[3~4s]",
    "[4~5s]",
    "[5~10s]",
    "[10s~]",
)
_POOLS = ("send", "pull", "litePull", "query", "ack")


def human_bytes(count: int) -> str:
    """MixAll.humanReadableByteCount(bytes, si=false): ``"512 B"``, ``"1.5 GiB"``."""
    if count < 1024:
        return f"{count} B"
    exponent, value = 0, float(count)
    while value >= 1024 and exponent < 6:
        value /= 1024
        exponent += 1
    # Java computes (int)(log(bytes)/log(unit)) and bytes / unit^exp, the same value
    return f"{count / 1024**exponent:.1f} {'KMGTPE'[exponent - 1]}iB"


def runtime_text(elapsed_ms: int) -> str:
    """StoreStatsService.getFormatRuntime."""
    seconds = max(elapsed_ms, 0) // 1000
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


def _disk(path: Path | None) -> tuple[float, int, int]:
    """(used percent, total bytes, free bytes) of the file system holding ``path``; -1 used
    when there is no such directory (an in-memory store), as RocketMQ reports a missing path."""
    if path is None:
        return -1.0, 0, 0
    try:
        total, used, free = shutil.disk_usage(path)
    except OSError:
        return -1.0, 0, 0
    # UtilAll.getDiskPartitionSpaceUsedPercent: a ratio in [0, 1]
    return (used / total if total else -1.0), total, free


def runtime_info(
    *,
    stats: BrokerStats,
    store: MessageStore,
    schedule: ScheduleService,
    data_dir: Path | None,
    now_ms: int,
    active: bool = True,
) -> dict[str, str]:
    put_times = max(stats.put_total, 1)  # RocketMQ divides by at least 1
    totals = stats.totals
    commitlog_dir = data_dir / "commitlog" if data_dir is not None else None
    queue_dir = data_dir / "consumequeue" if data_dir is not None else None
    ratio, total, free = _disk(commitlog_dir if commitlog_dir and commitlog_dir.exists() else None)
    queue_ratio = _disk(queue_dir if queue_dir and queue_dir.exists() else None)[0]
    min_physical, max_physical = store.min_physical_offset, store.max_physical_offset
    earliest = store.store_time_of(min_physical) if max_physical > min_physical else None
    distribution = " ".join(
        f"{name}:{count}"
        for name, count in zip(_DISTRIBUTION_NAMES, stats.put_times.counts, strict=True)
    )
    info = {
        "brokerActive": "true" if active else "false",
        "brokerVersionDesc": MQVersion(DEFAULT_VERSION).name,
        "brokerVersion": str(DEFAULT_VERSION),
        "bootTimestamp": str(stats.boot_ms),
        "runtime": runtime_text(now_ms - stats.boot_ms),
        "msgPutTotalYesterdayMorning": str(totals.msg_put_total_yesterday_morning),
        "msgPutTotalTodayMorning": str(totals.msg_put_total_today_morning),
        "msgPutTotalTodayNow": str(stats.put_total),
        "msgGetTotalYesterdayMorning": str(totals.msg_get_total_yesterday_morning),
        "msgGetTotalTodayMorning": str(totals.msg_get_total_today_morning),
        "msgGetTotalTodayNow": str(stats.get_total),
        "putMessageEntireTimeMax": str(int(stats.put_time_max_ms)),
        "putMessageTimesTotal": str(stats.put_total),
        "putMessageFailedTimes": str(stats.put_failed),
        "putMessageSizeTotal": str(stats.put_bytes_total),
        "putMessageDistributeTime": distribution,
        "putMessageAverageSize": str(stats.put_bytes_total / put_times),
        "dispatchMaxBuffer": "0",
        "getMessageEntireTimeMax": str(int(stats.get_time_max_ms)),
        "putTps": stats.put_tps(),
        "getFoundTps": stats.get_found_tps(),
        "getMissTps": stats.get_miss_tps(),
        "getTotalTps": stats.get_total_tps(),
        "getTransferredTps": stats.get_tps(),
        "putLatency99": f"{stats.send_latency.quantile(0.99):.2f}",
        "putLatency999": f"{stats.send_latency.quantile(0.999):.2f}",
        "dispatchBehindBytes": "0",
        "pageCacheLockTimeMills": "0",
        "earliestMessageTimeStamp": str(earliest if earliest is not None else -1),
        "startAcceptSendRequestTimeStamp": "0",
        "remainTransientStoreBufferNumbs": str(_INT_MAX),
        "remainHowManyDataToFlush": human_bytes(
            max(max_physical - store.commitlog.flushed_offset, 0)
        ),
        "commitLogDirCapacity": f"Total : {human_bytes(total)}, Free : {human_bytes(free)}.",
        "commitLogDiskRatio": str(ratio),
        "consumeQueueDiskRatio": str(queue_ratio),
        "commitLogMinOffset": str(min_physical),
        "commitLogMaxOffset": str(max_physical),
        "timerReadBehind": "0",
        "timerOffsetBehind": "0",
        "timerCongestNum": "0",
        "timerEnqueueTps": "0.0",
        "timerDequeueTps": "0.0",
        "EndTransactionQueueSize": "0",
        "EndTransactionThreadPoolQueueCapacity": "0",
    }
    if commitlog_dir is not None:
        info[f"commitLogDiskRatio_{commitlog_dir}"] = str(ratio)
    for pool in _POOLS:
        info[f"{pool}ThreadPoolQueueSize"] = "0"
        info[f"{pool}ThreadPoolQueueCapacity"] = "0"
        info[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = "0"
    for level, offset in sorted(schedule.offsets.items()):
        # scheduleMessageOffset_<level>: "<delivered offset>,<max offset of the level's queue>"
        max_offset = store.max_offset(SCHEDULE_TOPIC, level - 1)
        info[f"scheduleMessageOffset_{level}"] = f"{offset},{max_offset}"
    return info
