"""The ``pocketmq`` command line (``pocketmq --help``; every command in docs/cli.md).

Servers: ``standalone``, ``namesrv``, ``broker``. Messages over the SDK: ``send``, ``consume``,
``topic``. Broker administration: ``time`` (the manual clock), ``msg show|delete``, ``dlq``,
``tx``. Offline: ``id decode``, ``store inspect``.

Exit status: 0 on success; 2 when an argument is wrong (an ID that fits no scheme, a folder that
is not a store); 1 when the broker refused, a client error happened, or ``store inspect`` found
damage (bad CRC, torn tail, damaged segment); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["main"]


def _iso_ms(ms: int) -> str:
    try:
        return (
            datetime.fromtimestamp(ms / 1000, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )
    except (OverflowError, OSError, ValueError):
        return f"invalid({ms})"


def _preview(body: bytes, width: int = 40) -> str:
    head = body[:width]
    try:
        text = head.decode("utf-8")
        if text.isprintable():
            return text + ("..." if len(body) > width else "")
    except UnicodeDecodeError:
        pass
    return "0x" + head.hex() + ("..." if len(body) > width else "")


def _cmd_id_decode(args: argparse.Namespace) -> int:
    from ids import InvalidMessageIdError, decode_message_id

    status = 0
    for text in args.ids:
        try:
            decoded = decode_message_id(text)
        except InvalidMessageIdError as error:
            print(f"{text}: {error}", file=sys.stderr)
            status = 2
            continue
        print(json.dumps({"id": text, **decoded}, default=str))
    return status


def _cmd_store_inspect(args: argparse.Namespace) -> int:
    from ids import offset_msg_id_from_packed
    from store.reader import StoreReader
    from store.state import MessageState

    try:
        reader = StoreReader(args.dir)
    except FileNotFoundError as error:
        print(f"pocketmq store inspect: {error}", file=sys.stderr)
        return 2
    states = reader.states()
    shown = 0
    out = sys.stdout
    for item in reader.iter_records(from_offset=args.from_offset):
        record = item.record
        if args.topic is not None and record.topic != args.topic:
            continue
        if item.physical_offset < args.from_offset:
            continue
        shown += 1
        change = states.change_of(item.physical_offset)
        state = change.state if change else MessageState.AVAILABLE
        row = {
            "physical_offset": item.physical_offset,
            "size": item.size,
            "topic": record.topic,
            "queue_id": record.queue_id,
            "queue_offset": record.queue_offset,
            "tags": record.tags,
            "keys": record.keys,
            "unique_key": record.unique_key,
            "offset_msg_id": offset_msg_id_from_packed(
                record.store_host.address, record.store_host.port, item.physical_offset
            ),
            "born_timestamp": _iso_ms(record.born_timestamp),
            "store_timestamp": _iso_ms(record.store_timestamp),
            "born_host": str(record.born_host),
            "store_host": str(record.store_host),
            "reconsume_times": record.reconsume_times,
            "sysflag": record.sysflag,
            "crc_ok": item.crc_ok,
            "state": state.label,
            "state_code": int(state),
            "body_size": len(record.body),
            "body_preview": _preview(record.body),
            "segment": item.segment.path.name,
        }
        if args.json:
            out.write(json.dumps(row) + "\n")
        else:
            out.write(
                f"{row['physical_offset']:>14} {row['size']:>7} {record.topic} "
                f"q={record.queue_id} qoff={record.queue_offset} tags={record.tags or '-'} "
                f"keys={','.join(record.keys) or '-'} uniq={record.unique_key or '-'} "
                f"born={row['born_timestamp']} stored={row['store_timestamp']} "
                f"crc={'ok' if item.crc_ok else 'BAD'} state={state.label} body={row['body_preview']!r}\n"
            )
        if args.limit is not None and shown >= args.limit:
            break  # stop before reading (and counting) the next record
    summary = reader.summary
    result = {
        "records": summary.records,
        "bytes": summary.bytes,
        "bad_records": summary.bad_crc,
        "torn_tail": summary.torn_tail,
        "torn_tail_bytes": summary.torn_tail_bytes,
        "damaged": summary.damaged,
        "not_segments": summary.foreign_files,
        "shown": shown,
    }
    if args.json:
        out.write(json.dumps({"summary": result}) + "\n")
    else:
        out.write(
            f"-- {summary.records} records, {summary.bytes} bytes, {summary.bad_crc} bad records, "
            f"torn tail: {summary.torn_tail or 'none'}"
            + "".join(f"\n-- DAMAGED: {d}" for d in summary.damaged)
            + "".join(f"\n-- not a segment: {f}" for f in summary.foreign_files)
            + "\n"
        )
    # A limit stops the walk early, so only what was walked is judged.
    damaged = summary.bad_crc or summary.torn_tail or summary.damaged
    return 1 if damaged else 0


def _namesrv_default() -> str:
    return os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")


def _run(coroutine_factory: Callable[[], Coroutine[Any, Any, None]]) -> int:
    import uvloop  # the event loop of the servers; library code never imports it

    logging.basicConfig(
        level=os.environ.get("POCKETMQ_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from store.errors import StoreError

    try:
        with contextlib.suppress(KeyboardInterrupt):
            uvloop.run(coroutine_factory())
    except (StoreError, OSError) as error:
        # A locked or unreadable store, a port in use, a full disk: say it in one line.
        print(f"pocketmq: cannot start: {error}", file=sys.stderr)
        return 1
    return 0


def _broker_config(args: argparse.Namespace, namesrv: list[str]) -> Any:
    from broker.config import BrokerConfig
    from store.config import StoreConfig

    try:
        store = (
            StoreConfig() if not args.delay_levels else StoreConfig(delay_levels=args.delay_levels)
        )
    except ValueError as error:
        raise SystemExit(f"pocketmq: --delay-levels: {error}") from None
    return BrokerConfig(
        store=store,
        broker_name=args.name,
        cluster_name=args.cluster,
        host=args.host,
        port=args.port,
        advertised_host=args.advertise,
        namesrv_addrs=namesrv,
        data_dir=None if args.memory else Path(args.data),
        flush=args.flush,
        grpc_port=_grpc_port(args),
        grpc_auto_create_topics=args.grpc_auto_create_topics,
        access_keys=_access_keys(args),
    )


def _grpc_port(args: argparse.Namespace) -> int | None:
    """The gRPC front-end's port: on by default when the grpc extra is installed."""
    from broker.grpc import grpc_available

    if args.no_grpc:
        return None
    if not grpc_available():
        if args.grpc_port is not None:
            raise SystemExit(
                "pocketmq: --grpc-port: the gRPC front-end is not installed "
                "(pip install 'pocketmq[grpc]')"
            )
        logging.getLogger("pocketmq").warning(
            "gRPC front-end off: pip install 'pocketmq[grpc]' for the RocketMQ 5.x SDKs"
        )
        return None
    return 8081 if args.grpc_port is None else args.grpc_port


