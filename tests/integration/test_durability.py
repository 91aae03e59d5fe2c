"""kill -9 of a broker under ``--flush sync`` loses no acknowledged message.

For each seed a pipelined producer sends to a real broker process while a timer, at a random
moment the seed picks, SIGKILLs it; the broker is restarted on the same data and every
message acknowledged so far (in all rounds) must be readable. A failure names its SEED.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode, encode_frame
from pocketmq.broker.protocol.headers import SendMessageRequestHeaderV2
from pocketmq.broker.protocol.message_codec import decode_messages
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient

# Each round is a kill and a restart (~1.5 s); more with POCKETMQ_DURABILITY_ROUNDS=N. The
# in-process crash tests of tests/sim cut the store at many more points.
SEEDS = range(int(os.environ.get("POCKETMQ_DURABILITY_ROUNDS", "12")))
TOPIC = "Durable"
QUEUES = 4


def send_until_killed(broker: Process, rng: random.Random, seed: int) -> list[bytes]:
    """Pipelined sends until the broker dies; returns the bodies it acknowledged."""
    client = RawClient(broker.address, timeout_s=5.0)
    acked: list[bytes] = []
    bodies: dict[int, bytes] = {}
    killer = threading.Timer(rng.uniform(0.05, 0.6), broker.kill)
    killer.start()
    sent = 0
    try:
        while sent < 200_000:
            burst = rng.randint(1, 64)
            frames = []
            for _ in range(burst):
                sent += 1
                body = f"seed{seed}-{sent}".encode()
                header = SendMessageRequestHeaderV2(
                    producer_group="durable",
                    topic=TOPIC,
                    default_topic="TBW102",
                    default_topic_queue_nums=QUEUES,
                    queue_id=sent % QUEUES,
                    sys_flag=0,
                    born_timestamp=int(time.time() * 1000),
                    flag=0,
                    properties=f"UNIQ_KEY\x01{seed:04d}{sent:028d}\x02WAIT\x01true\x02",
                )
                frames.append(
                    encode_frame(
                        RemotingCommand(
                            code=RequestCode.SEND_MESSAGE_V2,
                            opaque=sent,
                            ext_fields=header.to_ext_fields(),
                            body=body,
                        )
                    )
                )
                bodies[sent] = body
            client.send_bytes(b"".join(frames))
            for opaque in range(sent - burst + 1, sent + 1):
                response = client.read_response(opaque)
                if response.code == ResponseCode.SUCCESS:
                    acked.append(bodies[opaque])
    except (ConnectionError, OSError):
        pass  # the broker died: what was acknowledged before is what counts
    finally:
        killer.join()
        client.close()
    return acked


def stored_bodies(broker: Process) -> set[bytes]:
    found: set[bytes] = set()
    with RawClient(broker.address) as client:
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                response = client.pull(TOPIC, queue_id, offset, max_count=64)
                if response.code != ResponseCode.SUCCESS:
                    break
                found.update(m.body for m in decode_messages(response.body))
                offset = int(response.ext_fields["nextBeginOffset"])
    return found


def test_kill_9_under_sync_flush_loses_no_acknowledged_message(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        cluster.start_namesrv()
        broker = cluster.start_broker("broker-a", flush="sync")
        acknowledged: list[bytes] = []
        for seed in SEEDS:
            rng = random.Random(seed)
            acked = send_until_killed(broker, rng, seed)
            assert not broker.running, f"SEED={seed}: the broker was not killed"
            acknowledged.extend(acked)
            broker.start()
            recoveries = [
                line for line in broker.log_tail(400).splitlines() if ": recovery " in line
            ]
            assert "abnormal" in recoveries[-1], f"SEED={seed}: recovery did not notice the crash"
            missing = set(acknowledged) - stored_bodies(broker)
            assert not missing, (
                f"SEED={seed}: {len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
            )
        assert len(acknowledged) > 100  # the rounds really sent something


def test_a_record_damaged_after_a_clean_stop_is_quarantined_and_the_rest_served(
    tmp_path: Path,
) -> None:
    """One flipped byte in the body of a cleanly stopped broker's store: the restart reports it
    at WARNING and never serves it; every other message is still consumed."""
    with Cluster(tmp_path) as cluster:
        cluster.start_namesrv()
        broker = cluster.start_broker("broker-a")
        with RawClient(broker.address) as client:
            offsets = []
            for i in range(50):
                response = client.send_message(TOPIC, f"body-{i:03d}".encode(), queue_id=0)
                assert response.code == ResponseCode.SUCCESS
                offsets.append(int(response.ext_fields["msgId"][-16:], 16))
        broker.stop()  # clean: the next start is a normal recovery
        segment = Path(str(broker.extra["data"])) / "commitlog" / f"{0:020d}"
        with open(segment, "r+b") as handle:
            record = handle.read()[offsets[20] : offsets[21]]
            handle.seek(offsets[20] + record.index(b"body-020"))
            handle.write(b"B")
        broker.start()
        recovery = [line for line in broker.log_tail(400).splitlines() if ": recovery " in line][-1]
        assert " WARNING " in recovery and "recovery normal" in recovery
        assert f"DAMAGED commitlog/{0:020d} [{offsets[20]}, {offsets[21]})" in recovery
        served = sorted(stored_bodies(broker))
        assert served == sorted(f"body-{i:03d}".encode() for i in range(50) if i != 20)
