"""FaultPlan on its own: which event a fault applies to, counts, the list, clearing, limits,
logging; and the seeded ID generators."""

from __future__ import annotations

import logging
import random

import pytest

from pocketmq.broker.errors import BrokerError
from pocketmq.broker.services import faults as faults_module
from pocketmq.broker.services.clients import ClientRegistry
from pocketmq.broker.services.faults import Fault, FaultKind, FaultPlan
from pocketmq.ids import UniqIdGenerator, V5IdGenerator


def _plan() -> FaultPlan:
    return FaultPlan(now_ms=lambda: 1_000)


def test_nothing_planned_leaves_every_list_empty() -> None:
    plan = _plan()
    assert not plan.sends and not plan.checks and not plan.pulls
    assert plan.take_send("T") is None and plan.take_pull("T", 0) is None
    assert plan.list() == []


def test_a_topic_fault_applies_to_that_topic_only_and_counts_down() -> None:
    plan = _plan()
    fault = plan.plan("SYSTEM-BUSY", times=2, topic="Orders")
    assert fault.kind == "system_busy" and fault.left == 2 and fault.planned_ms == 1_000
    assert plan.take_send("Other") is None
    assert plan.take_send("Orders") is FaultKind.SYSTEM_BUSY
    assert plan.sends and fault.left == 1
    assert plan.take_send("Orders") is FaultKind.SYSTEM_BUSY
    assert not plan.sends  # used up: the hot path's test is false again
    assert plan.take_send("Orders") is None
    assert plan.list() == [fault] and fault.fired == 2 and fault.last_fired_ms == 1_000


def test_faults_apply_in_the_order_planned() -> None:
    plan = _plan()
    plan.plan("flush_disk_timeout")
    plan.plan("slave_not_available", topic="T")
    plan.plan("redeliver")
    taken = [plan.take_send("T") for _ in range(4)]
    assert taken == [
        FaultKind.FLUSH_DISK_TIMEOUT,
        FaultKind.SLAVE_NOT_AVAILABLE,
        FaultKind.REDELIVER,
        None,
    ]


def test_each_firing_is_one_warning_line(caplog: pytest.LogCaptureFixture) -> None:
    plan = _plan()
    plan.plan("delay_pull", times=2, delay_ms=5_000)
    with caplog.at_level(logging.WARNING, logger="pocketmq.broker.faults"):
        assert plan.take_pull("T", 3) == 5_000
        assert plan.take_pull("U", 1) == 5_000
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert lines[0] == "fault 1 fired (1 of 2): delay_pull: a pull of T queue 3 held for 5000 ms"


def test_check_answer_faults() -> None:
    plan = _plan()
    plan.plan("drop_check", topic="Tx")
    plan.plan("delay_check", delay_ms=2_000)
    dropped = plan.take_check_answer("Tx", "ID1")
    held = plan.take_check_answer("Tx", "ID2")
    assert dropped is not None and dropped.kind == "drop_check" and "ID1 dropped" in dropped.detail
    assert held is not None and held.delay_ms == 2_000 and "ID2 held for 2000 ms" in held.detail
    assert plan.take_check_answer("Tx", "ID3") is None


def test_clear_one_or_all() -> None:
    plan = _plan()
    first = plan.plan("system_busy")
    second = plan.plan("redeliver", times=3)
    plan.take_send("T")  # first used up: history
    assert plan.clear(second.id) == 1 and not plan.sends
    assert plan.list() == [first]
    assert plan.clear(99) == 0
    assert plan.clear() == 1 and plan.list() == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "nope"}, "no fault kind 'nope'; kinds: system_busy"),
        ({"kind": "system_busy", "times": 0}, "times 0 is not between 1"),
        ({"kind": "system_busy", "times": True}, "times True is not"),
        ({"kind": "delay_pull"}, "delay_pull needs delay_ms between 1 and"),
        ({"kind": "delay_check", "delay_ms": 8 * 86_400_000}, "needs delay_ms between"),
        ({"kind": "redeliver", "delay_ms": 5}, "redeliver takes no delay_ms"),
        ({"kind": "system_busy", "topic": ""}, "is not a topic name"),
        ({"kind": "crash"}, "crash happens now"),
        ({"kind": "close_connection"}, "close_connection(client_id)"),
    ],
)
def test_bad_plans_say_what_is_wrong(kwargs: dict[str, object], message: str) -> None:
    kind = kwargs.pop("kind")
    with pytest.raises(BrokerError) as caught:
        _plan().plan(kind, **kwargs)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults_module, "PLANNED_MAX", 3)
    monkeypatch.setattr(faults_module, "HISTORY_MAX", 2)
    plan = _plan()
    for _ in range(3):
        plan.plan("system_busy")
    with pytest.raises(BrokerError, match="3 faults are planned already"):
        plan.plan("drop_check")
    for _ in range(3):
        plan.take_send("T")
    assert [f.id for f in plan.list()] == [2, 3]  # the oldest used-up one forgotten


def test_close_connection_needs_a_connection_of_that_client() -> None:
    plan = FaultPlan(now_ms=lambda: 0, clients=ClientRegistry(notify=lambda group, channels: None))
    with pytest.raises(BrokerError, match="no connection of client 'a@b'"):
        plan.close_connection("a@b")
    with pytest.raises(BrokerError, match="is not one"):
        plan.close_connection("")


def test_crash_needs_a_data_folder() -> None:
    with pytest.raises(BrokerError, match="in-memory broker"):
        _plan().crash()


def test_faults_are_rows_of_plain_values() -> None:
    row = Fault(id=1, kind="system_busy", times=1, left=1).to_dict()
    assert row["kind"] == "system_busy" and row["topic"] is None and row["fired"] == 0


def test_seeded_id_generators_repeat_and_differ_by_seed() -> None:
    def ids(seed: int) -> list[str]:
        rng = random.Random(seed)
        v4 = UniqIdGenerator("10.0.0.1", pid=1, now_ms=lambda: 1_767_225_600_000, rng=rng)
        v5 = V5IdGenerator(mac=7, pid=1, now_ms=lambda: 1_767_225_600_000, private=True)
        return [v4.next_id() for _ in range(3)] + [v5.next_id() for _ in range(3)]

    assert ids(1) == ids(1)
    assert ids(1)[:3] != ids(2)[:3]  # the 4.x discriminator comes from the seed
    assert len(set(ids(1))) == 6
    # Unseeded, two generators of one process never share a discriminator.
    assert UniqIdGenerator().discriminator != UniqIdGenerator().discriminator
