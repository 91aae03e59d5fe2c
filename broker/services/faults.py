"""Planned faults, in RocketMQ's own terms: what a test asks the broker to get wrong, and when.

A fault is planned for the next N events of its kind (optionally of one topic), applied by the
service where that event happens, logged (one WARNING line each time it fires) and listed with
how often it fired. When nothing is planned, each place that could apply one tests one
attribute (an empty list) and goes on::

    broker.faults.plan("system_busy", times=2, topic="Orders")   # the next 2 sends refused
    broker.faults.plan("drop_check")          # the next check-back answer is lost
    broker.faults.plan("delay_pull", delay_ms=30_000)   # answered once the clock moved 30 s
    broker.faults.close_connection(client_id)            # now
    broker.faults.list(); broker.faults.clear()

The kinds, and what RocketMQ does that each imitates:

* ``system_busy``: a send refused with SYSTEM_BUSY (2), nothing stored, as a broker whose
  request queue is full answers; RocketMQ's producers retry it on another queue/broker.
* ``flush_disk_timeout`` / ``slave_not_available``: a send stored but answered with
  FLUSH_DISK_TIMEOUT (10) / SLAVE_NOT_AVAILABLE (11); RocketMQ's producer returns that status in
  its SendResult (``SendStatus``) without retrying (``retryAnotherBrokerWhenNotStoreOK`` off).
* ``redeliver``: a send stored twice, as the copy a producer's retry leaves after a lost answer;
  every consumer group gets the message (same message ID, body and keys) twice.
* ``drop_check`` / ``delay_check``: the answer to a transaction check-back (END_TRANSACTION
  from a check) lost, so the next check comes at the check interval; or applied ``delay_ms``
  later on the broker's clock.
* ``delay_pull``: a pull (PULL_MESSAGE) or POP (POP_MESSAGE) answered ``delay_ms`` later on
  the broker's clock (with a manual clock: once it has been advanced that far).
* ``close_connection`` (now): every connection of one client ID closed, as a network cut.
* ``crash`` (now): the broker stops as a killed process does (no final flush, no clean-stop
  record) and starts again from the same data folder, running the store's recovery.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

import msgspec

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.services.clients import ClientRegistry
from pocketmq.broker.services.clock import Scheduler

__all__ = ["Fault", "FaultKind", "FaultPlan"]

log = logging.getLogger("pocketmq.broker.faults")

PLANNED_MAX = 1000  # faults waiting to fire at once
HISTORY_MAX = 1000  # used-up faults still listed (the oldest dropped first)
TIMES_MAX = 1_000_000  # events one fault may apply to
DELAY_MS_MAX = 7 * 24 * 3_600_000  # a week: longer is a mistake, not a test


class FaultKind(Enum):
    SYSTEM_BUSY = "system_busy"
    FLUSH_DISK_TIMEOUT = "flush_disk_timeout"
    SLAVE_NOT_AVAILABLE = "slave_not_available"
    REDELIVER = "redeliver"
    DROP_CHECK = "drop_check"
    DELAY_CHECK = "delay_check"
    DELAY_PULL = "delay_pull"
    CLOSE_CONNECTION = "close_connection"
    CRASH = "crash"

    @classmethod
    def parse(cls, text: str) -> FaultKind:
        """A kind by name, in any case, ``-`` or ``_`` (``SYSTEM_BUSY``, ``delay-pull``)."""
        name = text.strip().lower().replace("-", "_")
        for kind in cls:
            if kind.value == name:
                return kind
        known = ", ".join(kind.value for kind in cls)
        raise BrokerError(Kind.INVALID_PARAMETER, f"no fault kind {text!r:.60}; kinds: {known}")


_SENDS = (
    FaultKind.SYSTEM_BUSY,
    FaultKind.FLUSH_DISK_TIMEOUT,
    FaultKind.SLAVE_NOT_AVAILABLE,
    FaultKind.REDELIVER,
)
_CHECKS = (FaultKind.DROP_CHECK, FaultKind.DELAY_CHECK)
_DELAYED = (FaultKind.DELAY_CHECK, FaultKind.DELAY_PULL)
_NOW = (FaultKind.CLOSE_CONNECTION, FaultKind.CRASH)


class Fault(msgspec.Struct, kw_only=True):
    """One planned fault and what it did so far (the list's rows, also as JSON)."""

    id: int
    kind: str  # a FaultKind value
    times: int  # events it applies to in all (1 for one done now)
    left: int  # events it still applies to
    topic: str | None = None  # only events of this topic (None: any)
    delay_ms: int = 0  # delay_check, delay_pull
    client_id: str | None = None  # close_connection
    planned_ms: int = 0  # the broker's clock when planned
    fired: int = 0
    last_fired_ms: int | None = None
    detail: str = ""  # what the last firing did, in words

    def to_dict(self) -> dict[str, Any]:
        return msgspec.structs.asdict(self)


_Faults = list[Fault]  # the class's own ``list`` method hides the builtin in its body


class FaultPlan:
    """The faults planned on one broker, consulted by the services where each applies."""

    def __init__(
        self,
        *,
        now_ms: Callable[[], int],
        scheduler: Scheduler | None = None,
        clients: ClientRegistry | None = None,
    ) -> None:
        """``scheduler`` runs the delayed faults, ``clients`` finds the connections to close
        (a plan without them takes only the other kinds: a service's own default)."""
        self.now_ms = now_ms
        self.scheduler = scheduler
        self.clients = clients
        # The lists each place tests (empty: nothing planned, go on).
        self.sends: _Faults = []
        self.checks: _Faults = []
        self.pulls: _Faults = []
        self._history: _Faults = []
        self._next_id = 1
        # Set by the app: stop as a crash and start again (None: an in-memory broker).
        self.crash_hook: Callable[[], Awaitable[None]] | None = None
        self._crash_task: asyncio.Task[None] | None = None

    # -- planning -----------------------------------------------------------------------------

    def plan(
        self,
        kind: FaultKind | str,
        *,
        times: int = 1,
        topic: str | None = None,
        delay_ms: int = 0,
    ) -> Fault:
        """Plan a fault for the next ``times`` events of its kind (of ``topic`` only, if
        given). ``BrokerError`` (INVALID_PARAMETER) for a kind, count or delay out of range."""
        kind = FaultKind.parse(kind) if isinstance(kind, str) else kind
        if kind in _NOW:
            raise BrokerError(
                Kind.INVALID_PARAMETER,
                f"{kind.value} happens now, it is not planned: use "
                f"{'close_connection(client_id)' if kind is FaultKind.CLOSE_CONNECTION else 'crash()'}",
            )
        if isinstance(times, bool) or not isinstance(times, int) or not 1 <= times <= TIMES_MAX:
            raise BrokerError(
                Kind.INVALID_PARAMETER, f"times {times!r:.40} is not between 1 and {TIMES_MAX}"
            )
        delayed = kind in _DELAYED
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int):
            raise BrokerError(Kind.INVALID_PARAMETER, f"delay_ms {delay_ms!r:.40} is not a number")
        if delayed and not 1 <= delay_ms <= DELAY_MS_MAX:
            raise BrokerError(
                Kind.INVALID_PARAMETER,
                f"{kind.value} needs delay_ms between 1 and {DELAY_MS_MAX}, not {delay_ms}",
            )
        if not delayed and delay_ms:
            raise BrokerError(Kind.INVALID_PARAMETER, f"{kind.value} takes no delay_ms")
        if topic is not None and (not isinstance(topic, str) or not 0 < len(topic) <= 255):
            raise BrokerError(Kind.INVALID_PARAMETER, f"topic {topic!r:.60} is not a topic name")
        if len(self.sends) + len(self.checks) + len(self.pulls) >= PLANNED_MAX:
            raise BrokerError(
                Kind.INVALID_PARAMETER, f"{PLANNED_MAX} faults are planned already: clear some"
            )
        fault = self._new(kind, times=times, topic=topic, delay_ms=delay_ms)
        self._list_of(kind).append(fault)
        log.info("fault %d planned: %s", fault.id, _describe(fault))
        return fault

    def _new(self, kind: FaultKind, **fields: Any) -> Fault:
        times = fields.pop("times", 1)
        fault = Fault(
            id=self._next_id,
            kind=kind.value,
            times=times,
            left=times,
            planned_ms=self.now_ms(),
            **fields,
        )
        self._next_id += 1
        return fault

    def _list_of(self, kind: FaultKind) -> _Faults:
        if kind in _SENDS:
            return self.sends
        if kind in _CHECKS:
            return self.checks
        return self.pulls

    def list(self) -> _Faults:
        """Every fault, the used-up ones first (oldest first), then those still planned."""
        planned = sorted(self.sends + self.checks + self.pulls, key=lambda f: f.id)
        return [*self._history, *planned]

    def clear(self, fault_id: int | None = None) -> int:
        """Unplan one fault (by id) or all, and forget the used-up ones too (all): how many."""
        removed = 0
        for planned in (self.sends, self.checks, self.pulls):
            kept = [f for f in planned if fault_id is not None and f.id != fault_id]
            removed += len(planned) - len(kept)
            planned[:] = kept
        if fault_id is None:
            removed += len(self._history)
            self._history.clear()
        else:
            kept_history = [f for f in self._history if f.id != fault_id]
            removed += len(self._history) - len(kept_history)
            self._history[:] = kept_history
        if removed:
            log.info("faults cleared: %d (%s)", removed, "all" if fault_id is None else fault_id)
        return removed

    # -- firing -------------------------------------------------------------------------------

    def _take(self, planned: _Faults, topic: str | None) -> Fault | None:
        """The first planned fault of ``planned`` for an event of ``topic``, counted."""
        for fault in planned:
            if fault.topic is None or fault.topic == topic:
                fault.left -= 1
                if fault.left <= 0:
                    planned.remove(fault)
                    self._remember(fault)
                return fault
        return None

    def _fired(self, fault: Fault, detail: str) -> None:
        fault.fired += 1
        fault.last_fired_ms = self.now_ms()
        fault.detail = detail
        log.warning(
            "fault %d fired (%d of %d): %s: %s",
            fault.id,
            fault.fired,
            fault.times,
            fault.kind,
            detail,
        )

    def _remember(self, fault: Fault) -> None:
        self._history.append(fault)
        if len(self._history) > HISTORY_MAX:
            del self._history[0]

    def take_send(self, topic: str) -> FaultKind | None:
        """The fault for a send to ``topic`` now, if one is planned (counted and logged)."""
        fault = self._take(self.sends, topic)
        if fault is None:
            return None
        kind = FaultKind(fault.kind)
        self._fired(fault, _SEND_DETAIL[kind].format(topic=topic))
        return kind

    def take_check_answer(self, topic: str, transaction_id: str) -> Fault | None:
        """The fault for a check-back answer about a transaction of ``topic`` now, if any."""
        fault = self._take(self.checks, topic)
        if fault is None:
            return None
        if fault.kind == FaultKind.DROP_CHECK.value:
            detail = f"the check-back answer for transaction {transaction_id} dropped"
        else:
            detail = (
                f"the check-back answer for transaction {transaction_id} held for "
                f"{fault.delay_ms} ms of the broker's clock"
            )
        self._fired(fault, detail)
        return fault

    def take_pull(self, topic: str, queue_id: int) -> int | None:
        """The delay (ms of the broker's clock) of a pull of ``topic`` now, if one is planned."""
        fault = self._take(self.pulls, topic)
        if fault is None:
            return None
        self._fired(fault, f"a pull of {topic} queue {queue_id} held for {fault.delay_ms} ms")
        return fault.delay_ms

    def after(self, delay_ms: int) -> asyncio.Future[None]:
        """A future done once the broker's clock is ``delay_ms`` later than now (the scheduler
        runs it: a manual clock's advance, or the system clock's own time)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.scheduler is None:
            raise BrokerError(Kind.ILLEGAL_STATE, "this fault plan has no scheduler for delays")

        def done() -> None:
            if not future.done():
                future.set_result(None)

        self.scheduler.at(self.now_ms() + delay_ms, done, alive=lambda: not future.done())
        return future

    # -- now ----------------------------------------------------------------------------------

    def close_connection(self, client_id: str) -> Fault:
        """Close every connection of the client ``client_id`` now, as a network cut would
        (the client reconnects). ``BrokerError`` NOT_FOUND when no connection has that ID."""
        if not isinstance(client_id, str) or not 0 < len(client_id) <= 255:
            raise BrokerError(Kind.INVALID_PARAMETER, f"client id {client_id!r:.60} is not one")
        channels = self.clients.channels_of(client_id) if self.clients is not None else []
        closable = [c for c in channels if callable(getattr(c, "close", None))]
        if not closable:
            raise BrokerError(
                Kind.NOT_FOUND, f"no connection of client {client_id!r} to close (remoting only)"
            )
        for channel in closable:
            channel.close()  # type: ignore[attr-defined]
        fault = self._new(FaultKind.CLOSE_CONNECTION, client_id=client_id)
        fault.left = 0
        self._remember(fault)
        self._fired(fault, f"{len(closable)} connection(s) of client {client_id} closed")
        return fault

    def crash(self) -> Fault:
        """Crash the broker and start it again from its data folder, soon (in a task, so the
        request that asked is answered first); ``crashed()`` waits for it."""
        if self.crash_hook is None:
            raise BrokerError(
                Kind.ILLEGAL_STATE,
                "an in-memory broker has no files to recover: crash needs a data folder",
            )
        if self._crash_task is not None and not self._crash_task.done():
            raise BrokerError(Kind.ILLEGAL_STATE, "a crash is under way already")
        fault = self._new(FaultKind.CRASH)
        fault.left = 0
        self._remember(fault)
        self._fired(fault, "the broker stops as a killed process and starts again (recovery)")
        self._crash_task = asyncio.get_running_loop().create_task(
            self._crash(self.crash_hook, fault), name="fault-crash"
        )
        return fault

    async def _crash(self, hook: Callable[[], Awaitable[None]], fault: Fault) -> None:
        await asyncio.sleep(0.05)  # let the answer to the request that asked leave first
        try:
            await hook()
        except Exception as error:  # said in the list and the log; never lost silently
            fault.detail = f"crash and recovery failed: {error}"
            log.exception("fault %d: crash and recovery failed", fault.id)
        else:
            fault.detail = "crashed and recovered"

    async def crashed(self) -> None:
        """Wait for a crash asked by ``crash()`` to have recovered."""
        task = self._crash_task
        if task is not None:
            await asyncio.shield(task)


_SEND_DETAIL = {
    FaultKind.SYSTEM_BUSY: "a send to {topic} refused with SYSTEM_BUSY, not stored",
    FaultKind.FLUSH_DISK_TIMEOUT: "a send to {topic} stored, answered FLUSH_DISK_TIMEOUT",
    FaultKind.SLAVE_NOT_AVAILABLE: "a send to {topic} stored, answered SLAVE_NOT_AVAILABLE",
    FaultKind.REDELIVER: "a send to {topic} stored twice: delivered twice",
}


def _describe(fault: Fault) -> str:
    what = f"{fault.kind} x{fault.times}"
    if fault.topic is not None:
        what += f" of topic {fault.topic}"
    if fault.delay_ms:
        what += f", {fault.delay_ms} ms"
    return what
