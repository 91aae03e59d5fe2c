"""POP consumption on a real broker process with a manual clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pocketmq.broker.protocol import ResponseCode
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient

GROUP = "pop-group"


@pytest.fixture
def broker(tmp_path) -> Iterator[Process]:  # noqa: ANN001
    with Cluster(tmp_path) as cluster:
        yield cluster.start_standalone(extra_args=["--clock", "manual"])


def send(client: RawClient, topic: str, body: bytes, *, queue_id: int = 0) -> None:
    assert (
        client.send_message(
            topic, body, queue_id=queue_id, properties=f"UNIQ_KEY\x01{body.decode()}\x02"
        ).code
        == 0
    )


def test_pop_ack_and_stale_handles(broker: Process) -> None:
    with RawClient(broker.address) as client:
        for i in range(3):
            send(client, "Jobs", f"job-{i}".encode())
        response, popped = client.pop("Jobs", GROUP, invisible_ms=30_000)
        assert response.code == ResponseCode.SUCCESS and [m.body for m, _ in popped] == [
            b"job-0",
            b"job-1",
            b"job-2",
        ]
        again, nothing = client.pop("Jobs", GROUP)
        assert nothing == [] and again.code == ResponseCode.PULL_NOT_FOUND  # all in flight
        message, handle = popped[0]
        assert client.ack("Jobs", GROUP, handle).code == ResponseCode.SUCCESS
        stale = client.ack("Jobs", GROUP, handle)
        assert stale.code == ResponseCode.ILLEGAL_OPERATION and "stale" in stale.remark
        forged = client.ack("Jobs", GROUP, handle.replace(handle.split(" ")[1], "12345"))
        assert forged.code == ResponseCode.ILLEGAL_OPERATION
        garbage = client.ack("Jobs", GROUP, "not a handle")
        assert garbage.code == ResponseCode.INVALID_PARAMETER
        bad_time = client.pop("Jobs", GROUP, invisible_ms=13 * 3_600_000)[0]
        assert bad_time.code == ResponseCode.INVALID_PARAMETER


def test_redelivery_after_the_invisible_time_then_the_dlq(broker: Process) -> None:
    with RawClient(broker.address) as client:
        send(client, "Flaky", b"flaky-1")
        _, [(first, handle)] = client.pop("Flaky", GROUP, invisible_ms=10_000)
        assert first.reconsume_times == 0
        client.clock("advance", duration="9999ms")
        assert client.pop("Flaky", GROUP)[1] == []  # still invisible
        client.clock("advance", duration="1ms")
        _, [(second, handle2)] = client.pop("Flaky", GROUP, invisible_ms=10_000)
        assert second.body == b"flaky-1" and second.reconsume_times == 1
        assert (
            second.topic == f"%RETRY%{GROUP}_Flaky" and second.properties["RETRY_TOPIC"] == "Flaky"
        )
        assert (
            client.ack("Flaky", GROUP, handle).code == ResponseCode.ILLEGAL_OPERATION
        )  # the first lending is over
        # A longer invisible time, then let it run out: 16 redeliveries, then the DLQ.
        response, handle2 = client.change_invisible("Flaky", GROUP, handle2, 60_000)
        assert response.code == ResponseCode.SUCCESS
        client.clock("advance", duration="59s")
        assert client.pop("Flaky", GROUP)[1] == []
        deliveries = 2
        for _ in range(40):
            client.clock("advance", duration="61s")
            _, popped = client.pop("Flaky", GROUP, invisible_ms=10_000)
            if not popped:
                break
            deliveries += 1
            assert popped[0][0].reconsume_times == deliveries - 1
        assert deliveries == 17  # 1 + 16 retries
        dlq = client.pull(f"%DLQ%{GROUP}", 0, 0, group="dlq-reader")
        assert dlq.code == ResponseCode.SUCCESS and b"flaky-1" in dlq.body


def test_fifo_queue_waits_for_acks_and_redelivers_in_place(broker: Process) -> None:
    with RawClient(broker.address) as client:
        for i in range(3):
            send(client, "Fifo", f"step-{i}".encode())
        _, [(first, handle)] = client.pop(
            "Fifo", GROUP, queue_id=0, max_count=1, order=True, invisible_ms=10_000
        )
        assert first.body == b"step-0"
        assert (
            client.pop("Fifo", GROUP, queue_id=0, max_count=1, order=True)[1] == []
        )  # locked until acked
        client.clock("advance", duration="10s")  # not acknowledged: the same message again
        _, [(again, handle)] = client.pop(
            "Fifo", GROUP, queue_id=0, max_count=1, order=True, invisible_ms=10_000
        )
        assert again.body == b"step-0" and again.reconsume_times == 1
        assert client.ack("Fifo", GROUP, handle).code == ResponseCode.SUCCESS
        _, [(second, handle)] = client.pop("Fifo", GROUP, queue_id=0, max_count=1, order=True)
        assert second.body == b"step-1"


def test_a_restart_loses_nothing_in_flight_and_redelivers_nothing_acknowledged(
    broker: Process,
) -> None:
    with RawClient(broker.address) as client:
        for i in range(4):
            send(client, "Durable", f"d-{i}".encode())
        _, popped = client.pop("Durable", GROUP, invisible_ms=20_000)
        assert len(popped) == 4
        for _, handle in popped[:2]:
            assert client.ack("Durable", GROUP, handle).code == 0
        now = int(client.clock()["now"])
    broker.kill()
    broker.start()
    with RawClient(broker.address) as client:
        # The restarted manual clock starts at the wall clock, which may already be more than
        # 1 s past `now` (a slow start): never set it backwards, still inside the 20 s.
        restarted = int(client.clock()["now"])
        client.clock("set", time=str(max(now + 1000, restarted)))
        assert client.pop("Durable", GROUP)[1] == []  # the two unacked are still invisible
        client.clock("advance", duration="20s")
        _, popped = client.pop("Durable", GROUP)
        assert sorted(m.body for m, _ in popped) == [b"d-2", b"d-3"]


def test_a_fifo_message_whose_time_ran_out_survives_a_restart(broker: Process) -> None:
    """The end of an expired FIFO lending is not an acknowledgement: after a crash the same
    message is handed out again, with its attempt count."""
    with RawClient(broker.address) as client:
        for i in range(2):
            send(client, "FifoRestart", f"step-{i}".encode())
        _, [(first, _)] = client.pop(
            "FifoRestart", GROUP, queue_id=0, max_count=1, order=True, invisible_ms=10_000
        )
        assert first.body == b"step-0"
        client.clock("advance", duration="10s")  # expired: to be handed out again in place
        now = int(client.clock()["now"])
    broker.kill()
    broker.start()
    with RawClient(broker.address) as client:
        client.clock("set", time=str(now + 1000))
        _, [(again, handle)] = client.pop(
            "FifoRestart", GROUP, queue_id=0, max_count=1, order=True, invisible_ms=10_000
        )
        assert again.body == b"step-0" and again.reconsume_times == 1
        assert client.ack("FifoRestart", GROUP, handle).code == ResponseCode.SUCCESS
        _, [(second, _)] = client.pop("FifoRestart", GROUP, queue_id=0, max_count=1, order=True)
        assert second.body == b"step-1"