def _access_keys(args: argparse.Namespace) -> dict[str, str]:
    access_key = args.access_key or os.environ.get("POCKETMQ_ACCESS_KEY")
    secret_key = args.secret_key or os.environ.get("POCKETMQ_SECRET_KEY")
    if bool(access_key) != bool(secret_key):
        raise SystemExit("pocketmq: --access-key and --secret-key go together")
    return {access_key: secret_key} if access_key and secret_key else {}


def _clock(args: argparse.Namespace) -> Any:
    from broker.services.clock import ManualClock, SystemClock

    return ManualClock() if args.clock == "manual" else SystemClock()


def _cmd_namesrv(args: argparse.Namespace) -> int:
    from broker.serve import run_namesrv

    return _run(lambda: run_namesrv(args.host, args.port))


def _cmd_broker(args: argparse.Namespace) -> int:
    from broker.serve import run_broker

    namesrv = [a for a in (args.namesrv or "").split(";") if a]
    return _run(lambda: run_broker(_broker_config(args, namesrv), _clock(args)))


def _cmd_standalone(args: argparse.Namespace) -> int:
    from broker.serve import run_standalone

    return _run(
        lambda: run_standalone(_broker_config(args, []), args.host, args.namesrv_port, _clock(args))
    )


def _add_broker_options(parser: argparse.ArgumentParser, *, data_default: str) -> None:
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    parser.add_argument(
        "--port", type=int, default=10911, help="broker port (default 10911; 0 = any free port)"
    )
    parser.add_argument(
        "--advertise", metavar="HOST", help="host clients should use (default: --host)"
    )
    parser.add_argument(
        "--data", default=data_default, help=f"store directory (default {data_default})"
    )
    parser.add_argument(
        "--memory", action="store_true", help="keep the store in memory (nothing on disk)"
    )
    parser.add_argument("--name", default="broker-a", help="broker name (default broker-a)")
    parser.add_argument(
        "--cluster", default="DefaultCluster", help="cluster name (default DefaultCluster)"
    )
    parser.add_argument(
        "--flush",
        choices=("async", "sync"),
        default="async",
        help="sync: acknowledge a send only after fsync (group commit); async: flush every 500 ms",
    )
    parser.add_argument(
        "--delay-levels",
        metavar="LEVELS",
        help='messageDelayLevel (default "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")',
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        metavar="PORT",
        help="port of the RocketMQ 5.x gRPC front-end (default 8081; 0 = any free port)",
    )
    parser.add_argument("--no-grpc", action="store_true", help="do not start the gRPC front-end")
    parser.add_argument(
        "--grpc-auto-create-topics",
        action="store_true",
        help="create a topic (message type MIXED) when a gRPC client asks for its route",
    )
    parser.add_argument(
        "--access-key",
        metavar="AK",
        help="require gRPC calls signed with this access key (or $POCKETMQ_ACCESS_KEY)",
    )
    parser.add_argument(
        "--secret-key", metavar="SK", help="its secret key (or $POCKETMQ_SECRET_KEY)"
    )
    parser.add_argument(
        "--clock",
        choices=("system", "manual"),
        default="system",
        help="manual: time moves only with `pocketmq time advance` (tests of delays, retries, timers)",
    )


