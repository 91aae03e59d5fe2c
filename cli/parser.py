"""The argument parser of ``pocketmq``: every command a sub-command, every option with help."""

from __future__ import annotations

import argparse
import os
from typing import Any

from pocketmq.store.durations import DEFAULT_DELAY_LEVELS

from . import clients, faults, mqadmin, offline, servers, toolkit
from .options import add_server_options

__all__ = ["build_parser"]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is not zero or more")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0-65535)")
    return value


def _version() -> str:
    # Imported here: importlib.metadata and what it loads are ~1 MiB resident and a few
    # milliseconds in every process, the servers' included, for a flag hardly ever given.
    from importlib import metadata

    try:
        return metadata.version("pocketmq")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: argparse's, but the version is read only when the flag is given."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **_: Any) -> None:
        super().__init__(
            option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help="show the version"
        )

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(f"pocketmq {_version()}")
        parser.exit()


def _add_namesrv(parser: argparse.ArgumentParser) -> None:
    add_server_options(parser, "--namesrv")


def _add_broker(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        metavar="BROKER",
        default=os.environ.get("POCKETMQ_BROKER") or None,
        help="ask only this broker, by name or HOST:PORT (default $POCKETMQ_BROKER, else every "
        "master broker the name server knows)",
    )


def _add_json(parser: argparse.ArgumentParser, what: str = "result") -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help=f"one JSON object per {what}, times as epoch milliseconds",
    )


def _command(
    commands: argparse._SubParsersAction, name: str, help_text: str, **kw: Any
) -> argparse.ArgumentParser:
    # help strings are %-formatted by argparse, descriptions are not
    return commands.add_parser(name, help=help_text, description=help_text.replace("%%", "%"), **kw)


def _actions(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return parser.add_subparsers(dest="action", required=True, metavar="ACTION")


def _add_server_options(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(server=True)
    # Flags default to None: a flag given wins over the config file and the environment, a
    # flag not given leaves them their say (cli/servers.py, docs/configuration.md).
    parser.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="RocketMQ's broker.conf (properties: brokerName, listenPort, namesrvAddr, "
        "storePathRootDir, flushDiskType, ...; docs/configuration.md); UPDATE_BROKER_CONFIG "
        "saves into it",
    )
    _add_log_level(parser)
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=port, help="broker port (default 10911; 0 = any free port)")
    parser.add_argument(
        "--advertise",
        metavar="HOST[:PORT]",
        help="address clients are told to use in routes and offset message IDs (default: "
        "--host and --port); a PORT here is told while the broker listens on --port (a "
        "container's mapped port)",
    )
    parser.add_argument("--data", help="store folder (default ./pocketmq-data)")
    parser.add_argument(
        "--memory", action="store_true", help="keep the store in memory (nothing on disk)"
    )
    parser.add_argument("--name", help="broker name (default broker-a)")
    parser.add_argument("--cluster", help="cluster name (default DefaultCluster)")
    parser.add_argument(
        "--flush",
        choices=("async", "sync"),
        help="sync: acknowledge a send only after fsync (group commit); async: flush every 500 ms",
    )
    parser.add_argument(
        "--delay-levels",
        metavar="LEVELS",
        help=f'messageDelayLevel (default "{DEFAULT_DELAY_LEVELS}")',
    )
    parser.add_argument(
        "--grpc-port",
        type=port,
        metavar="PORT",
        help="port of the RocketMQ 5.x gRPC front-end (default 8081; 0 = any free port)",
    )
    parser.add_argument("--no-grpc", action="store_true", help="do not start the gRPC front-end")
    parser.add_argument(
        "--http-port",
        type=port,
        metavar="PORT",
        help="port of the HTTP front: health, Prometheus metrics, admin JSON API, dashboard "
        "(default 8082; 0 = any free port)",
    )
    parser.add_argument("--no-http", action="store_true", help="do not start the HTTP front")
    parser.add_argument(
        "--no-vip-channel",
        action="store_true",
        help="do not also serve on port - 2 (RocketMQ's VIP channel, fastListenPort)",
    )
    parser.add_argument(
        "--grpc-tls",
        choices=("permissive", "enforcing", "off"),
        help="TLS on the gRPC port, as RocketMQ's proxy tls.server.mode: permissive (default: "
        "TLS and plaintext on the one port), enforcing (TLS only), off (plaintext only)",
    )
    _add_remoting_tls(parser)
    parser.add_argument(
        "--grpc-auto-create-topics",
        action="store_true",
        help="create a topic (message type MIXED) when a gRPC client asks for its route",
    )
    _add_acl(parser)
    _add_limits(parser)
    parser.add_argument(
        "--clean-file-forcibly",
        action="store_true",
        help="under disk pressure (85%% and up) delete the oldest segments even if their "
        "messages are unexpired and unread (RocketMQ's cleanFileForciblyEnable); default: keep "
        "them and refuse writes at 90%%",
    )
    parser.add_argument(
        "--clock",
        choices=("system", "manual"),
        default="system",
        help="manual: time moves only with `pocketmq time advance` (tests of delays, retries, timers)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="repeatable runs: the broker's random choices seeded, and a manual clock starting "
        "at 2026-01-01T00:00:00Z (docs/testing.md)",
    )


