"""Resident memory of an idle ``pocketmq standalone``, where it goes, and what each part costs.

    python bench/idle_rss.py [--runs 3] [--settle 3] [--json]

Starts the installed ``pocketmq`` console script (the one beside this interpreter) as
``pocketmq standalone --data <temp folder> --port P --namesrv-port N --grpc-port G
--http-port H`` (the README's command, on free ports and a fresh store: both fronts on), then
the same once both fronts have been used (one ``GET /health``, one HTTP/2 connection to the gRPC
port answered by grpc: the fronts load at their first connection), the same on a store that
holds 5,000 messages of 1 KB (written and closed before, as a restart finds it), then with
``--no-http``, ``--no-grpc`` and both off; waits for its ``ready`` line plus ``--settle`` seconds, reads
``VmRSS`` and ``RssAnon`` from ``/proc/<pid>/status`` and the mappings from
``/proc/<pid>/smaps``, stops it with SIGTERM. The ceiling, measured the same way in the same
run: this interpreter having imported ``uvloop`` and ``msgspec`` (what any pocketmq process
imports) and running an idle uvloop loop. Each variant ``--runs`` times, alternating; medians.

Then the breakdown: the resident set of each process by kind of mapping (the malloc heap, the
other anonymous mappings, which are mostly Python's object arenas, thread stacks, the grpc
library, the interpreter, other extension modules, system libraries, the store's files), and
the cost of each group of modules imported in a fresh interpreter after the ceiling's two.
Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

POCKETMQ = Path(sys.executable).parent / "pocketmq"

CEILING = (
    "import asyncio, signal, uvloop, msgspec\n"
    "async def main():\n"
    "    stop = asyncio.Event()\n"
    "    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)\n"
    "    print('ready', flush=True)\n"
    "    await stop.wait()\n"
    "uvloop.run(main())\n"
)

# variant -> the options after the README command's data folder and ports
VARIANTS = {
    "grpc+http": ["--grpc-port", "{grpc}", "--http-port", "{http}"],
    "grpc+http used": ["--grpc-port", "{grpc}", "--http-port", "{http}"],
    "grpc+http restarted": ["--grpc-port", "{grpc}", "--http-port", "{http}"],
    "grpc": ["--grpc-port", "{grpc}", "--no-http"],
    "http": ["--no-grpc", "--http-port", "{http}"],
    "neither": ["--no-grpc", "--no-http"],
}
LABELS = {
    "grpc+http": "pocketmq standalone",
    "grpc+http used": "  ... after one HTTP and one gRPC connection",
    "grpc+http restarted": "  ... on a store of 5,000 x 1 KB messages",
    "grpc": "pocketmq standalone --no-http",
    "http": "pocketmq standalone --no-grpc",
    "neither": "  ... --no-grpc --no-http",
    "ceiling": "ceiling: python + uvloop + msgspec",
}
BREAKDOWN_OF = ("grpc+http", "grpc+http used", "grpc+http restarted", "neither", "ceiling")
RESTART_MESSAGES = 5_000  # of 1,000 bytes, in one topic's 4 queues

# The HTTP/2 client preface and an empty SETTINGS frame: grpc answers with its own SETTINGS.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
STACK_KIB = 8192  # glibc's default thread stack (ulimit -s): an anonymous mapping of this size

# Groups of modules, each imported after the ones above it (and after uvloop and msgspec).
IMPORT_GROUPS = {
    "broker, name server, store, CLI": ["pocketmq.cli", "pocketmq.broker.serve"],
    "HTTP front (aiohttp, routes, prometheus_client)": ["pocketmq.broker.http.server"],
    "gRPC front (grpcio, protobuf stubs, service)": ["pocketmq.broker.grpc.server"],
}
IMPORT_PROBE = """
import importlib, json, sys
def rss():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return [int(fields[name].split()[0]) for name in ("VmRSS", "RssAnon")]
import uvloop, msgspec
rows = [["ceiling", *rss(), len(sys.modules)]]
for name, modules in json.loads(sys.argv[1]).items():
    for module in modules:
        importlib.import_module(module)
    rows.append([name, *rss(), len(sys.modules)])
