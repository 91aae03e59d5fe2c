"""Consumer-group creation cost as the subscription group table grows.

    python bench/group_create.py [--groups 10000] [--admin-groups 10000] [--dir /tmp]

The groups' twin of ``bench/topic_create.py``, with the same two kinds of row:
  table create   ``GroupManager.put`` alone (the broker's table and its files, no network)
  admin create   UPDATE_AND_CREATE_SUBSCRIPTIONGROUP one group at a time, each awaited
                 (``Admin.create_group``), against an embedded broker with its store on disk

Each row prints the seconds taken by the first and the last thousand (or tenth) of the run and
their ratio: a flat per-group cost gives a ratio near 1, a cost that grows with the table a
ratio that grows with the run. The size of ``subscriptionGroup.json`` and of its journal after
the run are printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from pocketmq.broker.app import Broker
from pocketmq.broker.services.groups import GroupConfig, GroupManager
from pocketmq.client import Admin


def _row(name: str, durations: list[float]) -> None:
    chunk = min(1000, max(1, len(durations) // 10))
    first, last = sum(durations[:chunk]), sum(durations[-chunk:])
    print(
        f"{name:<14} {len(durations):>6} groups  first {chunk}: {first:6.2f} s  "
        f"last {chunk}: {last:6.2f} s  ratio {last / first:5.2f}  total {sum(durations):6.2f} s"
    )


def _sizes(config_dir: Path) -> str:
    table = config_dir / "subscriptionGroup.json"
    journal = config_dir / "subscriptionGroup.json.journal"
    sizes = [f"{p.name} {p.stat().st_size / 1024:,.0f} KiB" for p in (table, journal) if p.exists()]
    return ", ".join(sizes) or "no files"


def run_table(groups: int, root: Path) -> None:
    config_dir = root / "table" / "config"
    manager = GroupManager(config_dir / "subscriptionGroup.json", auto_create=True)
    durations = []
    for i in range(groups):
        started = time.perf_counter()
        manager.put(GroupConfig(group_name=f"BenchGroup{i}", retry_max_times=3))
        durations.append(time.perf_counter() - started)
    _row("table create", durations)
    print(f"{'':<14} after the run: {_sizes(config_dir)}")


async def run_admin(groups: int, root: Path) -> None:
    async with Broker(port=0, store=root / "store") as broker:
        async with Admin(broker.namesrv_address) as admin:
            durations = []
            for i in range(groups):
                started = time.perf_counter()
                await admin.create_group(f"BenchGroup{i}", retry_max_times=3)
                durations.append(time.perf_counter() - started)
        _row("admin create", durations)
        print(f"{'':<14} after the run: {_sizes(root / 'store' / 'config')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--admin-groups", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pocketmq-groups-", dir=args.dir))
    try:
        run_table(args.groups, root)
        if args.admin_groups:
            asyncio.run(run_admin(args.admin_groups, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
