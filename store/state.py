"""Message state (available 1, unavailable 10, poisoned 20, marked for deletion 30).

A state change is never a rewrite: it is a record appended to the system topic
``rmq_sys_MESSAGE_STATE`` (queue 0), whose body is

    offset  size  field
         0     8  target physical offset   the message whose state changes (first of a span)
         8     1  state code               1, 10, 20 or 30
         9     8  span end                 0: one message; else every message with
                                           target <= physical offset < span end (retention
                                           marks a whole segment with one record)
        17     1  group length             0: the state holds for everyone
        18     g  group                    a consumer group: the state holds for it alone
                                           (dead-lettered by one group, still deliverable to
                                           the others, as RocketMQ's per-group DLQs)
      18+g     n  reason                   UTF-8 text, may be empty

The table of current states lives in memory (only messages that are not available are kept)
and is rebuilt on recovery by replaying that topic's consume queue.
"""

from __future__ import annotations

import bisect
import enum
import struct
from dataclasses import dataclass

__all__ = [
    "STATE_TOPIC",
    "TRANSITIONS",
    "IllegalStateChangeError",
    "MessageState",
    "StateChange",
    "StateTable",
    "check_transition",
    "decode_state_body",
    "encode_state_body",
]

STATE_TOPIC = "rmq_sys_MESSAGE_STATE"
_BODY = struct.Struct(">qBq")


class MessageState(enum.IntEnum):
    AVAILABLE = 1
    UNAVAILABLE = 10
    POISONED = 20
    MARKED_FOR_DELETION = 30

    @property
    def label(self) -> str:
        return self.name.lower()


# The one table of the changes a message's state may go through (h11's _state.py is the model):
# from each state, the states a change may lead to, and who makes it. Every change goes through
# MessageStore.set_state, which checks it here; one not in the table raises.
_A, _U, _P, _D = (
    MessageState.AVAILABLE,
    MessageState.UNAVAILABLE,
    MessageState.POISONED,
    MessageState.MARKED_FOR_DELETION,
)
TRANSITIONS: dict[MessageState, frozenset[MessageState]] = {
    # a copy stored to wait (delay level, timer, half message); dead-lettered by a group; an
    # admin's delete, a DLQ resend of its dead letter, retention
    _A: frozenset((_U, _P, _D)),
    # delivered (delay, timer), committed, rolled back, superseded by a check copy, discarded
    # after the last check, recalled; dead-lettered while it waited; made available again
    # (MessageStore.set_state by a user of the store)
    _U: frozenset((_D, _P, _A)),
    # dead-lettered again (its retry copy and its first delivery); an admin's delete, retention
    _P: frozenset((_P, _D)),
    # for good: only marking it again (a second delete, a span over it) is no change
    _D: frozenset((_D,)),
}


class IllegalStateChangeError(ValueError):
    """A state change the table does not allow (e.g. a message marked for deletion made
    available again); nothing was written."""

    def __init__(self, physical_offset: int, current: MessageState, new: MessageState) -> None:
        self.physical_offset = physical_offset
        self.current = current
        self.new = new
        super().__init__(
            f"the message at {physical_offset} is {current.label}: it cannot become {new.label}"
        )


def check_transition(physical_offset: int, current: MessageState, new: MessageState) -> None:
    """Raises ``IllegalStateChangeError`` unless ``TRANSITIONS`` allows ``current`` -> ``new``."""
    if new not in TRANSITIONS[current]:
        raise IllegalStateChangeError(physical_offset, current, new)


@dataclass(frozen=True, slots=True)
class StateChange:
    target_offset: int
    state: MessageState
    reason: str = ""
    changed_at_ms: int = 0
    span_end: int = 0  # 0: just the message at target_offset
    group: str = ""  # "": for every consumer group


def encode_state_body(
    target_offset: int, state: MessageState, reason: str = "", *, span_end: int = 0, group: str = ""
) -> bytes:
    assert target_offset >= 0
    assert span_end == 0 or span_end > target_offset
    group_bytes = group.encode("utf-8")
    if len(group_bytes) > 255:
        raise ValueError(f"group name of {len(group_bytes)} bytes is too long for a state record")
    head = _BODY.pack(target_offset, int(state), span_end) + bytes([len(group_bytes)])
    return head + group_bytes + reason.encode("utf-8")


def decode_state_body(body: bytes, changed_at_ms: int = 0) -> StateChange:
    """Raises ValueError on a body that is not a state change."""
    if len(body) < _BODY.size + 1:
        raise ValueError(
            f"state record body has {len(body)} bytes, needs at least {_BODY.size + 1}"
        )
    target, code, span_end = _BODY.unpack_from(body)
    if target < 0 or (span_end and span_end <= target):
        raise ValueError(f"state record targets [{target}, {span_end}): not a valid span")
    group_end = _BODY.size + 1 + body[_BODY.size]
    if group_end > len(body):
        raise ValueError("state record group runs past the body")
    group = body[_BODY.size + 1 : group_end].decode("utf-8", "replace")
    reason = body[group_end:].decode("utf-8", "replace")
    return StateChange(target, MessageState(code), reason, changed_at_ms, span_end, group)


class StateTable:
    """Current state by physical offset; absent means available.

    Single changes live in a dict; span changes (whole segments marked for deletion) in a sorted
    list. A single change newer than a span wins for its message, and the reverse."""

    def __init__(self) -> None:
        self._changes: dict[int, StateChange] = {}
        self._span_starts: list[int] = []
        self._spans: list[StateChange] = []

    def apply(self, change: StateChange) -> None:
        if change.span_end:
            index = bisect.bisect_left(self._span_starts, change.target_offset)
            self._span_starts.insert(index, change.target_offset)
            self._spans.insert(index, change)
            for offset in [o for o in self._changes if change.target_offset <= o < change.span_end]:
                del self._changes[offset]
        elif change.state is MessageState.AVAILABLE and not self._span_of(change.target_offset):
            self._changes.pop(change.target_offset, None)
        else:
            self._changes[change.target_offset] = change

    def _span_of(self, physical_offset: int) -> StateChange | None:
        index = bisect.bisect_right(self._span_starts, physical_offset) - 1
        if index >= 0 and physical_offset < self._spans[index].span_end:
            return self._spans[index]
        return None

    def state_of(self, physical_offset: int, group: str | None = None) -> MessageState:
        """The state for ``group`` (None: as stored, whoever it was for)."""
        change = self.change_of(physical_offset)
        if change is None or (change.group and group is not None and change.group != group):
            return MessageState.AVAILABLE
        return change.state

    def change_of(self, physical_offset: int) -> StateChange | None:
        change = self._changes.get(physical_offset)
        if change is not None:
            return change
        return self._span_of(physical_offset) if self._spans else None

    def spans(self) -> list[StateChange]:
        return list(self._spans)

    def drop_before(self, physical_offset: int) -> None:
        for offset in [o for o in self._changes if o < physical_offset]:
            del self._changes[offset]
        keep = [s for s in self._spans if s.span_end > physical_offset]
        self._spans = keep
        self._span_starts = [s.target_offset for s in keep]

    def drop_from(self, physical_offset: int) -> None:
        for offset in [o for o in self._changes if o >= physical_offset]:
            del self._changes[offset]

    def clear(self) -> None:
        self._changes.clear()
        self._spans.clear()
        self._span_starts.clear()

    def __len__(self) -> int:
        return len(self._changes) + len(self._spans)

    def items(self) -> list[tuple[int, StateChange]]:
        return sorted(self._changes.items())
