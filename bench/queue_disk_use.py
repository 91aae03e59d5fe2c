"""Disk taken by consume queues: N topics x 1 queue x 1 message (issue 15).

Consume-queue files keep their full size (600,000 bytes by default, what RocketMQ's tools
expect) but are sparse: blocks are allocated a page at first, then doubling. Before, every file
was preallocated whole with posix_fallocate. Prints both, measured as `du` does (allocated
blocks). The "preallocated" figure is measured on a sample of files and scaled, so that the
benchmark does not need gigabytes of free disk.

    .venv/bin/python bench/queue_disk_use.py [--topics 10000] [--sample 100] [--per-store 4000]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path, PurePosixPath

from pocketmq.store import paths
from pocketmq.store.config import StoreConfig
from pocketmq.store.files import DiskBackend
from pocketmq.store.message_store import MessageStore, PutMessage


def used(folder: Path) -> tuple[int, int, int]:
    """(files, apparent bytes, allocated bytes) under ``folder``."""
    files = apparent = allocated = 0
    for directory, _, names in os.walk(folder):
        for name in names:
            status = os.stat(Path(directory) / name)
            files += 1
            apparent += status.st_size
            allocated += status.st_blocks * 512
    return files, apparent, allocated


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--sample", type=int, default=100)
    parser.add_argument("--per-store", type=int, default=4000)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * args.per_store + 1024
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, wanted)), hard))
    config = StoreConfig(index_slot_count=1009, index_entry_count=4 * args.topics)
    file_size = config.consume_queue_entries_per_file * 20
    with tempfile.TemporaryDirectory(prefix="pocketmq-cq-") as root:
        # Before: each queue's first file preallocated whole.
        old = Path(root) / "preallocated"
        backend = DiskBackend(old)
        for i in range(args.sample):
            backend.create_segment(
                PurePosixPath(paths.consume_queue_segment(f"T{i}", 0, 0)), file_size
            ).close()
        _, _, sample_allocated = used(old)
        before = sample_allocated / args.sample * args.topics
        # Now: real stores, one message per topic. Each open queue file holds two descriptors
        # (the file and mmap's duplicate), so the topics are spread over a few stores.
        started = time.perf_counter()
        files = apparent = allocated = 0
        for first in range(0, args.topics, args.per_store):
            folder = Path(root) / f"store{first}"
            with MessageStore.open(folder, config=config) as store:
                for i in range(first, min(args.topics, first + args.per_store)):
                    store.put(PutMessage(topic=f"T{i}", body=b"x" * 100))
            counted = used(folder / paths.CONSUME_QUEUE)
            files, apparent, allocated = (
                a + b for a, b in zip((files, apparent, allocated), counted, strict=True)
            )
        seconds = time.perf_counter() - started
    print(f"{args.topics:,} topics x 1 queue x 1 message, {file_size:,}-byte queue files")
    print(
        f"  preallocated (before): {mib(before)} on disk "
        f"(measured on {args.sample} files, {mib(sample_allocated / args.sample)} each)"
    )
    print(
        f"  sparse (now):          {mib(allocated)} on disk for {files:,} files "
        f"({allocated / max(files, 1):,.0f} bytes each; apparent size {mib(apparent)})"
    )
    print(f"  ratio: {before / max(allocated, 1):,.0f}x less disk; {seconds:.1f} s to write")


if __name__ == "__main__":
    main()