def _admin_call(address: str, code: int, ext: dict[str, str]) -> Any:
    """One pocketmq admin request to a broker; returns the response command."""
    import asyncio

    from broker.protocol import RemotingCommand
    from broker.remoting.client import OutboundConnection

    async def call() -> Any:
        connection = OutboundConnection(address, timeout_s=60.0)
        try:
            return await connection.request(RemotingCommand(code=code, ext_fields=ext))
        finally:
            await connection.close()

    try:
        return asyncio.run(call())
    except (OSError, TimeoutError) as error:
        raise SystemExit(f"pocketmq: cannot reach the broker at {address}: {error}") from None


def _print_response(response: Any) -> int:
    if response.code != 0:
        print(f"pocketmq: the broker said {response.code}: {response.remark}", file=sys.stderr)
        return 1
    if response.body:
        for item in json.loads(response.body):
            print(json.dumps(item))
    else:
        print(json.dumps(response.ext_fields or {}))
    return 0


def _cmd_time(args: argparse.Namespace) -> int:
    from broker.protocol import RequestCode

    ext = {"action": args.action}
    if args.action == "advance":
        ext["duration"] = args.value
    elif args.action == "set":
        ext["time"] = args.value
    if args.action != "get" and not args.value:
        raise SystemExit(f"pocketmq time {args.action}: a value is needed (e.g. 2h, or epoch ms)")
    return _print_response(_admin_call(args.broker, RequestCode.POCKETMQ_CLOCK, ext))


