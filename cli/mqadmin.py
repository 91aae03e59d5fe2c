"""``pocketmq admin <command>``: RocketMQ's mqadmin views and changes, with mqadmin's command
names and option letters (``-n`` name servers, ``-t`` topic, ``-g`` group, ``-b`` broker,
``-c`` cluster, ``-s`` timestamp, ...; docs/cli.md "mqadmin's views").

One table, ``COMMANDS``: each entry names the mqadmin command, its options (short letter and
mqadmin's long name) and the view in ``cli/mqadmin_views.py`` that asks the servers through the
SDK's ``Admin``. A person gets aligned tables with ISO-8601 times, a program ``--json``: one
JSON document, times as epoch milliseconds.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import mqadmin_views as views
from .options import add_server_options
from .output import print_blocks, print_table

if TYPE_CHECKING:
    from pocketmq.client.admin import Admin

__all__ = ["COMMANDS", "parse_timestamp", "register"]


# -- option values as mqadmin reads them --------------------------------------------------------


def true_or_false(text: str) -> bool:
    """mqadmin's true|false options (Java's Boolean.parseBoolean, but a typo is an error)."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r} is neither true nor false")
    return value == "true"


def whole(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def at_least_one(text: str) -> int:
    value = whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def not_negative(text: str) -> int:
    value = whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})#(\d{2}):(\d{2}):(\d{2}):(\d{3})$")


def parse_timestamp(text: str) -> int:
    """mqadmin's ``-s``: ``now``, epoch milliseconds, or ``yyyy-MM-dd#HH:mm:ss:SSS`` in the
    machine's time zone (as Java's SimpleDateFormat reads it)."""
    value = text.strip()
    if value == "now":
        return int(time.time() * 1000)
    if value.isdigit():
        return int(value)
    found = _DATE.match(value)
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not now, epoch milliseconds or yyyy-MM-dd#HH:mm:ss:SSS"
        )
    year, month, day, hour, minute, second, ms = (int(g) for g in found.groups())
    try:
        local = datetime(year, month, day, hour, minute, second, ms * 1000)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    return int(local.timestamp() * 1000)


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Opt:
    """One option: ``-short/--long`` (mqadmin's letter and long name), stored in ``dest``;
    ``kind`` converts its value (None: a flag that takes no value)."""

    short: str | None
    long: str
    dest: str
    help: str
    kind: Callable[[str], Any] | None = str
    required: bool = False
    default: Any = None


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Opt, ...]
    view: Callable[[Admin, argparse.Namespace], Awaitable[views.View]]
    # mqadmin wants exactly one of these options (an OptionGroup): at most one here
    one_of: tuple[str, ...] = ()


def _topic(required: bool = True, long: str = "topic") -> Opt:
    return Opt("t", long, "topic", "topic name", required=required)


def _group(long: str, required: bool = True) -> Opt:
    return Opt("g", long, "group", "consumer group name", required=required)


_BROKER = Opt("b", "brokerAddr", "broker_addr", "the broker: HOST:PORT or a broker name")
_CLUSTER = Opt("c", "clusterName", "cluster", "the cluster (default: every master broker)")
_BODY = Opt("f", "bodyFormat", "body_format", "print the body in this character set, e.g. UTF-8")