print(json.dumps(rows))
"""


@dataclass(frozen=True, slots=True)
class Sample:
    """One idle process: KiB resident (all, anonymous), threads, KiB per kind of mapping."""

    rss: int
    anon: int
    threads: int
    kinds: dict[str, int]


@dataclass(frozen=True, slots=True)
class Summary:
    """A variant's runs: VmRSS of each (KiB) and the medians."""

    runs_kib: list[int]
    median_mib: float
    anon_median_mib: float
    threads: float
    kinds_median_kib: dict[str, float]

    @classmethod
    def of(cls, samples: list[Sample]) -> Summary:
        kinds = sorted({kind for sample in samples for kind in sample.kinds})
        return cls(
            runs_kib=[sample.rss for sample in samples],
            median_mib=round(statistics.median(s.rss for s in samples) / 1024, 1),
            anon_median_mib=round(statistics.median(s.anon for s in samples) / 1024, 1),
            threads=statistics.median(s.threads for s in samples),
            kinds_median_kib={
                kind: statistics.median(s.kinds.get(kind, 0) for s in samples) for kind in kinds
            },
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def kind_of(name: str, size_kib: int, data: str) -> str:
    """The breakdown's row of one mapping (``name``: its path, or ``[heap]`` and the like)."""
    if not name or name.startswith("["):
        if name == "[heap]":
            return "malloc heap (brk)"
        if name == "[stack]" or size_kib == STACK_KIB:
            return "thread stacks"
        return "other anonymous (Python arenas, large allocations)"
    if name.startswith(data):
        return "store files (mapped)"
    if "/grpc/" in name:
        return "grpc library (cygrpc)"
    if "libpython" in name:
        return "interpreter (libpython)"
    if ".so" in name and ("site-packages" in name or "lib-dynload" in name):
        return "other extension modules"
    if name.startswith(("/usr/lib", "/lib")):
        return "system libraries (libc, OpenSSL, ...)"
    return "other files"


def breakdown(pid: int, data: str) -> dict[str, int]:
    """Resident KiB per kind of mapping, from ``/proc/<pid>/smaps``."""
    kinds: dict[str, int] = {}
    name, size = "", 0
    head = re.compile(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$")
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        match = head.match(line)
        if match:
            name = match[1]
        elif line.startswith("Size:"):
            size = int(line.split()[1])
        elif line.startswith("Rss:"):
            kind = kind_of(name, size, data)
            kinds[kind] = kinds.get(kind, 0) + int(line.split()[1])
    return kinds


def use_fronts(grpc_port: int, http_port: int) -> None:
    """One request to each front, so that both load; returns once grpc answered."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health", timeout=30) as answer:
        answer.read()
    with socket.create_connection(("127.0.0.1", grpc_port), timeout=30) as sock:
        sock.sendall(HTTP2_PREFACE)
        if not sock.recv(9):
            raise RuntimeError("the gRPC port closed without answering")


def fill_store(data: str) -> None:
    """A store as a broker leaves it: messages written, closed cleanly (then reopened by the
    broker, which recovers it and maps its newest segment and its queues)."""
    from pocketmq.store.message_store import MessageStore, PutMessage

    with MessageStore.open(data) as store:
        for number in range(RESTART_MESSAGES):
            store.put(PutMessage(topic="Orders", body=b"x" * 1000, queue_id=number % 4))


def measure(variant: str, settle_s: float) -> Sample:
    """VmRSS, RssAnon (KiB), threads and the breakdown of one idle process."""
    with tempfile.TemporaryDirectory(prefix="pocketmq-rss-") as data:
        ports = {"grpc": free_port(), "http": free_port()}
        if variant.endswith("restarted"):
            fill_store(data)
        if variant == "ceiling":
            command = [sys.executable, "-c", CEILING]
        else:
            command = [
                str(POCKETMQ),
                "standalone",
                "--data",
                data,
                "--port",
                str(free_port()),
                "--namesrv-port",
                str(free_port()),
            ]
            command += [option.format(**ports) for option in VARIANTS[variant]]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if "ready" not in line:
                raise RuntimeError(f"{' '.join(command)} did not start: {line!r}")
            if variant.endswith("used"):
                use_fronts(ports["grpc"], ports["http"])
            time.sleep(settle_s)
            return Sample(
                rss=status_kib(process.pid, "VmRSS"),
                anon=status_kib(process.pid, "RssAnon"),
                threads=status_kib(process.pid, "Threads"),
                kinds=breakdown(process.pid, str(Path(data).resolve())),
            )
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def import_costs() -> list[tuple[str, int, int, int]]:
    """(group, VmRSS KiB, RssAnon KiB, modules loaded) after each group, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, json.dumps(IMPORT_GROUPS)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [(str(g), int(rss), int(anon), int(n)) for g, rss, anon, n in json.loads(out)]


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after ready")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    samples: dict[str, list[Sample]] = {name: [] for name in LABELS}
    for _ in range(args.runs):
        for variant, values in samples.items():
            values.append(measure(variant, args.settle))
    result = {name: Summary.of(values) for name, values in samples.items()}
    imports = import_costs()
    if args.json:
        print(
            json.dumps({"variants": {n: asdict(v) for n, v in result.items()}, "imports": imports})
        )
        return
    ceiling = result["ceiling"].median_mib
    print(f"Idle resident memory (VmRSS), MiB, median of {args.runs} runs:")
    for name, summary in result.items():
        runs = ", ".join(mib(kib) for kib in summary.runs_kib)
        print(
            f"  {LABELS[name]:46} {summary.median_mib:5.1f} (ceiling +"
            f"{summary.median_mib - ceiling:4.1f}), anonymous {summary.anon_median_mib:5.1f}, "
            f"threads {summary.threads:g} (runs: {runs})"
        )
    print("\nBreakdown by mapping (Rss in /proc/<pid>/smaps), MiB, medians:")
    shown = [result[name].kinds_median_kib for name in BREAKDOWN_OF]
    kinds = sorted(
        {k for kinds in shown for k in kinds}, key=lambda k: -max(c.get(k, 0) for c in shown)
    )
    heads = ["README command", "after use", "restarted", "no fronts", "ceiling"]
    print(f"  {'':52}" + "".join(f"{head:>15}" for head in heads))
    for kind in kinds:
        print(f"  {kind:52}" + "".join(f"{mib(column.get(kind, 0)):>15}" for column in shown))
    print("\nImports in a fresh interpreter (VmRSS after each group, each after those above):")
    (_, rss0, anon0, modules0), *groups = imports
    print(f"  {'uvloop + msgspec (the ceiling imports)':52} {mib(rss0)} MiB, {modules0} modules")
    for group, rss, anon, modules in groups:
        print(
            f"  + {group:50} +{mib(rss - rss0)} MiB (anonymous +{mib(anon - anon0)}), "
            f"+{modules - modules0} modules"
        )
        rss0, anon0, modules0 = rss, anon, modules


if __name__ == "__main__":
    main()
