"""Commands that read files, not servers: ``id decode``, ``store inspect``, ``export``, ``report``,
``spark-jar``."""

from __future__ import annotations

import argparse
import json
import sys

from .output import iso_ms

__all__ = ["export", "id_decode", "report", "spark_jar", "store_inspect"]


def id_decode(args: argparse.Namespace) -> int:
    from pocketmq.ids import InvalidMessageIdError, decode_message_id

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


def _preview(body: bytes, width: int = 40) -> str:
    head = body[:width]
    try:
        text = head.decode("utf-8")
        if text.isprintable():
            return text + ("..." if len(body) > width else "")
    except UnicodeDecodeError:
        pass
    return "0x" + head.hex() + ("..." if len(body) > width else "")


def store_inspect(args: argparse.Namespace) -> int:
    from pocketmq.ids import offset_msg_id_from_packed
    from pocketmq.store.reader import StoreReader
    from pocketmq.store.state import MessageState

    try:
        reader = StoreReader(args.dir)
    except (FileNotFoundError, NotADirectoryError) as error:
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
        problems = [item.problem] if item.problem else []
        try:
            offset_msg_id: str | None = offset_msg_id_from_packed(
                record.store_host.address, record.store_host.port, item.physical_offset
            )
        except ValueError as error:  # a store host that no offset message ID can carry
            offset_msg_id = None
            problems.append(f"no offset message ID: {error}")
        if args.json:
            row = {
                "physical_offset": item.physical_offset,
                "size": item.size,
                "topic": record.topic,
                "queue_id": record.queue_id,
                "queue_offset": record.queue_offset,
                "tags": record.tags,
                "keys": record.keys,
                "unique_key": record.unique_key,
                "offset_msg_id": offset_msg_id,
                "born_timestamp": record.born_timestamp,
                "store_timestamp": record.store_timestamp,
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
                "problems": problems,
            }
            out.write(json.dumps(row) + "\n")
        else:
            out.write(
                f"{item.physical_offset:>14} {item.size:>7} {record.topic} "
                f"q={record.queue_id} qoff={record.queue_offset} tags={record.tags or '-'} "
                f"keys={','.join(record.keys) or '-'} uniq={record.unique_key or '-'} "
                f"born={iso_ms(record.born_timestamp)} stored={iso_ms(record.store_timestamp)} "
                f"crc={'ok' if item.crc_ok else 'BAD'} state={state.label} "
                f"body={_preview(record.body)!r}"
                + "".join(f" PROBLEM={p!r}" for p in problems)
                + "\n"
            )
        if args.limit is not None and shown >= args.limit:
            break  # stop before reading (and judging) the next record
    summary = reader.summary
    stopped = args.limit is not None and shown >= args.limit
    result = {
        "records": summary.records,
        "bytes": summary.bytes,
        "bad_records": summary.bad_crc,
        "undecodable_records": summary.undecodable,
        "torn_tail": summary.torn_tail,
        "torn_tail_bytes": summary.torn_tail_bytes,
        "damaged": summary.damaged,
        "not_segments": summary.foreign_files,
        "shown": shown,
        "stopped_at_limit": stopped,
    }
    if args.json:
        out.write(json.dumps({"summary": result}) + "\n")
    elif summary.records == 0 and not summary.damaged and not summary.torn_tail:
        out.write(f"-- empty store: no records in {args.dir}\n")
    else:
        plural = "" if summary.records == 1 else "s"
        read = f"{summary.records} record{plural} read" + (
            f" (stopped after --limit {args.limit})" if stopped else ""
        )
        out.write(
            f"-- {read}, {summary.bytes} bytes, {summary.bad_crc} bad records, "
            + (f"{summary.undecodable} not UTF-8, " if summary.undecodable else "")
            + f"torn tail: {summary.torn_tail or 'none'}"
            + "".join(f"\n-- DAMAGED: {d}" for d in summary.damaged)
            + "".join(f"\n-- not a segment: {f}" for f in summary.foreign_files)
            + "\n"
        )
    # A limit stops the walk early, so only what was walked is judged.
    damaged = summary.bad_crc or summary.undecodable or summary.torn_tail or summary.damaged
    return 1 if damaged else 0


def export(args: argparse.Namespace) -> int:
    try:
        from pocketmq.sparkexport.cli import export_main
    except ImportError as error:  # pyspark is an optional extra
        print(f"pocketmq export: {error}", file=sys.stderr)
        return 2
    return export_main(
        args.store_dir,
        args.out,
        args.format,
        args.topic,
        progress=not args.quiet,
        source=args.source,
    )


def report(args: argparse.Namespace) -> int:
    from pocketmq.sparkexport.report import report_main
    from pocketmq.store.durations import DEFAULT_DELAY_LEVELS

    return report_main(
        args.store_dir,
        args.out,
        every=args.every,
        delay_levels=args.delay_levels or DEFAULT_DELAY_LEVELS,
        progress=not args.quiet,
        source=args.source,
    )


def spark_jar(args: argparse.Namespace) -> int:
    """Print the JVM data source's jar path, compiling it first (javac) if it is not built."""
    from pocketmq.sparkexport.jvm import JvmBuildError, build_jar, jar_path

    try:
        if args.force or not jar_path().is_file():
            print("pocketmq spark-jar: compiling the JVM data source with javac", file=sys.stderr)
        print(build_jar(force=args.force))
    except JvmBuildError as error:
        print(f"pocketmq spark-jar: {error}", file=sys.stderr)
        return 2
    return 0