COMMANDS: tuple[Command, ...] = (
    Command(
        "topicList",
        "every topic the name servers know (-c: with its cluster and consumer groups)",
        (Opt("c", "clusterModel", "cluster_model", "with cluster and consumer groups", None),),
        views.topic_list,
    ),
    Command(
        "topicStatus",
        "each queue's min and max offset and last message time, and the put TPS",
        (_topic(), Opt("c", "cluster", "cluster", "only the brokers of this cluster")),
        views.topic_status,
    ),
    Command(
        "topicRoute",
        "the topic's brokers with their addresses, queues and permission",
        (_topic(), Opt("l", "list", "list_format", "list format (always, for a person)", None)),
        views.topic_route,
    ),
    Command(
        "updateTopic",
        "create a topic or change its queues, permission, order and attributes",
        (
            _BROKER,
            Opt("c", "clusterName", "cluster", "create on the masters of this cluster"),
            _topic(),
            Opt(
                "r",
                "readQueueNums",
                "read_queue_nums",
                "read queues (default 16)",
                at_least_one,
                default=16,
            ),
            Opt(
                "w",
                "writeQueueNums",
                "write_queue_nums",
                "write queues (default 16)",
                at_least_one,
                default=16,
            ),
            Opt(
                "p",
                "perm",
                "perm",
                "permission: 2 write, 4 read, 6 both (default 6)",
                whole,
                default=6,
            ),
            Opt(
                "o",
                "order",
                "order",
                "an ordered topic: true|false (default false)",
                true_or_false,
                default=False,
            ),
            Opt("u", "unit", "unit", "a unit topic: true|false", true_or_false, default=False),
            Opt(
                "s",
                "hasUnitSub",
                "has_unit_sub",
                "has unit subscribers: true|false",
                true_or_false,
                default=False,
            ),
            Opt("a", "attributes", "attributes", "attribute changes: +key=value,-key"),
        ),
        views.update_topic,
        ("broker_addr", "cluster"),
    ),
    Command(
        "deleteTopic",
        "delete a topic from the brokers (of a cluster) and the name servers",
        (_topic(), Opt("c", "clusterName", "cluster", "the cluster (default: every master)")),
        views.delete_topic,
    ),
    Command(
        "consumerProgress",
        "a group's offsets and diff (lag) per queue; without -g, every group's total",
        (
            _group("groupName", required=False),
            _topic(required=False, long="topicName"),
            Opt(
                "s",
                "showClientIP",
                "show_client_ip",
                "show the client holding each queue: true|false",
                true_or_false,
                default=False,
            ),
            Opt("c", "cluster", "cluster", "only the brokers of this cluster"),
        ),
        views.consumer_progress,
    ),
    Command(
        "consumerConnection",
        "a group's connected consumers and subscriptions",
        (_group("consumerGroup"), _BROKER),
        views.consumer_connection,
    ),
    Command(
        "producerConnection",
        "a producer group's connected producers on the topic's brokers",
        (Opt("g", "producerGroup", "group", "producer group name", required=True), _topic()),
        views.producer_connection,
    ),
    Command(
        "updateSubGroup",
        "create a consumer group or change its settings",
        (
            _BROKER,
            Opt("c", "clusterName", "cluster", "create on the masters of this cluster"),
            _group("groupName"),
            Opt(
                "s", "consumeEnable", "consume_enable", "consume enable: true|false", true_or_false
            ),
            Opt(
                "m",
                "consumeFromMinEnable",
                "consume_from_min_enable",
                "consume from the min offset: true|false (default false)",
                true_or_false,
            ),
            Opt(
                "d",
                "consumeBroadcastEnable",
                "consume_broadcast_enable",
                "broadcast: true|false (default false)",
                true_or_false,
            ),
            Opt(
                "o",
                "consumeMessageOrderly",
                "consume_message_orderly",
                "consume in order: true|false",
                true_or_false,
            ),
            Opt("q", "retryQueueNums", "retry_queue_nums", "retry queues", not_negative),
            Opt(
                "r", "retryMaxTimes", "retry_max_times", "redeliveries before the DLQ", not_negative
            ),
            Opt("i", "brokerId", "broker_id", "consume from this broker id", not_negative),
            Opt(
                "w",
                "whichBrokerWhenConsumeSlowly",
                "which_broker_when_consume_slowly",
                "broker id when consuming slowly",
                not_negative,
            ),
            Opt(
                "a",
                "notifyConsumerIdsChanged",
                "notify_consumer_ids_changed",
                "notify consumer id changes: true|false",
                true_or_false,
            ),
            Opt(None, "attributes", "group_attributes", "attribute changes: +key=value,-key"),
        ),
        views.update_sub_group,
        ("broker_addr", "cluster"),
    ),
    Command(
        "deleteSubGroup",
        "delete a consumer group (with -c or neither: its %%RETRY%% and %%DLQ%% topics too)",
        (
            _BROKER,
            Opt("c", "clusterName", "cluster", "delete from the masters of this cluster"),
            _group("groupName"),
            Opt(
                "r",
                "removeOffset",
                "remove_offset",
                "drop its offsets too: true|false",
                true_or_false,
                default=False,
            ),
        ),
        views.delete_sub_group,
        ("broker_addr", "cluster"),
    ),
    Command(
        "resetOffsetByTime",
        "move a group's offsets of a topic to the first message stored at or after a time",
        (
            _group("group"),
            _topic(),
            Opt(
                "s",
                "timestamp",
                "timestamp",
                "now, epoch milliseconds or yyyy-MM-dd#HH:mm:ss:SSS (local time)",
                parse_timestamp,
                required=True,
            ),
            Opt(
                "f",
                "force",
                "force",
                "also move offsets forward: true|false (default true)",
                true_or_false,
                default=True,
            ),
        ),
        views.reset_offset_by_time,
    ),
    Command(
        "queryMsgById",
        "messages by offset message id or unique key (comma-separated)",
        (_topic(), Opt("i", "msgId", "msg_id", "message id(s)", required=True), _BODY),
        views.query_msg_by_id,
    ),
    Command(
        "queryMsgByKey",
        "messages whose KEYS hold a key",
        (
            _topic(),
            Opt("k", "msgKey", "key", "the message key", required=True),
            Opt(
                "b",
                "beginTimestamp",
                "begin_timestamp",
                "stored at or after (epoch ms, default 0)",
                not_negative,
                default=0,
            ),
            Opt(
                "e",
                "endTimestamp",
                "end_timestamp",
                "stored at or before (epoch ms, default no end)",
                not_negative,
                default=2**63 - 1,
            ),
            Opt(
                "m", "maxNum", "max_num", "at most this many (default 64)", at_least_one, default=64
            ),
        ),
        views.query_msg_by_key,
    ),
    Command(
        "queryMsgByOffset",
        "the message at an offset of one queue",
        (
            _topic(),
            Opt("b", "brokerName", "broker_name", "broker name", required=True),
            Opt("i", "queueId", "queue_id", "queue id", not_negative, required=True),
            Opt("o", "offset", "offset", "queue offset", not_negative, required=True),
            _BODY,
        ),
        views.query_msg_by_offset,
    ),
    Command(
        "clusterList",
        "every broker of every cluster with its version, TPS and disk use",
        (
            Opt("m", "moreStats", "more_stats", "messages in and out yesterday and today", None),
            Opt("c", "clusterName", "cluster", "only this cluster"),
        ),
        views.cluster_list,
    ),
    Command(
        "brokerStatus",
        "a broker's runtime figures (RocketMQ's runtime info keys)",
        (_BROKER, _CLUSTER),
        views.broker_status,
        ("broker_addr", "cluster"),
    ),
    Command(
        "getBrokerConfig",
        "a broker's settings",
        (_BROKER, _CLUSTER),
        views.get_broker_config,
        ("broker_addr", "cluster"),
    ),
    Command(
        "updateBrokerConfig",
        "change one setting of running brokers (those that can change live)",
        (
            _BROKER,
            _CLUSTER,
            Opt(
                "a",
                "updateAllBroker",
                "update_all_broker",
                "slaves too: true|false",
                true_or_false,
                default=False,
            ),
            Opt("k", "key", "key", "the setting, e.g. fileReservedTime", required=True),
            Opt("v", "value", "value", "its new value", required=True),
        ),
        views.update_broker_config,
        ("broker_addr", "cluster"),
    ),
)