def _add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL"),
        metavar="LEVEL",
        help="debug, info, warning, error or critical (default $POCKETMQ_LOG_LEVEL, else info)",
    )


def _add_remoting_tls(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="certificate served over TLS (default: a self-signed one made in DATA/tls, or in "
        "a temporary folder without a data folder)",
    )
    parser.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    parser.add_argument(
        "--remoting-tls",
        action="store_true",
        help="accept TLS on the remoting port(s) too, beside plaintext (4.x clients' tls.enable)",
    )


def _add_limits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a connection limit of the remoting ports, repeatable: buffered_bytes_max "
        "(256 MiB), frame_timeout_s (30), first_request_timeout_s (15), idle_timeout_s (120), "
        "connections_max (4096), frame_size_max, requests_in_flight_max, warning_interval_s",
    )


def _add_acl(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--acl-file",
        metavar="PATH",
        help="turn ACL on with RocketMQ's plain_acl.yml: accounts, topic and group permissions, "
        "white addresses (docs/acl.md)",
    )
    parser.add_argument(
        "--access-key",
        metavar="AK",
        help="turn ACL on with this admin account (or $POCKETMQ_ACCESS_KEY); with --acl-file, "
        "one more admin account",
    )
    parser.add_argument(
        "--secret-key", metavar="SK", help="its secret key (or $POCKETMQ_SECRET_KEY)"
    )


def _servers(commands: argparse._SubParsersAction) -> None:
    standalone = _command(commands, "standalone", "name server and broker in one process")
    _add_server_options(standalone)
    standalone.add_argument(
        "--namesrv-port", type=port, default=9876, help="name server port (default 9876)"
    )
    standalone.set_defaults(handler=servers.standalone)

    namesrv = _command(commands, "namesrv", "run a name server")
    namesrv.set_defaults(server=True, handler=servers.namesrv)
    _add_log_level(namesrv)
    namesrv.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    namesrv.add_argument("--port", type=port, default=9876, help="port (default 9876)")
    _add_remoting_tls(namesrv)
    _add_acl(namesrv)
    _add_limits(namesrv)

    broker = _command(commands, "broker", "run a broker that registers with name servers")
    _add_server_options(broker)
    broker.add_argument(
        "--namesrv",
        metavar="ADDRS",
        help="name servers to register with, ';'-separated (default: namesrvAddr of the "
        "config file, else $NAMESRV_ADDR, else 127.0.0.1:9876; empty: none)",
    )
    broker.set_defaults(handler=servers.broker)


def _messages(commands: argparse._SubParsersAction) -> None:
    send = _command(commands, "send", "send a message (or N copies of it)")
    send.add_argument(
        "--topic", required=True, help="the topic (auto-created when the broker allows)"
    )
    send.add_argument("--tags", help="the TAGS property, e.g. created")
    send.add_argument("--keys", help="keys, separated by spaces or commas (each one is indexed)")
    source = send.add_mutually_exclusive_group()
    source.add_argument("--body", help="the message body (text, sent as UTF-8)")
    source.add_argument(
        "--file", metavar="PATH", help="read the body from this file (default: standard input)"
    )
    send.add_argument("--count", type=positive_int, default=1, help="send it N times (default 1)")
    _add_namesrv(send)
    _add_json(send, "send result")
    send.set_defaults(handler=clients.send)

    consume = _command(commands, "consume", "consume messages and print them")
    consume.add_argument("--topic", required=True, help="the topic")
    consume.add_argument(
        "--group",
        default="pocketmq-cli-consumer",
        help="consumer group (default pocketmq-cli-consumer)",
    )
    consume.add_argument(
        "--count", type=positive_int, help="stop after N messages (default: run until interrupted)"
    )
    consume.add_argument(
        "--from",
        dest="start",
        choices=("first", "last"),
        default="last",
        help="where a queue without a committed offset starts (default last)",
    )
    consume.add_argument(
        "--expression", default="*", help='tag expression, e.g. "A || B" (default *)'
    )
    consume.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for the topic to exist before giving up (default 10; 0 = forever)",
    )
    _add_namesrv(consume)
    _add_json(consume, "message")
    consume.set_defaults(handler=clients.consume)


