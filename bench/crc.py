"""CRC-32 over record-sized buffers: the store's choice (store/crc.py) beside zlib and crcmod.

    python bench/crc.py [--sizes 64 1024 1220 65536] [--rounds 5]

Rows, per buffer size, each the median of the rounds (ns per call and GB/s):
  ceiling           bytearray(buffer): one copy of the same bytes, a pass any check must make
  store.crc.crc32   what every append, recovery scan and pulled-record check calls
  zlib.crc32        the standard library's (zlib 1.2 here: a table loop)
  crcmod crc-32     the reference the property tests compare against
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import zlib
from collections.abc import Callable

import crcmod.predefined

from pocketmq.store.crc import crc32


def per_call_ns(function: Callable[[bytes], object], data: bytes, calls: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(calls):
        function(data)
    return (time.perf_counter_ns() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1024, 1220, 65536])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows: list[tuple[str, Callable[[bytes], object]]] = [
        ("ceiling: bytearray copy", bytearray),
        (f"store.crc.crc32 ({crc32.__module__})", crc32),
        ("zlib.crc32", zlib.crc32),
        ("crcmod crc-32", crcmod.predefined.mkCrcFun("crc-32")),
    ]
    print(f"{'size':>6}  {'function':<34}{'ns/call':>10}{'GB/s':>8}{'vs zlib':>9}")
    for size in args.sizes:
        data = os.urandom(size)
        calls = max(200, 20_000_000 // size)
        medians = {}
        for name, function in rows:
            assert name.startswith("ceiling") or function(data) == zlib.crc32(data), name
            samples = [per_call_ns(function, data, calls) for _ in range(args.rounds)]
            medians[name] = statistics.median(samples)
        zlib_ns = medians["zlib.crc32"]
        for name, _ in rows:
            ns = medians[name]
            print(f"{size:>6}  {name:<34}{ns:>10,.0f}{size / ns:>8.2f}{zlib_ns / ns:>8.1f}x")


if __name__ == "__main__":
    main()
