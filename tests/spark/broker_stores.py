"""A store written by a real broker process on a manual clock, for the analyses and the report.

Every copy a message can have is made the way a broker makes it (delay levels, retries, the
DLQ and a resend from it, transactions committed, rolled back, checked and left unknown), at
times the test controls, so the analyses' numbers are known exactly. What happens, with the
clock (``T0`` is a minute boundary; times in seconds after it):

* 0 s: ``P1``-``P3`` to ``Orders`` (queues 0-2), ``R1``, ``R2`` to ``Orders`` queue 3; ``D1``
  with delay level 2 (5 s) and ``D2`` with level 3 (10 s). Group ``billing`` pulls queue 3 and
  gives both ``R`` messages back (retry 1: level 3).
* 5 s, 10 s: ``D1``, ``D2`` delivered; 10 s: both first retries reach ``%RETRY%billing``.
* 10 s: ``billing`` gives ``R1`` back again (retry 2: level 4, 30 s); ``R2`` succeeds.
* 40 s: the second retry arrives; ``billing`` sends it to the DLQ, and the DLQ is resent.
* 60 s: transactions of producer group ``tx-producer`` on ``Payments``: ``TX1`` committed,
  ``TX2`` rolled back, ``TX3`` answered unknown, ``TX4`` never answered.
* 66 s and 96 s: checks of ``TX3`` and ``TX4`` (2 each); ``TX3`` is committed from its
  second check, ``TX4`` stays unknown.
"""

from __future__ import annotations

from pathlib import Path

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import EndTransactionRequestHeader, SendMessageRequestHeaderV2
from pocketmq.broker.protocol.message_codec import MessageExt, decode_messages
from pocketmq.ids import decode_offset_msg_id
from tests.integration.cluster import Cluster
from tests.integration.raw import RawClient

T0 = 1_800_000_000_000  # a whole minute (2027-01-15T08:00:00Z)
TX_GROUP = "tx-producer"
COMMIT, ROLLBACK, UNKNOWN = 8, 12, 0


def _send(client: RawClient, topic: str, key: str, queue_id: int, extra: str = "") -> None:
    sent = client.send_message(
        topic,
        f"body of {key}".encode(),
        queue_id=queue_id,
        properties=f"{extra}UNIQ_KEY\x01{key}\x02KEYS\x01{key}\x02",
    )
    assert sent.code == ResponseCode.SUCCESS, sent.remark


def _pull(client: RawClient, topic: str, queue_id: int, offset: int) -> list[MessageExt]:
    response = client.pull(topic, queue_id, offset, group="billing")
    assert response.code == ResponseCode.SUCCESS, response.remark
    return decode_messages(response.body)


def _send_back(client: RawClient, message: MessageExt, delay_level: int = 0) -> None:
    answer = client.send_back(message.commitlog_offset, "billing", delay_level=delay_level)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def _half(client: RawClient, key: str) -> tuple[int, int]:
    header = SendMessageRequestHeaderV2(
        producer_group=TX_GROUP,
        topic="Payments",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0x4,
        born_timestamp=int(client.clock()["now"]),
        flag=0,
        properties=f"TRAN_MSG\x01true\x02PGROUP\x01{TX_GROUP}\x02UNIQ_KEY\x01{key}\x02",
    )
    response = client.call(
        RemotingCommand(
            code=RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext_fields(), body=key.encode()
        )
    )
    assert response.code == ResponseCode.SUCCESS, response.remark
    offset = decode_offset_msg_id(response.ext_fields["msgId"]).physical_offset
    return offset, int(response.ext_fields["queueOffset"])


def _end(client: RawClient, offset: int, queue_offset: int, key: str, outcome: int) -> None:
    header = EndTransactionRequestHeader(
        producer_group=TX_GROUP,
        tran_state_table_offset=queue_offset,
        commit_log_offset=offset,
        commit_or_rollback=outcome,
        from_transaction_check=False,
        msg_id=key,
    )
    answer = client.call(
        RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=header.to_ext_fields())
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def _checks(client: RawClient, count: int) -> dict[str, RemotingCommand]:
    found = {}
    for _ in range(count):
        check = client.wait_request(RequestCode.CHECK_TRANSACTION_STATE, timeout_s=30)
        found[check.ext_fields["transactionId"]] = check
    return found


def lifecycle_store(root: Path) -> Path:
    """Run the story above on a fresh broker under ``root``; returns the store folder (the
    broker is stopped, cleanly, before this returns)."""
    with Cluster(root) as cluster:
        broker = cluster.start_standalone(extra_args=["--clock", "manual"])
        with RawClient(broker.address) as client:
            client.clock("set", time=str(T0))
            for queue_id, key in enumerate(("P1", "P2", "P3")):
                _send(client, "Orders", key, queue_id)
            _send(client, "Orders", "R1", 3)
            _send(client, "Orders", "R2", 3)
            _send(client, "Orders", "D1", 0, "DELAY\x012\x02")
            _send(client, "Orders", "D2", 1, "DELAY\x013\x02")
            r1, r2 = _pull(client, "Orders", 3, 0)
            _send_back(client, r1)
            _send_back(client, r2)
            client.clock("advance", duration="10s")
            retry_r1, _retry_r2 = _pull(client, "%RETRY%billing", 0, 0)
            _send_back(client, retry_r1)
            client.clock("advance", duration="30s")
            [second_retry] = _pull(client, "%RETRY%billing", 0, 2)
            _send_back(client, second_retry, delay_level=-1)
            resent = client.call(
                RemotingCommand(
                    code=RequestCode.POCKETMQ_DLQ,
                    ext_fields={"action": "resend", "group": "billing", "ids": ""},
                )
            )
            assert resent.code == ResponseCode.SUCCESS, resent.remark
            client.clock("advance", duration="20s")
            client.heartbeat_producer(TX_GROUP)
            halves = {key: _half(client, key) for key in ("TX1", "TX2", "TX3", "TX4")}
            _end(client, *halves["TX1"], "TX1", COMMIT)
            _end(client, *halves["TX2"], "TX2", ROLLBACK)
            _end(client, *halves["TX3"], "TX3", UNKNOWN)
            client.clock("advance", duration="6s")
            _checks(client, 2)
            client.clock("advance", duration="30s")
            second = _checks(client, 2)["TX3"]
            header = EndTransactionRequestHeader(
                producer_group=TX_GROUP,
                tran_state_table_offset=int(second.ext_fields["tranStateTableOffset"]),
                commit_log_offset=int(second.ext_fields["commitLogOffset"]),
                commit_or_rollback=COMMIT,
                from_transaction_check=True,
                msg_id="TX3",
            )
            answer = client.call(
                RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields=header.to_ext_fields())
            )
            assert answer.code == ResponseCode.SUCCESS and answer.remark == "committed"
        data = Path(str(broker.extra["data"]))
    return data