def _administration(commands: argparse._SubParsersAction) -> None:
    topic = _actions(_command(commands, "topic", "create, list or show topics"))
    create = _command(topic, "create", "create a topic on every master broker")
    create.add_argument("--topic", required=True, help="the topic name")
    create.add_argument(
        "--queues", type=positive_int, default=8, help="read and write queues (default 8)"
    )
    create.add_argument("--order", action="store_true", help="an ordered topic")
    create.add_argument(
        "--message-type",
        choices=("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED", "PRIORITY", "LITE"),
        help="the RocketMQ 5.x message.type attribute (default: none, i.e. NORMAL)",
    )
    create.set_defaults(handler=clients.topic_create)
    listing = _command(topic, "list", "the topics the name servers know, one per line")
    listing.set_defaults(handler=clients.topic_list)
    status = _command(topic, "status", "offsets and last message time of each queue")
    status.add_argument("--topic", required=True, help="the topic name")
    status.set_defaults(handler=clients.topic_status)
    for parser in (create, listing, status):
        _add_namesrv(parser)
        _add_json(parser, "line")

    group = _actions(_command(commands, "group", "create consumer groups"))
    create = _command(group, "create", "create or replace a consumer group on every master broker")
    create.add_argument("--group", required=True, help="the consumer group name")
    create.add_argument(
        "--orderly", action="store_true", help="consume in order (consumeMessageOrderly)"
    )
    create.add_argument(
        "--retry-max-times",
        type=int,
        default=16,
        metavar="N",
        help="redeliveries before the dead-letter queue (default 16)",
    )
    create.add_argument(
        "--attribute",
        "-a",
        action="append",
        default=[],
        metavar="CHANGES",
        help="change the group's attributes, mqadmin's syntax: +key=value adds or replaces, "
        "-key deletes (write --attribute=-key), several comma-separated or the option "
        "repeated (e.g. +lite.bind.topic=PARENT binds a lite consumer group); attributes not "
        "named are kept",
    )
    _add_namesrv(create)
    _add_json(create, "broker")
    create.set_defaults(handler=clients.group_create)

    time = _actions(_command(commands, "time", "read or move the brokers' manual clocks"))
    get = _command(time, "get", "each broker's time, and whether its clock is manual")
    get.set_defaults(handler=clients.time_get)
    advance = _command(time, "advance", "move manual clocks forward; everything due fires")
    advance.add_argument("duration", help="2h, 90s, 1h30m, 250ms, 1d, or milliseconds")
    advance.set_defaults(handler=clients.time_advance)
    set_time = _command(time, "set", "set manual clocks to a time (never backwards)")
    set_time.add_argument("epoch_ms", metavar="EPOCH_MS", type=int, help="epoch milliseconds")
    set_time.set_defaults(handler=clients.time_set)
    for parser in (get, advance, set_time):
        _add_namesrv(parser)
        _add_broker(parser)
        _add_json(parser, "broker")

    msg = _actions(_command(commands, "msg", "one message with its state; mark it for deletion"))
    show = _command(msg, "show", "a message with its state, reconsume times and place")
    show.set_defaults(handler=clients.msg_show, delete=False)
    delete = _command(msg, "delete", "mark a message for deletion: it is never served again")
    delete.set_defaults(handler=clients.msg_show, delete=True)
    for parser in (show, delete):
        parser.add_argument(
            "id", help="an offset message ID, or (with --topic) a unique key or key"
        )
        parser.add_argument(
            "--topic", help="the topic whose index to look a unique key or key up in"
        )
        _add_namesrv(parser)
        _add_broker(parser)
        _add_json(parser, "message")

    dlq = _actions(_command(commands, "dlq", "a consumer group's dead-letter queue"))
    listing = _command(dlq, "list", "every message of %%DLQ%%GROUP")
    listing.set_defaults(handler=clients.dlq_list)
    resend = _command(dlq, "resend", "write dead letters back to their original topic")
    which = resend.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--id", dest="ids", action="append", metavar="ID", help="a message to resend (repeatable)"
    )
    which.add_argument("--all", action="store_true", help="resend every message of the queue")
    resend.set_defaults(handler=clients.dlq_resend)
    for parser in (listing, resend):
        parser.add_argument("--group", required=True, help="the consumer group")
        _add_namesrv(parser)
        _add_broker(parser)
        _add_json(parser, "message")

    tx = _actions(_command(commands, "tx", "pending transactions (half messages)"))
    listing = _command(tx, "list", "every pending transaction")
    listing.set_defaults(handler=clients.tx_list)
    check = _command(tx, "check-now", "ask the producer about a pending transaction now")
    check.add_argument("id", help="the transaction id (unique key) or offset message ID")
    check.set_defaults(handler=clients.tx_check_now)
    for parser in (listing, check):
        _add_namesrv(parser)
        _add_broker(parser)
        _add_json(parser, "transaction")