def _cmd_msg_show(args: argparse.Namespace) -> int:
    from broker.protocol import RequestCode
    from ids import InvalidMessageIdError, decode_message_id

    action = {"action": "delete"} if args.msg_command == "delete" else {}
    if args.topic is not None:
        # A unique key (any scheme, or whatever the producer set) or a KEYS value, per topic.
        ext = {"topic": args.topic, "key": args.id.strip(), **action}
        return _print_response(_admin_call(args.broker, RequestCode.POCKETMQ_MESSAGE_INFO, ext))
    try:
        decoded = decode_message_id(args.id)
    except InvalidMessageIdError as error:
        print(f"{args.id}: {error}", file=sys.stderr)
        return 2
    if decoded["scheme"] != "offset":
        print(
            "pocketmq msg show: a unique key needs --topic (the index is per topic)",
            file=sys.stderr,
        )
        return 2
    ext = {"offset": str(decoded["physical_offset"]), **action}
    return _print_response(
        _admin_call(
            decoded.get("broker_addr") or args.broker, RequestCode.POCKETMQ_MESSAGE_INFO, ext
        )
    )


def _cmd_dlq(args: argparse.Namespace) -> int:
    from broker.protocol import RequestCode

    ext = {"action": args.action, "group": args.group}
    if args.action == "resend":
        if not args.ids and not args.all:
            raise SystemExit("pocketmq dlq resend: name messages with --id, or give --all")
        ext["ids"] = ",".join(args.ids or [])
    return _print_response(_admin_call(args.broker, RequestCode.POCKETMQ_DLQ, ext))


def _cmd_tx(args: argparse.Namespace) -> int:
    from broker.protocol import RequestCode

    ext = {"action": args.action}
    if args.action == "check-now":
        if not args.id:
            raise SystemExit(
                "pocketmq tx check-now: give the transaction id (unique key) or offset message id"
            )
        ext["id"] = args.id
    return _print_response(_admin_call(args.broker, RequestCode.POCKETMQ_TX, ext))


