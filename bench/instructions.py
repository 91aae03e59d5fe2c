"""Instructions per message on the hot paths, counted by callgrind: a figure that, unlike a rate,
does not move with the load on this noisy machine. Needs valgrind (not installed by the README's
set-up: `apt-get install valgrind`).

    python bench/instructions.py [--messages 10240] [--only store broker client]

Rows (1 KiB bodies), each the difference between two runs of the same program, with N and with
a small warm-up count of messages, divided by N, so start-up, imports and one-time work cancel:
  store.put           MessageStore.put on disk, the messages of bench/store_append.py (consume
                      queue, index of two keys, both CRCs)
  broker per send     `pocketmq standalone` answering SEND_MESSAGE_V2, 256 in flight
  broker per message of a batch
                      the same, answering SEND_BATCH_MESSAGE of 32 messages, 16 in flight
  broker per send, auto-batch
                      256 sends in flight from Producer(auto_batch=True): SEND_BATCH_MESSAGE
                      of ~33 messages (32 KiB of bodies)
  client per send     Producer.send, 256 in flight, against a broker outside valgrind (and
                      with auto_batch=True)
  client per consume  a PushConsumer reading (each body) and acking, against a broker outside
                      valgrind
  stages (--only stages, not by default)
                      each stage of one send alone, in one process: the broker's request
                      frame decode, its send handler (store.put included) and store.put alone,
                      the answer frame; the SDK's request (properties, header, frame), its
                      answer decode and SendResult

Ceiling, counted the same way: one buffered `write` of the same record in Python. Callgrind
counts user-space instructions only: the kernel's share (the copy into the page cache, page
faults, socket calls) is in no row, so compare these figures with each other and over time, not
with the wall-clock ratios of the other benchmarks.
Takes a few minutes: everything runs about 50 times slower under callgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from produce_consume import free_port, standalone_command, start  # noqa: E402

WARM_UP = 512
BODY = 1024

STORE_PROGRAM = textwrap.dedent(
    """
    import os, sys, tempfile
    sys.path.insert(0, os.path.join(os.environ["POCKETMQ_BENCH"]))
    from store_append import make_messages  # the messages of bench/store_append.py
    from pocketmq.store.config import StoreConfig
    from pocketmq.store.message_store import MessageStore
    n, made = int(sys.argv[1]), int(sys.argv[2])
    messages = make_messages(made)  # as many in both runs: not part of the difference
    with MessageStore.open(tempfile.mkdtemp(), config=StoreConfig(index_entry_count=4 * made)) as store:
        for message in messages[:n]:
            store.put(message)
        store.index.drain()
    """
)

CEILING_PROGRAM = textwrap.dedent(
    """
    import os, sys, tempfile
    n = int(sys.argv[1])
    record = os.urandom(1220)
    with open(os.path.join(tempfile.mkdtemp(), "ceiling"), "wb") as handle:
        for _ in range(n):
            handle.write(record)
    """
)

PRODUCER_PROGRAM = textwrap.dedent(
    """
    import asyncio, sys, uvloop
    from pocketmq.client import Message, Producer
    n, namesrv, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
    batch = mode == "batch"
    async def main():
        body = b"x" * 1024
        # callgrind slows the client 50x: many sends in flight need more than the 3 s default
        async with Producer("instructions", namesrv=namesrv, send_timeout_ms=600_000,
                            auto_batch=mode == "auto") as producer:
            await producer.send(Message(topic="Instructions", body=body))  # route, connection
            async def worker(count):
                for _ in range(count):
                    if batch:
                        await producer.send_batch([Message(topic="Instructions", body=body)] * 32)
                    else:
                        await producer.send(Message(topic="Instructions", body=body))
            # as bench/produce_consume.py: 256 sends in flight, or batches of 32, 16 in flight
            workers = 16 if batch else 256
            per_worker = n // 32 // 16 if batch else n // 256
            await asyncio.gather(*(worker(per_worker) for _ in range(workers)))
    uvloop.run(main())
    """
)

CONSUMER_PROGRAM = textwrap.dedent(
    """
    import asyncio, sys, uvloop
    from pocketmq.client import PushConsumer
    n, namesrv, group = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    async def main():
        consumer = PushConsumer(group, namesrv=namesrv, consume_from="first")
        consumer.subscribe("Instructions", "*")
        received = size = 0
        async with consumer:
            async for message in consumer:
                size += len(message.body)  # as bench/produce_consume.py: the body is read
                await consumer.ack(message)
                received += 1
                if received >= n:
                    break
    uvloop.run(main())
    """
)


# The stages of one send, each alone in one process (no sockets, the loop not running): an
# embedded broker on a store in a temp folder, the SDK's codec on a producer that is not started.
STAGES_PROGRAM = textwrap.dedent(
    """
    import asyncio, os, struct, sys, tempfile, uvloop
    from pocketmq.broker.app import Broker
    from pocketmq.broker.protocol.session import RemotingSession
    from pocketmq.client import Message, MessageQueue, Producer
    from pocketmq.client.producer import SendStatus
    from pocketmq.store.message_store import PutMessage
    n, stage = int(sys.argv[1]), sys.argv[2]
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    broker = Broker(port=0, store=tempfile.mkdtemp())
    loop.run_until_complete(broker.__aenter__())
    async def make_producer():
        return Producer("instructions", namesrv="127.0.0.1:1")
    producer = loop.run_until_complete(make_producer())
    mq = MessageQueue("Instructions", "broker-a", 3)
    body = os.urandom(1024)
    message = Message(topic="Instructions", body=body)
    def request_frame():
        properties, _ = producer._wire_properties(message)
        command = producer._send_request(mq, properties, body, 0)
        client = RemotingSession()
        return b"".join(client.send_request(command, None, 0.0, 3000.0)), client
    frame, _ = request_frame()
    server = RemotingSession()
    request = server.receive_data(frame)[0][0]
    fields = dict(request.ext_fields)
    handler = broker.server.handlers[request.code]
    class Peer:  # what the send handler reads of its connection
        remote_address = "127.0.0.1:40000"
        attributes = {}
    peer = Peer()
    def handle():
        request.ext_fields = dict(fields)  # the handler may add to the properties
        return handler(request, peer)
    answer = handle()
    assert type(answer) is bytes, type(answer)
    text = fields["i"] + "CLUSTER\x01" + broker.config.cluster_name + "\x02"
    def put():
        properties = {"WAIT": "true", "UNIQ_KEY": "0" * 32, "CLUSTER": broker.config.cluster_name}
        broker.store.put(PutMessage(topic="Instructions", body=body, queue_id=3,
                                    properties=properties, properties_text=text))
    def sdk_request():
        properties, _ = producer._wire_properties(message)
        command = producer._send_request(mq, properties, body, 0)
        session.send_request(command, None, 0.0, 3000.0)
        session.forget(command.opaque, None)
    session = RemotingSession()
    stray = RemotingSession()  # answers to no request of its own: decoded, then dropped
    _, client = request_frame()
    response = client.receive_data(answer)[1][0][1]
    run = {
        "decode": lambda: server.receive_data(frame),
        "handle": handle,
        "put": put,
        "respond": lambda: server.respond(request, answer),
        "sdk_request": sdk_request,
        "sdk_decode": lambda: stray.receive_data(answer),
        "sdk_result": lambda: producer._result(response, SendStatus.SEND_OK, mq, "key"),
    }[stage]
    for _ in range(n):
        run()
    """
)
STAGES = {
    "decode": "broker: request frame decode",
    "handle": "broker: send handler (store.put included)",
    "put": "  of which store.put (a PutMessage each)",
    "respond": "broker: answer frame (session.respond)",
    "sdk_request": "SDK: properties, header, request frame",
    "sdk_decode": "SDK: answer frame decode",
    "sdk_result": "SDK: SendResult from the answer",
}

_ENV = {**os.environ, "POCKETMQ_BENCH": str(Path(__file__).parent)}


def callgrind_command(work: Path, name: str) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work / name}.callgrind"]


def callgrind(args: list[str], work: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*callgrind_command(work, name), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_ENV,
    )


def total(work: Path, name: str) -> int:
    text = (work / f"{name}.callgrind").read_text()
    found = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
    assert found, f"no totals in {name}.callgrind"
    return int(found.group(1))


def program(work: Path, name: str, source: str) -> str:
    path = work / f"{name}.py"
    path.write_text(source)
    return str(path)


def per_message(work: Path, name: str, run: Callable[[str, int], None], n: int) -> float:
    run(f"{name}-small", WARM_UP)
    run(f"{name}-large", WARM_UP + n)
    return (total(work, f"{name}-large") - total(work, f"{name}-small")) / n


def run_program(work: Path, source_path: str, *argv: str) -> Callable[[str, int], None]:
    """Runs the program under callgrind as ``program COUNT *argv``."""

    def run(name: str, count: int) -> None:
        process = callgrind([sys.executable, source_path, str(count), *argv], work, name)
        process.wait()
        assert process.returncode == 0, f"{name} failed"

    return run


async def fill(namesrv: str, count: int) -> None:
    from pocketmq.client import Message, Producer

    body = os.urandom(BODY)
    async with Producer("instructions-fill", namesrv=namesrv) as producer:
        for _ in range(count // 32 + 1):
            await producer.send_batch([Message(topic="Instructions", body=body)] * 32)


def broker_per_send(work: Path, n: int, *, batch: bool = False, auto: bool = False) -> float:
    """The broker's instructions per message sent one by one, in batches of 32, or one by one
    through auto-batching."""
    sender = program(work, "producer", PRODUCER_PROGRAM)
    mode = ["batch"] if batch else ["auto"] if auto else []

    def run(name: str, count: int) -> None:
        namesrv_port = free_port()
        # ``python -m pocketmq.cli`` rather than the ``pocketmq`` script: valgrind follows the
        # interpreter, not a launcher
        command = standalone_command(namesrv_port, str(work / f"{name}-data"), "--no-grpc")
        process, ready = start(
            [*callgrind_command(work, name), sys.executable, "-m", "pocketmq.cli", *command[1:]],
            ready_within_s=600,
            env=_ENV,
        )
        try:
            assert ready, "the broker exited before it was ready"
            subprocess.run(
                [sys.executable, sender, str(count), f"127.0.0.1:{namesrv_port}", *mode],
                check=True,
                timeout=1800,
            )
        finally:
            process.send_signal(signal.SIGINT)
            process.wait()

    return per_message(
        work, "broker-batch" if batch else "broker-auto" if auto else "broker", run, n
    )


def client_per_message(work: Path, n: int) -> tuple[float, float, float]:
    namesrv_port = free_port()
    broker, _ = start(standalone_command(namesrv_port, str(work / "client-data"), "--no-grpc"))
    namesrv = f"127.0.0.1:{namesrv_port}"
    try:
        sender = program(work, "producer", PRODUCER_PROGRAM)
        send = per_message(work, "client-send", run_program(work, sender, namesrv), n)
        auto = per_message(work, "client-auto", run_program(work, sender, namesrv, "auto"), n)
        asyncio.run(fill(namesrv, 2 * (WARM_UP + n)))  # both runs read from the first offset
        consumer = program(work, "consumer", CONSUMER_PROGRAM)

        def consume(name: str, count: int) -> None:
            run_program(work, consumer, namesrv, f"instructions-{name}")(name, count)

        receive = per_message(work, "client-consume", consume, n)
    finally:
        broker.terminate()
        broker.wait()
    return send, auto, receive


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10240)
    parser.add_argument(
        "--only",
        nargs="+",
        default=["store", "broker", "client"],
        choices=("store", "broker", "client", "stages"),
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench/instructions.py needs valgrind (apt-get install valgrind)")
    n = args.messages
    work = Path(tempfile.mkdtemp(prefix="pocketmq-instructions-"))
    rows: list[tuple[str, float]] = []
    try:
        if "store" in args.only:
            ceiling = per_message(
                work, "ceiling", run_program(work, program(work, "c", CEILING_PROGRAM)), n
            )
            rows.append(("ceiling: buffered write (user space only)", ceiling))
            store_program = program(work, "s", STORE_PROGRAM)
            store = per_message(
                work, "store", run_program(work, store_program, str(WARM_UP + n)), n
            )
            rows.append(("store.put", store))
        if "broker" in args.only:
            rows.append(("broker per send (SEND_MESSAGE_V2)", broker_per_send(work, n)))
            # whole rounds of 16 batches of 32 (WARM_UP is one round)
            rounds = max(512, n // 512 * 512)
            batched = broker_per_send(work, rounds, batch=True)
            rows.append(("broker per message of a batch of 32", batched))
            auto = broker_per_send(work, n, auto=True)
            rows.append(("broker per send, auto-batch (256 in flight)", auto))
        if "stages" in args.only:
            stages = program(work, "stages", STAGES_PROGRAM)
            for stage, label in STAGES.items():
                count = per_message(work, f"stage-{stage}", run_program(work, stages, stage), n)
                rows.append((label, count))
        if "client" in args.only:
            send, auto_send, receive = client_per_message(work, n)
            rows.append(("client per send (Producer.send)", send))
            rows.append(("client per send, auto-batch", auto_send))
            rows.append(("client per consume (PushConsumer + ack)", receive))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{n:,} messages of {BODY} B, callgrind instructions per message")
    for name, value in rows:
        print(f"  {name:<44}{value:>12,.0f}")


if __name__ == "__main__":
    main()