def _faults(commands: argparse._SubParsersAction) -> None:
    fault = _actions(_command(commands, "fault", "plan faults on a broker, list and clear them"))
    listing = _command(fault, "list", "every fault: planned, and fired with what it did")
    listing.set_defaults(handler=faults.fault_list)
    inject = _command(
        fault,
        "inject",
        "plan a fault for the next sends, check-back answers or pulls; or cut a client's "
        "connections, or crash the broker and recover its store, now",
    )
    inject.add_argument(
        "kind",
        help="system-busy, flush-disk-timeout, slave-not-available, redeliver (sends); "
        "drop-check, delay-check (check-back answers); delay-pull; close-connection, crash (now)",
    )
    inject.add_argument("--times", type=positive_int, help="how many events (default 1)")
    inject.add_argument("--topic", help="only events of this topic (default any)")
    inject.add_argument(
        "--delay", metavar="DURATION", help="delay-check, delay-pull: 30s, 2m, 250ms (broker clock)"
    )
    inject.add_argument("--client-id", help="close-connection: the client's ID (ip@instance)")
    inject.set_defaults(handler=faults.fault_inject)
    clear = _command(fault, "clear", "unplan one fault by its id, or all and forget the fired")
    clear.add_argument("id", nargs="?", type=positive_int, help="the fault's id (default all)")
    clear.set_defaults(handler=faults.fault_clear)
    for parser in (listing, inject, clear):
        parser.add_argument(
            "--http",
            metavar="HOST:PORT",
            default=os.environ.get("POCKETMQ_HTTP") or "127.0.0.1:8082",
            help="the broker's HTTP front (default $POCKETMQ_HTTP, else 127.0.0.1:8082)",
        )
        _add_json(parser, "fault")


def _toolkit(commands: argparse._SubParsersAction) -> None:
    snapshot = _actions(
        _command(commands, "snapshot", "save, restore or list snapshots of a stopped broker")
    )
    save = _command(snapshot, "save", "copy a stopped broker's data folder as snapshot NAME")
    save.add_argument(
        "--clock-ms",
        type=int,
        metavar="EPOCH_MS",
        help="the manual clock's time to keep with it (default: the newest message's store time)",
    )
    save.add_argument("--replace", action="store_true", help="overwrite a snapshot of that name")
    save.set_defaults(handler=toolkit.snapshot_save)
    restore = _command(snapshot, "restore", "put snapshot NAME back as the data folder")
    restore.set_defaults(handler=toolkit.snapshot_restore)
    listing = _command(snapshot, "list", "the snapshots saved, one per line")
    listing.set_defaults(handler=toolkit.snapshot_list, name=None)
    _add_json(listing, "snapshot")
    for parser in (save, restore):
        parser.add_argument(
            "name", metavar="NAME", help="letters, digits, '.', '_' or '-' (up to 100)"
        )
    for parser in (save, restore, listing):
        parser.add_argument(
            "--data", default="./pocketmq-data", help="the data folder (default ./pocketmq-data)"
        )
        parser.add_argument(
            "--snapshots", metavar="DIR", help="where snapshots live (default DATA.snapshots)"
        )

    replay = _command(
        commands,
        "replay",
        "send a store's messages (pocketmq or Apache RocketMQ) again, with their timing, to "
        "brokers on the manual clock",
    )
    replay.add_argument(
        "store", metavar="STORE", help="the store root (the folder holding commitlog/)"
    )
    replay.add_argument(
        "--speed",
        type=toolkit.parse_speed,
        default=1.0,
        help="how many times faster than the original (default 1; max: no waiting); a manual "
        "clock moves by every original gap",
    )
    replay.add_argument(
        "--topics",
        action="append",
        metavar="TOPICS",
        help="only these topics, comma-separated or repeated (default: every application topic)",
    )
    replay.add_argument("--limit", type=positive_int, metavar="N", help="stop after N messages")
    replay.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_namesrv(replay)
    replay.set_defaults(handler=toolkit.replay)