def _run_client(coroutine: Coroutine[Any, Any, int]) -> int:
    import asyncio

    from client.errors import ClientError

    try:
        return asyncio.run(coroutine)
    except ClientError as error:
        print(f"pocketmq: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _cmd_send(args: argparse.Namespace) -> int:
    from client.cli import cmd_send

    if args.file is not None:
        body = Path(args.file).read_bytes()
    elif args.body is not None:
        body = args.body.encode()
    else:
        body = sys.stdin.buffer.read()

    async def run() -> int:
        async for result in cmd_send(
            args.namesrv, args.topic, args.tags, args.keys, body, args.count
        ):
            print(json.dumps(result), flush=True)
        return 0

    return _run_client(run())


def _cmd_consume(args: argparse.Namespace) -> int:
    from client.cli import cmd_consume

    async def run() -> int:
        async for message in cmd_consume(
            args.namesrv, args.topic, args.group, args.count, args.start, args.expression
        ):
            if args.json:
                print(json.dumps(message, default=str), flush=True)
            else:
                body = message.get("body")
                print(f"{message.get('msg_id')} {message.get('tags') or '-'} {body!r}", flush=True)
        return 0

    return _run_client(run())


def _cmd_topic(args: argparse.Namespace) -> int:
    from client.admin import Admin
    from client.cli import cmd_topic_list, cmd_topic_status

    async def run() -> int:
        if args.action == "create":
            async with Admin(args.namesrv) as admin:
                brokers = await admin.create_topic(
                    args.topic, args.queues, order=args.order, message_type=args.message_type
                )
            result = {"topic": args.topic, "queues": args.queues, "brokers": brokers}
            if args.message_type is not None:
                result["message_type"] = args.message_type
            print(json.dumps(result))
        elif args.action == "list":
            for topic in await cmd_topic_list(args.namesrv):
                print(topic)
        else:
            for row in await cmd_topic_status(args.namesrv, args.topic):
                print(json.dumps(row))
        return 0

    if args.action in ("create", "status") and not args.topic:
        raise SystemExit(f"pocketmq topic {args.action}: --topic is needed")
    return _run_client(run())


def _cmd_group(args: argparse.Namespace) -> int:
    from client.admin import Admin

    async def run() -> int:
        async with Admin(args.namesrv) as admin:
            brokers = await admin.create_group(
                args.group, orderly=args.orderly, retry_max_times=args.retry_max_times
            )
        for name in brokers:
            row = {
                "group": args.group,
                "broker": name,
                "orderly": args.orderly,
                "retry_max_times": args.retry_max_times,
            }
            print(json.dumps(row))
        return 0

    return _run_client(run())


def _cmd_export(args: argparse.Namespace) -> int:
    try:
        from sparkexport.cli import export_main
    except ImportError as error:  # pyspark is an optional extra
        print(f"pocketmq export: {error}", file=sys.stderr)
        return 2
    return export_main(args.store_dir, args.out, args.format, args.topic, progress=not args.quiet)


def _add_namesrv(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namesrv",
        default=_namesrv_default(),
        help="name servers, ';'-separated (default $NAMESRV_ADDR or 127.0.0.1:9876)",
    )


def _add_broker_address(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker",
        default=os.environ.get("POCKETMQ_BROKER", "127.0.0.1:10911"),
        help="broker address (default $POCKETMQ_BROKER or 127.0.0.1:10911)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pocketmq", description="pocketmq: a RocketMQ-compatible message broker and emulator"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    standalone = commands.add_parser("standalone", help="name server and broker in one process")
    _add_broker_options(standalone, data_default="./pocketmq-data")
    standalone.add_argument(
        "--namesrv-port", type=int, default=9876, help="name server port (default 9876)"
    )
    standalone.set_defaults(handler=_cmd_standalone)

    namesrv = commands.add_parser("namesrv", help="run a name server")
    namesrv.add_argument("--host", default="127.0.0.1")
    namesrv.add_argument("--port", type=int, default=9876)
    namesrv.set_defaults(handler=_cmd_namesrv)

    broker = commands.add_parser("broker", help="run a broker that registers with name servers")
    _add_broker_options(broker, data_default="./pocketmq-data")
    broker.add_argument(
        "--namesrv",
        default=_namesrv_default(),
        help="name servers, ';'-separated (default $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    broker.set_defaults(handler=_cmd_broker)

    id_parser = commands.add_parser("id", help="message IDs")
    id_commands = id_parser.add_subparsers(dest="id_command", required=True, metavar="ACTION")
    decode = id_commands.add_parser(
        "decode", help="print the scheme and every field of 4.x unique, offset and 5.x message IDs"
    )
    decode.add_argument("ids", nargs="+", metavar="ID")
    decode.set_defaults(handler=_cmd_id_decode)

    send = commands.add_parser("send", help="send messages; one JSON line per send result")
    send.add_argument("--topic", required=True)
    send.add_argument("--tags")
    send.add_argument("--keys", help="space- or comma-separated keys")
    source = send.add_mutually_exclusive_group()
    source.add_argument("--body", help="the message body (text)")
    source.add_argument("--file", help="read the body from this file (default: standard input)")
    send.add_argument("--count", type=int, default=1, help="send it this many times")
    _add_namesrv(send)
    send.set_defaults(handler=_cmd_send)

    consume = commands.add_parser("consume", help="consume messages and print them")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--group", default="pocketmq-cli-consumer")
    consume.add_argument(
        "--count", type=int, help="stop after N messages (default: run until interrupted)"
    )
    consume.add_argument("--from", dest="start", choices=("first", "last"), default="last")
    consume.add_argument("--expression", default="*", help='tag expression, e.g. "A || B"')
    consume.add_argument("--json", action="store_true", help="one JSON object per message")
    _add_namesrv(consume)
    consume.set_defaults(handler=_cmd_consume)

    topic = commands.add_parser("topic", help="create, list or show topics")
    topic.add_argument("action", choices=("create", "list", "status"))
    topic.add_argument("--topic")
    topic.add_argument("--queues", type=int, default=8)
    topic.add_argument("--order", action="store_true", help="an ordered topic")
    topic.add_argument(
        "--message-type",
        choices=("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"),
        help="create: the RocketMQ 5.x message.type attribute (default: none, i.e. NORMAL)",
    )
    _add_namesrv(topic)
    topic.set_defaults(handler=_cmd_topic)

    group = commands.add_parser("group", help="create consumer groups")
    group.add_argument("action", choices=("create",))
    group.add_argument("--group", required=True)
    group.add_argument(
        "--orderly", action="store_true", help="consume in order (consumeMessageOrderly)"
    )
    group.add_argument(
        "--retry-max-times",
        type=int,
        default=16,
        metavar="N",
        help="redeliveries before the dead-letter queue (default 16)",
    )
    _add_namesrv(group)
    group.set_defaults(handler=_cmd_group)

    time_parser = commands.add_parser("time", help="read or move a broker's manual clock")
    time_parser.add_argument("action", choices=("get", "advance", "set"))
    time_parser.add_argument(
        "value", nargs="?", help="advance: a duration (2h, 90s, 1h30m, 250ms); set: epoch ms"
    )
    _add_broker_address(time_parser)
    time_parser.set_defaults(handler=_cmd_time)

    msg_parser = commands.add_parser("msg", help="messages on a broker")
    msg_commands = msg_parser.add_subparsers(dest="msg_command", required=True, metavar="ACTION")
    show = msg_commands.add_parser(
        "show", help="a message with its state, reconsume times and place"
    )
    show.add_argument("id", help="offset message ID, or a unique key (with --topic)")
    show.add_argument("--topic", help="the topic to look a unique key or key up in")
    _add_broker_address(show)
    show.set_defaults(handler=_cmd_msg_show)
    delete = msg_commands.add_parser(
        "delete", help="mark a message for deletion: it is never served again"
    )
    delete.add_argument("id", help="offset message ID, or a unique key (with --topic)")
    delete.add_argument("--topic", help="the topic to look a unique key or key up in")
    _add_broker_address(delete)
    delete.set_defaults(handler=_cmd_msg_show)

    dlq_parser = commands.add_parser("dlq", help="a consumer group's dead-letter queue")
    dlq_parser.add_argument("action", choices=("list", "resend"))
    dlq_parser.add_argument("--group", required=True)
    dlq_parser.add_argument(
        "--id", dest="ids", action="append", help="a message to resend (repeatable)"
    )
    dlq_parser.add_argument("--all", action="store_true", help="resend every message of the DLQ")
    _add_broker_address(dlq_parser)
    dlq_parser.set_defaults(handler=_cmd_dlq)

    tx_parser = commands.add_parser("tx", help="pending transactions (half messages)")
    tx_parser.add_argument("action", choices=("list", "check-now"))
    tx_parser.add_argument("id", nargs="?", help="check-now: transaction id or offset message id")
    _add_broker_address(tx_parser)
    tx_parser.set_defaults(handler=_cmd_tx)

    export = commands.add_parser(
        "export", help="export a store (pocketmq or Apache RocketMQ) with Spark: Parquet and more"
    )
    export.add_argument(
        "store_dir", metavar="STORE_DIR", help="the store root (the folder holding commitlog/)"
    )
    export.add_argument("--out", required=True, help="output folder")
    export.add_argument("--format", default="parquet", choices=("parquet", "json", "orc"))
    export.add_argument("--topic", action="append", help="only this topic (repeatable)")
    export.add_argument("--quiet", action="store_true", help="no progress lines")
    export.set_defaults(handler=_cmd_export)

    store_parser = commands.add_parser(
        "store", help="read a store directory (pocketmq or Apache RocketMQ)"
    )
    store_commands = store_parser.add_subparsers(
        dest="store_command", required=True, metavar="ACTION"
    )
    inspect = store_commands.add_parser("inspect", help="one line per record, then a summary")
    inspect.add_argument("dir", help="the store root (the folder holding commitlog/)")
    inspect.add_argument("--topic", help="only records of this topic")
    inspect.add_argument(
        "--from",
        dest="from_offset",
        type=int,
        default=0,
        metavar="OFFSET",
        help="start at this physical offset",
    )
    inspect.add_argument("--limit", type=int, metavar="N", help="show at most N records")
    inspect.add_argument("--json", action="store_true", help="one JSON object per line")
    inspect.set_defaults(handler=_cmd_store_inspect)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