# -- the parser ---------------------------------------------------------------------------------


def _add_option(parser: argparse.ArgumentParser | Any, opt: Opt) -> None:
    flags = ([f"-{opt.short}"] if opt.short else []) + [f"--{opt.long}"]
    if opt.kind is None:
        parser.add_argument(*flags, dest=opt.dest, action="store_true", help=opt.help)
        return
    parser.add_argument(
        *flags,
        dest=opt.dest,
        type=opt.kind,
        required=opt.required,
        default=opt.default,
        metavar=opt.dest.upper(),
        help=opt.help,
    )


def register(commands: argparse._SubParsersAction) -> None:
    """``pocketmq admin`` and one sub-command per entry of ``COMMANDS``."""
    admin = commands.add_parser(
        "admin",
        help="mqadmin's views and changes: topicList, consumerProgress, clusterList, ...",
        description="RocketMQ's mqadmin commands, by their mqadmin names and option letters",
    )
    actions = admin.add_subparsers(dest="action", required=True, metavar="MQADMIN_COMMAND")
    for command in COMMANDS:
        parser = actions.add_parser(
            command.name, help=command.help, description=command.help.replace("%%", "%")
        )
        exclusive = parser.add_mutually_exclusive_group() if command.one_of else None
        for opt in command.options:
            _add_option(exclusive if opt.dest in command.one_of else parser, opt)
        add_server_options(parser, "-n", "--namesrvAddr")
        parser.add_argument(
            "--json",
            action="store_true",
            help="one JSON document instead of tables, times as epoch milliseconds",
        )
        parser.set_defaults(handler=_handler(command))


# -- running and printing -----------------------------------------------------------------------


def _show(view: views.View, as_json: bool) -> None:
    if as_json:
        print(json.dumps(view.data, ensure_ascii=False, default=str), flush=True)
        return
    for index, table in enumerate(view.tables):
        if index:
            print()
        if table.title:
            print(table.title)
        if not table.columns:  # wide records: one "key  value" line per field
            print_blocks(table.rows)
        elif table.rows:
            print_table(table.rows, table.columns)
        else:
            print("(none)")
    if view.lines:
        if view.tables:
            print()
        for line in view.lines:
            print(line)


def _handler(command: Command) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        from .clients import _admin, _run

        async def run() -> int:
            async with _admin(args) as admin:
                view = await command.view(admin, args)
            _show(view, args.json)
            return 0

        return _run(run(), args.namesrv)

    return handle