def _offline(commands: argparse._SubParsersAction) -> None:
    ids = _actions(_command(commands, "id", "message IDs"))
    decode = _command(
        ids, "decode", "the scheme and every field of 4.x unique, offset and 5.x message IDs"
    )
    decode.add_argument("ids", nargs="+", metavar="ID", help="message IDs (hex)")
    decode.set_defaults(handler=offline.id_decode)

    store = _actions(
        _command(commands, "store", "read a store folder (pocketmq or Apache RocketMQ)")
    )
    inspect = _command(store, "inspect", "one line per record, then a summary")
    inspect.add_argument(
        "dir", metavar="DIR", help="the store root (the folder holding commitlog/)"
    )
    inspect.add_argument("--topic", help="only records of this topic")
    inspect.add_argument(
        "--from",
        dest="from_offset",
        type=int,
        default=0,
        metavar="OFFSET",
        help="start at this physical offset",
    )
    inspect.add_argument(
        "--limit", type=positive_int, metavar="N", help="stop after N records shown"
    )
    _add_json(inspect, "record")
    inspect.set_defaults(handler=offline.store_inspect)

    export = _command(
        commands,
        "export",
        "export a store (pocketmq or Apache RocketMQ) with Spark: Parquet and more",
    )
    export.add_argument(
        "store_dir", metavar="STORE_DIR", help="the store root (the folder holding commitlog/)"
    )
    export.add_argument("--out", required=True, help="output folder")
    export.add_argument(
        "--format", default="parquet", choices=("parquet", "json", "orc"), help="default parquet"
    )
    export.add_argument("--topic", action="append", help="only this topic (repeatable)")
    export.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_spark_source(export)
    export.set_defaults(handler=offline.export)

    report = _command(
        commands,
        "report",
        "the store's analyses (lifecycles, delays, retries, transactions, rates) as one HTML page",
    )
    report.add_argument(
        "store_dir", metavar="STORE_DIR", help="the store root (the folder holding commitlog/)"
    )
    report.add_argument("--out", required=True, help="the HTML file to write")
    report.add_argument(
        "--every", default="1 minute", help="rate window, a Spark interval (default 1 minute)"
    )
    report.add_argument(
        "--delay-levels",
        default=None,
        help="the broker's messageDelayLevel if not RocketMQ's default (1s 5s 10s 30s 1m ...)",
    )
    report.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_spark_source(report)
    report.set_defaults(handler=offline.report)

    jar = _command(
        commands,
        "spark-jar",
        "print the path of the JVM Spark data source's jar (for spark-submit --jars), "
        "compiling it first with javac if needed",
    )
    jar.add_argument("--force", action="store_true", help="compile again even if built")
    jar.set_defaults(handler=offline.spark_jar)


def _add_spark_source(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--source",
        choices=("auto", "jvm", "python"),
        default=None,
        help="the data source that reads the store: auto (default, or $POCKETMQ_SPARK_SOURCE) "
        "is the JVM one when its jar is built or javac can build it, else the Python one",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pocketmq", description="pocketmq: a RocketMQ-compatible message broker and emulator"
    )
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _servers(commands)
    _messages(commands)
    _administration(commands)
    _faults(commands)
    mqadmin.register(commands)  # pocketmq admin <mqadmin command>
    _offline(commands)
    _toolkit(commands)
    return parser
