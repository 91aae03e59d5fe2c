"""The commands that talk to running servers through the SDK: ``send``, ``consume``,
``topic``, ``group``, ``time``, ``msg``, ``dlq``, ``tx``.

Each finds its brokers through the name servers (``--namesrv``); the administration commands
take ``--broker`` (a name or HOST:PORT) to ask one broker only. Human output by default,
``--json`` for programs.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from .errors import UsageError
from .output import emit

__all__ = [
    "consume",
    "dlq_list",
    "dlq_resend",
    "group_create",
    "msg_show",
    "send",
    "time_advance",
    "time_get",
    "time_set",
    "topic_create",
    "topic_list",
    "topic_status",
    "tx_check_now",
    "tx_list",
]


def _run(coroutine: Coroutine[Any, Any, int], namesrv: str) -> int:
    """Run one SDK coroutine; every SDK error is one line on stderr and exit status 1."""
    from pocketmq.client.errors import ClientError, ClientUsageError, ConnectionLostError

    try:
        return asyncio.run(coroutine)
    except ConnectionLostError as error:
        role = "name server" if error.addr in namesrv.split(";") else "broker"
        print(f"pocketmq: cannot reach the {role} at {error.addr}: {error.reason}", file=sys.stderr)
        return 1
    except ClientUsageError as error:
        print(f"pocketmq: {error}", file=sys.stderr)
        return 2
    except (ClientError, TimeoutError) as error:
        print(f"pocketmq: {error}", file=sys.stderr)
        return 1


def _admin(args: argparse.Namespace) -> Any:
    from pocketmq.client.admin import Admin

    return Admin(args.namesrv, credentials=_credentials(args))


def _credentials(args: argparse.Namespace) -> Any:
    """``--access-key/--secret-key`` (or $POCKETMQ_ACCESS_KEY / $POCKETMQ_SECRET_KEY): the
    account requests are signed with, for servers with ACL; None: unsigned."""
    from pocketmq.client.connection import Credentials

    access_key, secret_key = args.access_key, args.secret_key
    if bool(access_key) != bool(secret_key):
        raise UsageError("--access-key and --secret-key go together")
    return Credentials(access_key, secret_key) if access_key and secret_key else None


# -- send and consume ---------------------------------------------------------------------------


def _body(args: argparse.Namespace) -> bytes:
    if args.file is not None:
        try:
            return Path(args.file).read_bytes()
        except OSError as error:
            raise UsageError(f"--file {args.file}: {error.strerror or error}") from None
    if args.body is not None:
        return args.body.encode()
    if sys.stdin.isatty():
        print(
            "pocketmq send: reading the body from standard input; end it with Ctrl-D "
            "(or give --body TEXT or --file PATH)",
            file=sys.stderr,
        )
    return sys.stdin.buffer.read()


def send(args: argparse.Namespace) -> int:
    from pocketmq.client.cli import cmd_send

    body = _body(args)
    credentials = _credentials(args)

    async def run() -> int:
        async for result in cmd_send(
            args.namesrv,
            args.topic,
            args.tags,
            args.keys,
            body,
            args.count,
            credentials=credentials,
        ):
            emit([result], as_json=args.json)
        return 0

    return _run(run(), args.namesrv)


def _body_text(message: dict[str, Any]) -> str:
    """A text body (printable UTF-8) as a quoted string, 'hello'; any other body as a Python
    bytes literal, b'\\x00\\x01'."""
    text = message.get("body")
    if text is None:
        return repr(base64.b64decode(message.get("body_base64") or b""))
    if all(c.isprintable() or c in "\n\r\t" for c in text):
        return repr(text)
    return repr(text.encode())


def consume(args: argparse.Namespace) -> int:
    import json

    from pocketmq.client.cli import cmd_consume, wait_for_route

    def waiting(topic: str) -> None:
        limit = f"up to {args.timeout:g} s" if args.timeout else "until interrupted"
        print(
            f"pocketmq consume: topic {topic!r} has no route yet; waiting {limit} (--timeout)",
            file=sys.stderr,
            flush=True,
        )

    credentials = _credentials(args)

    async def run() -> int:
        await wait_for_route(
            args.namesrv, args.topic, args.timeout or None, waiting, credentials=credentials
        )
        async for message in cmd_consume(
            args.namesrv,
            args.topic,
            args.group,
            args.count,
            args.start,
            args.expression,
            credentials=credentials,
        ):
            if args.json:
                print(json.dumps(message, default=str), flush=True)
            else:
                tags = message.get("tags") or "-"
                print(f"{message.get('msg_id')} {tags} {_body_text(message)}", flush=True)
        return 0

    return _run(run(), args.namesrv)


# -- topics and groups --------------------------------------------------------------------------


def topic_create(args: argparse.Namespace) -> int:
    async def run() -> int:
        async with _admin(args) as admin:
            brokers = await admin.create_topic(
                args.topic, args.queues, order=args.order, message_type=args.message_type
            )
        result: dict[str, Any] = {"topic": args.topic, "queues": args.queues, "brokers": brokers}
        if args.message_type is not None:
            result["message_type"] = args.message_type
        emit([result], as_json=args.json)
        return 0

    return _run(run(), args.namesrv)


def topic_list(args: argparse.Namespace) -> int:
    async def run() -> int:
        async with _admin(args) as admin:
            topics = await admin.list_topics()
        if args.json:
            emit([{"topic": topic} for topic in topics], as_json=True)
        else:
            for topic in topics:
                print(topic)
        return 0

    return _run(run(), args.namesrv)


def topic_status(args: argparse.Namespace) -> int:
    columns = (
        "broker_name",
        "queue_id",
        "min_offset",
        "max_offset",
        "last_update_ms",
        "message_type",
    )

    async def run() -> int:
        async with _admin(args) as admin:
            rows = [queue.to_dict() for queue in await admin.topic_status(args.topic)]
        emit(rows, as_json=args.json, shape="table", columns=columns)
        return 0

    return _run(run(), args.namesrv)


def group_create(args: argparse.Namespace) -> int:
    async def run() -> int:
        async with _admin(args) as admin:
            brokers = await admin.create_group(
                args.group,
                orderly=args.orderly,
                retry_max_times=args.retry_max_times,
                attributes=",".join(args.attribute) or None,
            )
        rows = [
            {
                "group": args.group,
                "broker": name,
                "orderly": args.orderly,
                "retry_max_times": args.retry_max_times,
                # the changes asked for, when there were some
                **({"attributes": ",".join(args.attribute)} if args.attribute else {}),
            }
            for name in brokers
        ]
        emit(rows, as_json=args.json)
        return 0

    return _run(run(), args.namesrv)


# -- the manual clock ---------------------------------------------------------------------------


def _clock(args: argparse.Namespace, call: str, *values: Any) -> int:
    async def run() -> int:
        async with _admin(args) as admin:
            states = await getattr(admin, call)(*values, broker=args.broker)
        emit([state.to_dict() for state in states.values()], as_json=args.json)
        return 0

    return _run(run(), args.namesrv)


def time_get(args: argparse.Namespace) -> int:
    return _clock(args, "clock")


def time_advance(args: argparse.Namespace) -> int:
    from pocketmq.client._duration import duration_ms

    try:
        duration = duration_ms(args.duration)
    except (TypeError, ValueError) as error:
        raise UsageError(f"time advance: {error}") from None
    return _clock(args, "advance_clock", duration)


def time_set(args: argparse.Namespace) -> int:
    return _clock(args, "set_clock", args.epoch_ms)


# -- messages, dead letters, transactions -------------------------------------------------------

_TX_COLUMNS = (
    "transaction_id",
    "producer_group",
    "topic",
    "check_times",
    "next_check_ms",
    "born_timestamp",
    "offset_msg_id",
)


def _show(
    args: argparse.Namespace,
    call: str,
    *values: Any,
    shape: str = "fields",
    columns: tuple[str, ...] = (),
    empty: str | None = None,
    **options: Any,
) -> int:
    """Call ``Admin.<call>`` against the brokers and print the rows it returns."""

    async def run() -> int:
        async with _admin(args) as admin:
            rows = await getattr(admin, call)(*values, broker=args.broker, **options)
        if not rows and empty is not None and not args.json:
            print(empty)
        else:
            emit(rows, as_json=args.json, shape=shape, columns=columns)
        return 0

    return _run(run(), args.namesrv)


def msg_show(args: argparse.Namespace) -> int:
    return _show(
        args, "show_message", args.id, topic=args.topic, delete=args.delete, shape="blocks"
    )


def dlq_list(args: argparse.Namespace) -> int:
    return _show(args, "dead_letters", args.group, shape="blocks", empty="the queue is empty")


def dlq_resend(args: argparse.Namespace) -> int:
    return _show(args, "resend_dead_letters", args.group, None if args.all else args.ids)


def tx_list(args: argparse.Namespace) -> int:
    return _show(
        args, "transactions", shape="table", columns=_TX_COLUMNS, empty="no pending transactions"
    )


def tx_check_now(args: argparse.Namespace) -> int:
    return _show(args, "check_transaction", args.id)
