"""``pocketmq snapshot save|restore|list`` and ``pocketmq replay``: the test toolkit's commands.

Snapshots copy a stopped broker's data folder (``--data``) into a folder of named snapshots
(``--snapshots``, default ``DATA.snapshots`` beside it); replay sends a store's traffic again
to the brokers behind ``--namesrv`` (``pocketmq.testing.replay``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from pathlib import Path

from .errors import UsageError
from .output import iso_ms

__all__ = ["replay", "snapshot_list", "snapshot_restore", "snapshot_save"]


def _folders(args: argparse.Namespace) -> tuple[Path, Path]:
    data = Path(args.data)
    root = Path(args.snapshots) if args.snapshots else data.with_name(data.name + ".snapshots")
    return data, root


def _newest_store_time(data: Path) -> int | None:
    """The newest record's store time: where a manual clock resumes on this folder (the
    broker never starts its manual clock behind what the store holds)."""
    from pocketmq.store.reader import StoreReader

    if not (data / "commitlog").is_dir():
        return None
    newest = None
    for item in StoreReader(data).iter_records():
        stamp = item.record.store_timestamp
        newest = stamp if newest is None else max(newest, stamp)
    return newest


def snapshot_save(args: argparse.Namespace) -> int:
    from pocketmq.testing.snapshots import SnapshotError, save_snapshot

    data, root = _folders(args)
    if not data.is_dir():
        raise UsageError(f"--data {data}: no such folder")
    clock = args.clock_ms if args.clock_ms is not None else _newest_store_time(data)
    try:
        info = save_snapshot(data, root, args.name, clock_ms=clock, replace=args.replace)
    except SnapshotError as error:
        print(f"pocketmq snapshot save: {error}", file=sys.stderr)
        return 1
    print(f"saved snapshot {info.name} ({info.size_bytes} bytes) in {info.path}")
    return 0


def snapshot_restore(args: argparse.Namespace) -> int:
    from pocketmq.testing.snapshots import SnapshotError, restore_snapshot

    data, root = _folders(args)
    try:
        info = restore_snapshot(root, args.name, data)
    except SnapshotError as error:
        print(f"pocketmq snapshot restore: {error}", file=sys.stderr)
        return 1
    print(f"restored snapshot {info.name} into {data}")
    if info.clock_ms is not None:
        print(
            f"its clock: {info.clock_ms} ({iso_ms(info.clock_ms)}); a broker started with "
            "--clock manual on this folder resumes at its newest message's time; `pocketmq "
            f"time set {info.clock_ms}` moves it to the snapshot's time if that is later"
        )
    return 0


def snapshot_list(args: argparse.Namespace) -> int:
    from pocketmq.testing.snapshots import SnapshotError, list_snapshots

    _, root = _folders(args)
    try:
        found = list_snapshots(root)
    except SnapshotError as error:
        print(f"pocketmq snapshot list: {error}", file=sys.stderr)
        return 1
    for info in found:
        row = {
            "name": info.name,
            "saved_at_ms": info.saved_at_ms,
            "clock_ms": info.clock_ms,
            "size_bytes": info.size_bytes,
            "path": str(info.path),
        }
        if args.json:
            print(json.dumps(row))
        else:
            print(
                f"{info.name}  saved {iso_ms(info.saved_at_ms)}  clock "
                f"{iso_ms(info.clock_ms) if info.clock_ms is not None else '-'}  "
                f"{info.size_bytes} bytes"
            )
    if not found and not args.json:
        print(f"-- no snapshots in {root}")
    return 0


def parse_speed(text: str) -> float:
    if text in ("max", "inf"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a speed (10, 0.5 or max)") from None
    if not value > 0 or math.isnan(value):
        raise argparse.ArgumentTypeError(f"{text}: a speed is above 0 (or max)")
    return value


def replay(args: argparse.Namespace) -> int:
    from pocketmq.client.errors import ClientError
    from pocketmq.store.errors import NotAStoreError
    from pocketmq.testing.replay import replay as run_replay

    topics = [t for item in args.topics or [] for t in item.split(",") if t]

    def progress(count: int, record: object) -> None:
        if not args.quiet and count % 1000 == 0:
            print(f"-- {count} messages replayed", file=sys.stderr)

    try:
        report = asyncio.run(
            run_replay(
                args.store,
                namesrv=args.namesrv,
                speed=args.speed,
                topics=topics or None,
                limit=args.limit,
                progress=progress,
                credentials=(args.access_key, args.secret_key)
                if args.access_key and args.secret_key
                else None,
            )
        )
    except (FileNotFoundError, NotADirectoryError, NotAStoreError) as error:
        raise UsageError(f"replay {args.store}: {error}") from None
    except (ClientError, OSError) as error:
        print(f"pocketmq replay: {error}", file=sys.stderr)
        return 1
    print(report.summary())
    return 0
