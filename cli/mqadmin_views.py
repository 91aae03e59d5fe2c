"""What each ``pocketmq admin <command>`` asks through the SDK's ``Admin`` and shows: one async
function per mqadmin command, returning a ``View`` (tables and summary lines for a person, one
JSON document for a program). The command table and the options are in ``cli/mqadmin.py``.

Each follows the mqadmin sub-command of the same name (RocketMQ's tools module): the same
questions to the same servers, the same columns, with times as ISO-8601 (``*_ms`` columns).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    from pocketmq.client.admin import Admin
    from pocketmq.client.message import ReceivedMessage

__all__ = ["Table", "View"]

# Java's Long.MAX_VALUE: queryMsgByKey's default end of the time range
_LONG_MAX = 2**63 - 1
_RETRY = "%RETRY%"
_DLQ = "%DLQ%"


@dataclass(frozen=True)
class Table:
    columns: Sequence[str]
    rows: list[dict[str, Any]]
    title: str | None = None


@dataclass(frozen=True)
class View:
    """``tables`` and then ``lines`` for a person; ``data`` for ``--json``."""

    data: Any
    tables: list[Table] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _version_desc(version: int) -> str:
    from pocketmq.broker.protocol.codes import MQVersion

    try:
        return MQVersion(version).name
    except ValueError:
        return f"V{version}"


# -- brokers and clusters -----------------------------------------------------------------------


async def _cluster_brokers(
    admin: Admin, cluster: str | None, *, slaves: bool = False
) -> list[tuple[str, str, int, str]]:
    """(cluster, broker name, broker id, address) of every broker the name servers know (of
    ``cluster``; masters only unless ``slaves``), sorted; UsageError for an unknown cluster."""
    info = await admin.cluster_info()
    if cluster is not None and cluster not in info.cluster_addr_table:
        known = ", ".join(sorted(info.cluster_addr_table)) or "none"
        raise UsageError(f"cluster {cluster!r} is not known to the name servers (known: {known})")
    out = []
    for name_of_cluster, names in sorted(info.cluster_addr_table.items()):
        if cluster is not None and name_of_cluster != cluster:
            continue
        for name in sorted(names):
            data = info.broker_addr_table.get(name)
            if data is None:
                continue
            for broker_id, addr in sorted(data.broker_addrs.items()):
                if slaves or broker_id == 0:
                    out.append((name_of_cluster, name, broker_id, addr))
    return out


async def _targets(admin: Admin, args: argparse.Namespace, *, slaves: bool = False) -> list[str]:
    """The brokers ``-b`` (an address or a broker name) or ``-c`` (a cluster) name, else every
    master broker; as addresses (what ``Admin``'s ``broker=`` takes)."""
    if getattr(args, "broker_addr", None):
        return [args.broker_addr]
    found = await _cluster_brokers(admin, getattr(args, "cluster", None), slaves=slaves)
    if not found:
        raise UsageError("no broker is registered with the name servers")
    return [addr for _, _, _, addr in found]


# -- topics -------------------------------------------------------------------------------------


async def topic_list(admin: Admin, args: argparse.Namespace) -> View:
    topics = await admin.list_topics()
    if not args.cluster_model:
        return View({"topics": topics}, [Table(["topic"], [{"topic": t} for t in topics])])
    from pocketmq.client.errors import ClientError

    info = await admin.cluster_info()
    cluster_of = {b: c for c, names in info.cluster_addr_table.items() for b in names}
    rows: list[dict[str, Any]] = []
    for topic in topics:
        if topic.startswith((_RETRY, _DLQ)):
            continue
        cluster, groups = "", [""]
        try:  # mqadmin leaves a topic it cannot place without cluster and groups
            route = await admin.topic_route(topic)
            if route.broker_datas:
                cluster = cluster_of.get(route.broker_datas[0].broker_name, "")
            groups = await admin.topic_consumers(topic) or [""]
        except ClientError:
            pass
        rows.extend({"cluster": cluster, "topic": topic, "consumer_group": g} for g in groups)
    return View({"topics": rows}, [Table(["cluster", "topic", "consumer_group"], rows)])


async def topic_status(admin: Admin, args: argparse.Namespace) -> View:
    stats = await admin.topic_stats(args.topic)
    queues = stats.queues
    if args.cluster is not None:
        names = {name for _, name, _, _ in await _cluster_brokers(admin, args.cluster)}
        queues = [q for q in queues if q.queue.broker_name in names]
    rows = [q.to_dict() for q in queues]
    columns = ["broker_name", "queue_id", "min_offset", "max_offset", "last_update_ms"]
    data = {"topic": args.topic, "put_tps": stats.put_tps, "queues": rows}
    return View(data, [Table(columns, rows)], [f"Topic Put TPS: {stats.put_tps}"])


async def topic_route(admin: Admin, args: argparse.Namespace) -> View:
    import msgspec

    route = await admin.topic_route(args.topic)
    queues = {q.broker_name: q for q in route.queue_datas}
    rows = []
    for broker in sorted(route.broker_datas, key=lambda b: b.broker_name):
        q = queues.get(broker.broker_name)
        rows.append(
            {
                "cluster": broker.cluster,
                "broker_name": broker.broker_name,
                "broker_addrs": ",".join(
                    f"{i}:{a}" for i, a in sorted(broker.broker_addrs.items())
                ),
                "read_queues": q.read_queue_nums if q else None,
                "write_queues": q.write_queue_nums if q else None,
                "perm": q.perm if q else None,
            }
        )
    read = sum(q.read_queue_nums for q in queues.values())
    write = sum(q.write_queue_nums for q in queues.values())
    columns = ["cluster", "broker_name", "broker_addrs", "read_queues", "write_queues", "perm"]
    total = f"Total: {len(queues)} brokers, {read} read queues, {write} write queues"
    return View(msgspec.to_builtins(route), [Table(columns, rows)], [total])


async def update_topic(admin: Admin, args: argparse.Namespace) -> View:
    targets = await admin.update_topic(
        args.topic,
        read_queues=args.read_queue_nums,
        write_queues=args.write_queue_nums,
        perm=args.perm,
        order=args.order,
        attributes=args.attributes,
        # RocketMQ's TopicSysFlag: 1 unit topic, 2 has unit subscribers
        topic_sys_flag=(1 if args.unit else 0) | (2 if args.has_unit_sub else 0),
        cluster=args.cluster,
        broker=args.broker_addr,
    )
    rows = [
        {
            "broker": name,
            "addr": addr,
            "topic": args.topic,
            "read_queues": args.read_queue_nums,
            "write_queues": args.write_queue_nums,
            "perm": args.perm,
            "order": args.order,
            "attributes": args.attributes or "",
        }
        for name, addr in targets.items()
    ]
    lines = [f"create topic to {addr} success." for addr in targets.values()]
    return View({"brokers": rows}, [Table(list(rows[0]) if rows else ["broker"], rows)], lines)


async def delete_topic(admin: Admin, args: argparse.Namespace) -> View:
    await admin.topic_route(args.topic)  # TopicNotExistError for a topic nobody has
    brokers = await admin.delete_topic(args.topic, cluster=args.cluster)
    where = f"cluster [{args.cluster}]" if args.cluster else f"brokers [{', '.join(brokers)}]"
    lines = [
        f"delete topic [{args.topic}] from {where} success.",
        f"delete topic [{args.topic}] from NameServer success.",
    ]
    return View({"topic": args.topic, "brokers": brokers}, [], lines)


# -- consumer groups ----------------------------------------------------------------------------


async def _client_of_queue(admin: Admin, group: str) -> dict[tuple[str, str, int], str]:
    """Which client (its IP, the part of the client id before '@') holds each queue, from the
    group's consumers' running info, as mqadmin consumerProgress -s true shows it."""
    from pocketmq.broker.protocol.admin_bodies import decode_mq_table
    from pocketmq.client.errors import ClientError

    out: dict[tuple[str, str, int], str] = {}
    try:
        connections = await admin.consumer_connections(group)
    except ClientError:
        return out
    for connection in connections.connections:
        try:
            info = await admin.consumer_running_info(group, connection.client_id)
        except ClientError:
            continue
        for mq in decode_mq_table(info.mq_table):
            out[(mq.topic, mq.broker_name, mq.queue_id)] = connection.client_id.split("@")[0]
    return out


async def consumer_progress(admin: Admin, args: argparse.Namespace) -> View:
    if args.group is None:
        return await _all_groups(admin)
    progress = await admin.consumer_progress(args.group, topic=args.topic)
    if not progress.queues:  # as DefaultMQAdminExt.examineConsumeStats refuses an empty table
        from pocketmq.client.errors import ClientError

        raise ClientError(
            f"no consume stats of group {args.group!r}"
            + (f" on topic {args.topic!r}" if args.topic else "")
            + ": it has no offsets on any broker (not created, or has consumed nothing yet)"
        )
    queues = progress.queues
    if args.cluster is not None:
        names = {name for _, name, _, _ in await _cluster_brokers(admin, args.cluster)}
        queues = [q for q in queues if q.queue.broker_name in names]
    clients = await _client_of_queue(admin, args.group) if args.show_client_ip else {}
    rows = []
    for q in queues:
        row: dict[str, Any] = {
            "topic": q.queue.topic,
            "broker_name": q.queue.broker_name,
            "queue_id": q.queue.queue_id,
            "broker_offset": q.broker_offset,
            "consumer_offset": q.consumer_offset,
        }
        if args.show_client_ip:
            key = (q.queue.topic, q.queue.broker_name, q.queue.queue_id)
            row["client_ip"] = clients.get(key, "N/A")
        row |= {"diff": q.lag, "inflight": q.inflight, "last_time_ms": q.last_timestamp_ms}
        rows.append(row)
    diff, inflight = sum(r["diff"] for r in rows), sum(r["inflight"] for r in rows)
    data = {
        "group": args.group,
        "consume_tps": progress.consume_tps,
        "diff_total": diff,
        "inflight_total": inflight,
        "queues": rows,
    }
    lines = [
        f"Consume TPS: {progress.consume_tps:.2f}",
        f"Consume Diff Total: {diff}",
        f"Consume Inflight Total: {inflight}",
    ]
    return View(data, [Table(list(rows[0]) if rows else ["topic"], rows)], lines)


async def _all_groups(admin: Admin) -> View:
    """consumerProgress without -g: every group that has a %RETRY% topic, with its online
    consumers (count, lowest version, type, model), its consume TPS and its total diff."""
    from pocketmq.client.errors import ClientError

    rows = []
    for topic in await admin.list_topics():
        if not topic.startswith(_RETRY):
            continue
        group = topic.removeprefix(_RETRY)
        row: dict[str, Any] = {"group": group, "count": 0, "version": "OFFLINE", "type": ""}
        row |= {"model": "", "tps": 0, "diff_total": 0}
        try:
            progress = await admin.consumer_progress(group)
            row |= {"tps": int(progress.consume_tps), "diff_total": progress.lag}
        except ClientError:
            pass
        try:
            cc = await admin.consumer_connections(group)
        except ClientError:
            cc = None
        if cc is not None and cc.connections:
            pull = cc.consume_type == "CONSUME_ACTIVELY"
            row |= {
                "count": len(cc.connections),
                "version": _version_desc(min(c.version for c in cc.connections)),
                "type": "PULL" if pull else "PUSH",
                "model": cc.message_model if cc.consume_type == "CONSUME_PASSIVELY" else "",
            }
        rows.append(row)
    columns = ["group", "count", "version", "type", "model", "tps", "diff_total"]
    return View({"groups": rows}, [Table(columns, rows)])


async def consumer_connection(admin: Admin, args: argparse.Namespace) -> View:
    cc = await admin.consumer_connections(args.group, broker=args.broker_addr)
    clients = [
        {
            "client_id": c.client_id,
            "client_addr": c.client_addr,
            "language": c.language,
            "version": _version_desc(c.version),
        }
        for c in cc.connections
    ]
    subs = [{"topic": t, "sub_expression": e} for t, e in cc.subscriptions.items()]
    data = cc.to_dict()
    for row, connection in zip(data["connections"], cc.connections, strict=True):
        row["version_desc"] = _version_desc(connection.version)
    lines = [
        f"ConsumeType: {cc.consume_type}",
        f"MessageModel: {cc.message_model}",
        f"ConsumeFromWhere: {cc.consume_from_where}",
    ]
    tables = [
        Table(["client_id", "client_addr", "language", "version"], clients),
        Table(["topic", "sub_expression"], subs, "Below is subscription:"),
    ]
    return View(data, tables, lines)


async def producer_connection(admin: Admin, args: argparse.Namespace) -> View:
    route = await admin.topic_route(args.topic)  # mqadmin asks the topic's brokers
    names = {b.broker_name for b in route.broker_datas}
    connections = [c for c in await admin.producer_connections(args.group) if c.broker in names]
    rows = [
        {
            "index": f"{i:04d}",
            "client_id": c.client_id,
            "client_addr": c.client_addr,
            "language": c.language,
            "version": _version_desc(c.version),
        }
        for i, c in enumerate(connections, 1)
    ]
    data = {"group": args.group, "topic": args.topic, "connections": rows}
    return View(data, [Table(["index", "client_id", "client_addr", "language", "version"], rows)])


async def update_sub_group(admin: Admin, args: argparse.Namespace) -> View:
    import msgspec

    from pocketmq.broker.protocol.headers import SubscriptionGroupConfig
    from pocketmq.client.admin import parse_group_attributes

    # mqadmin starts from RocketMQ's defaults but for these two, which it turns off
    config = SubscriptionGroupConfig(
        group_name=args.group, consume_broadcast_enable=False, consume_from_min_enable=False
    )
    for dest, name in (
        ("consume_enable", "consume_enable"),
        ("consume_from_min_enable", "consume_from_min_enable"),
        ("consume_broadcast_enable", "consume_broadcast_enable"),
        ("consume_message_orderly", "consume_message_orderly"),
        ("retry_queue_nums", "retry_queue_nums"),
        ("retry_max_times", "retry_max_times"),
        ("broker_id", "broker_id"),
        ("which_broker_when_consume_slowly", "which_broker_when_consume_slowly"),
        ("notify_consumer_ids_changed", "notify_consumer_ids_changed_enable"),
    ):
        value = getattr(args, dest)
        if value is not None:
            config = msgspec.structs.replace(config, **{name: value})
    if args.group_attributes is not None:
        config.attributes = parse_group_attributes(args.group_attributes)
    targets = await admin.update_group(config, cluster=args.cluster, broker=args.broker_addr)
    rows = [{"broker": name, "addr": addr} for name, addr in targets.items()]
    settings = msgspec.to_builtins(config)
    lines = [f"create subscription group to {addr} success." for addr in targets.values()]
    return View(
        {"brokers": rows, "config": settings},
        [Table(["key", "value"], [{"key": k, "value": v} for k, v in settings.items()])],
        lines,
    )


async def _broker_address(admin: Admin, broker: str | None) -> str | None:
    """``-b`` as an address: HOST:PORT as given, a broker name as its master's address."""
    if broker is None or ":" in broker:
        return broker
    for _, name, _, addr in await _cluster_brokers(admin, None):
        if name == broker:
            return addr
    raise UsageError(f"-b {broker}: no broker of that name is registered with the name servers")


async def delete_sub_group(admin: Admin, args: argparse.Namespace) -> View:
    brokers = await admin.delete_group(
        args.group,
        clean_offset=args.remove_offset,
        cluster=args.cluster,
        broker=await _broker_address(admin, args.broker_addr),
    )
    lines = [
        f"delete subscription group [{args.group}] from broker [{b}] success." for b in brokers
    ]
    if args.broker_addr is None:
        lines.append(f"deleted topics [{_RETRY}{args.group}] and [{_DLQ}{args.group}]")
    return View({"group": args.group, "brokers": brokers}, [], lines)


async def reset_offset_by_time(admin: Admin, args: argparse.Namespace) -> View:
    from .output import iso_ms

    await admin.topic_route(args.topic)  # TopicNotExistError before anything moves
    result = await admin.reset_offset_by_time(
        args.group, args.topic, args.timestamp, force=args.force
    )
    head = (
        f"reset consumer offset of group [{args.group}] topic [{args.topic}] to "
        f"{iso_ms(args.timestamp)} ({args.timestamp}), force [{str(args.force).lower()}]"
    )
    if result.rollback is None:  # the online consumers were told
        rows: list[dict[str, Any]] = [
            {"broker_name": mq.broker_name, "queue_id": mq.queue_id, "offset": offset}
            for mq, offset in sorted(result.offsets.items())
        ]
        columns = ["broker_name", "queue_id", "offset"]
        how = "consumers"
    else:  # no consumer online: the offsets were written (mqadmin's old path)
        rows = [
            {
                "broker_name": r.broker_name,
                "queue_id": r.queue_id,
                "broker_offset": r.broker_offset,
                "consumer_offset": r.consumer_offset,
                "timestamp_offset": r.timestamp_offset,
                "reset_offset": r.rollback_offset,
            }
            for r in sorted(result.rollback, key=lambda r: (r.broker_name, r.queue_id))
        ]
        columns = list(rows[0]) if rows else ["broker_name"]
        how = "offsets"
    data = {
        "group": args.group,
        "topic": args.topic,
        "timestamp_ms": args.timestamp,
        "force": args.force,
        "reset_by": how,
        "queues": rows,
    }
    return View(data, [Table(columns, rows, head)])


# -- messages -----------------------------------------------------------------------------------


def _message(message: ReceivedMessage, charset: str | None) -> dict[str, Any]:
    """A message as mqadmin's printMsg shows it; the body as text in ``charset`` when given."""
    row: dict[str, Any] = {
        "offset_msg_id": message.offset_msg_id,
        "msg_id": message.msg_id,
        "topic": message.topic,
        "tags": message.tags,
        "keys": " ".join(message.keys),
        "broker_name": message.queue.broker_name,
        "queue_id": message.queue.queue_id,
        "queue_offset": message.queue_offset,
        "commitlog_offset": message.commitlog_offset,
        "reconsume_times": message.reconsume_times,
        "born_timestamp": message.born_timestamp,
        "store_timestamp": message.store_timestamp,
        "born_host": message.born_host,
        "store_host": message.store_host,
        "sys_flag": message.sys_flag,
        "properties": dict(message.properties),
        "body_size": len(message.body),
    }
    if charset is not None:
        row["body"] = message.body.decode(charset, errors="replace")
    return row


def _charset(name: str | None) -> str | None:
    import codecs

    if name is None:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise UsageError(f"-f/--bodyFormat: {name!r} is not a character set") from None


def _pull_consumer(admin: Admin, args: argparse.Namespace) -> Any:
    """A pull consumer on the same name servers and account (mqadmin reads messages with
    its own pull consumer too)."""
    from pocketmq.client.pull import PullConsumer

    from .clients import _credentials

    return PullConsumer(namesrv=args.namesrv, credentials=_credentials(args))


async def query_msg_by_id(admin: Admin, args: argparse.Namespace) -> View:
    from pocketmq.client.errors import ClientUsageError, QueryNotFoundError
    from pocketmq.ids import InvalidMessageIdError, decode_message_id

    charset = _charset(args.body_format)
    ids = [i.strip() for i in args.msg_id.split(",") if i.strip()]
    if not ids:
        raise UsageError("-i/--msgId: no message id given")
    found: list[dict[str, Any]] = []
    async with _pull_consumer(admin, args) as consumer:
        for msg_id in ids:
            try:
                scheme = decode_message_id(msg_id)["scheme"]
            except InvalidMessageIdError as error:
                raise ClientUsageError(f"-i {msg_id}: {error}") from None
            # as RocketMQ's viewMessage: an offset id names its broker and place; any other
            # id is a unique key, looked up in the topic's index
            if scheme == "offset":
                messages = [await consumer.view(msg_id)]
            else:
                messages = await consumer.query_by_key(
                    args.topic, msg_id, unique_key=True, begin_ms=0, end_ms=_LONG_MAX
                )
            if not messages:
                raise QueryNotFoundError(22, f"no message {msg_id} in topic {args.topic}")
            found.append(_message(messages[0], charset))
    return View({"messages": found}, [Table([], found)])


async def query_msg_by_key(admin: Admin, args: argparse.Namespace) -> View:
    async with _pull_consumer(admin, args) as consumer:
        messages = await consumer.query_by_key(
            args.topic,
            args.key,
            max_messages=args.max_num,
            begin_ms=args.begin_timestamp,
            end_ms=args.end_timestamp,
        )
    rows = [
        {
            "msg_id": m.msg_id,
            "broker_name": m.queue.broker_name,
            "queue_id": m.queue.queue_id,
            "queue_offset": m.queue_offset,
            "store_ms": m.store_timestamp,
        }
        for m in messages
    ]
    columns = ["msg_id", "broker_name", "queue_id", "queue_offset", "store_ms"]
    data = {"topic": args.topic, "key": args.key, "messages": rows}
    return View(data, [Table(columns, rows)])


async def query_msg_by_offset(admin: Admin, args: argparse.Namespace) -> View:
    from pocketmq.client.errors import QueryNotFoundError
    from pocketmq.client.message import MessageQueue

    mq = MessageQueue(args.topic, args.broker_name, args.queue_id)
    async with _pull_consumer(admin, args) as consumer:
        result = await consumer.pull(mq, args.offset, 1)
    if not result.messages:
        raise QueryNotFoundError(
            22,
            f"no message at offset {args.offset} of {args.topic}/{args.broker_name}/"
            f"{args.queue_id} ({result.status.value}; min offset {result.min_offset}, "
            f"max offset {result.max_offset})",
        )
    row = _message(result.messages[0], _charset(args.body_format))
    return View({"messages": [row]}, [Table([], [row])])


# -- brokers ------------------------------------------------------------------------------------


def _number(table: Mapping[str, str], key: str) -> float:
    """The first number of a runtime-info value ("12.5 11.0 10.2" -> 12.5); 0 when none."""
    try:
        return float((table.get(key) or "0").split()[0])
    except (ValueError, IndexError):
        return 0.0


async def cluster_list(admin: Admin, args: argparse.Namespace) -> View:
    from pocketmq.client.errors import ClientError

    rows = []
    for cluster, name, broker_id, addr in await _cluster_brokers(admin, args.cluster, slaves=True):
        try:
            kv = (await admin.broker_runtime_info(broker=addr))[addr]
        except ClientError:  # mqadmin prints the broker with empty figures
            kv = {}
        row: dict[str, Any] = {"cluster": cluster, "broker_name": name}
        if args.more_stats:
            put = {k: int(_number(kv, f"msgPutTotal{k}")) for k in _DAYS}
            get = {k: int(_number(kv, f"msgGetTotal{k}")) for k in _DAYS}
            row |= {
                "in_total_yest": put["TodayMorning"] - put["YesterdayMorning"],
                "out_total_yest": get["TodayMorning"] - get["YesterdayMorning"],
                "in_total_today": put["TodayNow"] - put["TodayMorning"],
                "out_total_today": get["TodayNow"] - get["TodayMorning"],
            }
        else:
            earliest = int(_number(kv, "earliestMessageTimeStamp"))
            hours = (time.time() * 1000 - earliest) / 3_600_000 if earliest else 0.0
            row |= {
                "bid": broker_id,
                "addr": addr,
                "version": kv.get("brokerVersionDesc", ""),
                "in_tps": round(_number(kv, "putTps"), 2),
                "out_tps": round(_number(kv, "getTransferredTps"), 2),
                "pc_wait": kv.get("pageCacheLockTimeMills", ""),
                "hour": round(hours, 2),
                "space": round(_number(kv, "commitLogDiskRatio"), 4),
                "activated": kv.get("brokerActive", "false") == "true",
            }
        rows.append(row)
    return View({"brokers": rows}, [Table(list(rows[0]) if rows else ["cluster"], rows)])


_DAYS = ("YesterdayMorning", "TodayMorning", "TodayNow")


async def broker_status(admin: Admin, args: argparse.Namespace) -> View:
    data: dict[str, dict[str, str]] = {}
    for addr in await _targets(admin, args, slaves=True):
        data |= await admin.broker_runtime_info(broker=addr)
    several = len(data) > 1
    rows = [
        {"broker": broker, "key": key, "value": value} if several else {"key": key, "value": value}
        for broker, table in data.items()
        for key, value in sorted(table.items())
    ]
    return View(data, [Table(["broker", "key", "value"] if several else ["key", "value"], rows)])


async def get_broker_config(admin: Admin, args: argparse.Namespace) -> View:
    data: dict[str, dict[str, str]] = {}
    for addr in await _targets(admin, args, slaves=True):
        data |= await admin.broker_config(broker=addr)
    tables = [
        Table(
            ["key", "value"],
            [{"key": k, "value": v} for k, v in settings.items()],
            f"============{broker}============",
        )
        for broker, settings in data.items()
    ]
    return View(data, tables)


async def update_broker_config(admin: Admin, args: argparse.Namespace) -> View:
    changed: list[str] = []
    for addr in await _targets(admin, args, slaves=args.update_all_broker):
        changed += await admin.update_broker_config({args.key: args.value}, broker=addr)
    lines = [f"update broker config success, {addr}" for addr in changed]
    return View({"key": args.key, "value": args.value, "brokers": changed}, [], lines)
