"""Message state (available 1, unavailable 10, poisoned 20, marked for deletion 30).

A state change is never a rewrite: it is a record appended to the system topic
``rmq_sys_MESSAGE_STATE`` (queue 0), whose body is

    offset  size  field
         0     8  target physical offset   the message whose state changes
         8     1  state code               1, 10, 20 or 30
         9     n  reason                   UTF-8 text, may be empty

The table of current states lives in memory (only messages that are not available are kept)
and is rebuilt on recovery by replaying that topic's consume queue.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

__all__ = [
    "STATE_TOPIC",
    "MessageState",
    "StateChange",
    "StateTable",
    "decode_state_body",
    "encode_state_body",
]

STATE_TOPIC = "rmq_sys_MESSAGE_STATE"
_BODY = struct.Struct(">qB")


class MessageState(enum.IntEnum):
    AVAILABLE = 1
    UNAVAILABLE = 10
    POISONED = 20
    MARKED_FOR_DELETION = 30

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class StateChange:
    target_offset: int
    state: MessageState
    reason: str = ""
    changed_at_ms: int = 0


def encode_state_body(target_offset: int, state: MessageState, reason: str = "") -> bytes:
    return _BODY.pack(target_offset, int(state)) + reason.encode("utf-8")


def decode_state_body(body: bytes, changed_at_ms: int = 0) -> StateChange:
    """Raises ValueError on a body that is not a state change."""
    if len(body) < _BODY.size:
        raise ValueError(f"state record body has {len(body)} bytes, needs at least {_BODY.size}")
    target, code = _BODY.unpack_from(body)
    return StateChange(
        target, MessageState(code), body[_BODY.size :].decode("utf-8", "replace"), changed_at_ms
    )


class StateTable:
    """Current state by physical offset; absent means available."""

    def __init__(self) -> None:
        self._changes: dict[int, StateChange] = {}

    def apply(self, change: StateChange) -> None:
        if change.state is MessageState.AVAILABLE:
            self._changes.pop(change.target_offset, None)
        else:
            self._changes[change.target_offset] = change

    def state_of(self, physical_offset: int) -> MessageState:
        change = self._changes.get(physical_offset)
        return MessageState.AVAILABLE if change is None else change.state

    def change_of(self, physical_offset: int) -> StateChange | None:
        return self._changes.get(physical_offset)

    def drop_before(self, physical_offset: int) -> None:
        for offset in [o for o in self._changes if o < physical_offset]:
            del self._changes[offset]

    def drop_from(self, physical_offset: int) -> None:
        for offset in [o for o in self._changes if o >= physical_offset]:
            del self._changes[offset]

    def clear(self) -> None:
        self._changes.clear()

    def __len__(self) -> int:
        return len(self._changes)

    def items(self) -> list[tuple[int, StateChange]]:
        return sorted(self._changes.items())
