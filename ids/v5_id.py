"""5.x message ID (rocketmq-clients ``MessageIdCodec``): 17 bytes, 34 uppercase hex chars.

Layout, big-endian:

    version 0x01 (1) | MAC (6) | pid low 16 bits (2) | seconds since 2021-01-01Z, low 32 bits (4) | sequence (4)

The ID is made by the client and carried as the message ID; IDs from older clients are
"version 0" (anything not 34 chars long).

Uniqueness of `V5IdGenerator`: the 32-bit sequence counts up per generator and the seconds field
never goes backwards (a clock that goes backwards keeps the last second). When the sequence wraps
to 0 the seconds field moves to at least last second + 1, so every ID of the new round has a
larger second than every ID of the previous round and (seconds, sequence) never repeats. After
``os.fork()`` a child re-reads an un-pinned pid.

Remaining theoretical limits: uniqueness is per generator. Two generators in one process with the
same MAC and pid (e.g. two instances, or a pinned pid) repeat each other's IDs; share one instance.
Across processes, IDs repeat if the MAC and the low 16 bits of the pid match (pid reuse after a
restart within the same second, pids 65536 apart, a random MAC from ``uuid.getnode()`` colliding).
The seconds field wraps in 2157, so decoded dates after that are 2**32 s too early.
"""

from __future__ import annotations

import os
import threading
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pocketmq.ids._common import parse_hex, wall_clock_ms
from pocketmq.ids.errors import InvalidMessageIdError

__all__ = [
    "V5_EPOCH",
    "V5_EPOCH_SECONDS",
    "V5_ID_LENGTH",
    "V5_VERSION",
    "V5IdGenerator",
    "V5MessageId",
    "decode_v5_id",
    "encode_v5_id",
    "format_mac",
    "pack_mac",
    "v5_seconds",
]

V5_VERSION = 0x01
V5_ID_LENGTH = 34
V5_EPOCH = datetime(2021, 1, 1, tzinfo=UTC)
V5_EPOCH_SECONDS = 1_609_459_200  # V5_EPOCH as Unix seconds
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF

MacLike = str | bytes | int


def pack_mac(mac: MacLike) -> bytes:
    """6-byte MAC from "56:F7:E7:1C:36:1B" / "56-F7-..." / 12 hex chars, 6 bytes, or a 48-bit int
    (as returned by uuid.getnode())."""
    if isinstance(mac, bytes):
        if len(mac) != 6:
            raise ValueError(f"MAC must be 6 bytes, got {len(mac)}")
        return mac
    if isinstance(mac, int):
        if not 0 <= mac < 1 << 48:
            raise ValueError(f"MAC out of 48-bit range: {mac}")
        return mac.to_bytes(6, "big")
    digits = mac.replace(":", "").replace("-", "")
    if len(digits) != 12 or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise ValueError(f"not a MAC address: {mac!r}")
    return bytes.fromhex(digits)


def format_mac(packed: bytes) -> str:
    """ "56:F7:E7:1C:36:1B" form of a 6-byte MAC."""
    return ":".join(f"{b:02X}" for b in packed)


def v5_seconds(epoch_ms: int) -> int:
    """Seconds since 2021-01-01T00:00:00Z (not yet cut to 32 bits) for an epoch-ms instant."""
    return epoch_ms // 1000 - V5_EPOCH_SECONDS


@dataclass(frozen=True, slots=True)
class V5MessageId:
    """A decoded 5.x message ID; time is UTC."""

    version: int
    mac: str
    pid: int
    seconds: int
    time: datetime
    sequence: int


def encode_v5_id(mac: MacLike, pid: int, seconds: int, sequence: int) -> str:
    """Encode a 5.x ID. pid and seconds keep their low 16 / 32 bits, as the 5.x clients do."""
    if pid < 0:
        raise ValueError(f"pid must not be negative: {pid}")
    if not 0 <= sequence <= _U32:
        raise ValueError(f"sequence out of range: {sequence}")
    return f"01{pack_mac(mac).hex().upper()}{pid & _U16:04X}{seconds & _U32:08X}{sequence:08X}"


def decode_v5_id(text: str) -> V5MessageId:
    """Decode a 34-char 5.x ID (case-insensitive)."""
    raw = parse_hex(text, (V5_ID_LENGTH,), "5.x message ID")
    if raw[0] != V5_VERSION:
        raise InvalidMessageIdError(
            f"bad version byte 0x{raw[0]:02X} in 5.x message ID (want 0x01)"
        )
    seconds = int.from_bytes(raw[9:13], "big")
    return V5MessageId(
        version=raw[0],
        mac=format_mac(raw[1:7]),
        pid=int.from_bytes(raw[7:9], "big"),
        seconds=seconds,
        time=V5_EPOCH + timedelta(seconds=seconds),
        sequence=int.from_bytes(raw[13:17], "big"),
    )


_live_generators: weakref.WeakSet[V5IdGenerator] = weakref.WeakSet()


class _Sequence:
    """The sequence and last second behind IDs with one prefix (MAC and pid)."""

    __slots__ = ("last_s", "lock", "seq")

    def __init__(self, first: int = 0) -> None:
        self.lock = threading.Lock()
        self.seq = first
        self.last_s = -(1 << 62)


# Generators with the same prefix draw from one sequence, as the 5.x clients' one per process:
# two producers in one process would otherwise hand out the same IDs in the same second.
_shared: dict[str, _Sequence] = {}
_shared_lock = threading.Lock()


def _shared_sequence(prefix: str) -> _Sequence:
    with _shared_lock:
        sequence = _shared.get(prefix)
        if sequence is None:
            sequence = _shared[prefix] = _Sequence()
        return sequence


class V5IdGenerator:
    """Thread-safe 5.x ID generator that never repeats an ID of its own.

    mac: default uuid.getnode(). pid: default os.getpid(). now_ms: time source in epoch ms.
    first_sequence: where the sequence starts (the clients start at 0; tests use it to reach
    the wrap-around quickly). With the default 0, every generator of the process with the same
    MAC and pid shares one sequence, so no two of them give the same ID; another value gives
    this generator a sequence of its own, as ``private=True`` does (a seeded client's: the
    same IDs in every run of one process, since no other generator advanced its sequence).
    """

    def __init__(
        self,
        mac: MacLike | None = None,
        pid: int | None = None,
        *,
        now_ms: Callable[[], int] = wall_clock_ms,
        first_sequence: int = 0,
        private: bool = False,
    ) -> None:
        if pid is not None and pid < 0:
            raise ValueError(f"pid must not be negative: {pid}")
        if not 0 <= first_sequence <= _U32:
            raise ValueError(f"first_sequence out of range: {first_sequence}")
        self._mac_hex = pack_mac(uuid.getnode() if mac is None else mac).hex().upper()
        self._pid_pinned = pid is not None
        self._now_ms = now_ms
        self._private = private or first_sequence != 0
        self._state = _Sequence(first_sequence)
        self._set_pid(os.getpid() if pid is None else pid)
        _live_generators.add(self)

    def _set_pid(self, pid: int) -> None:
        self._prefix = f"01{self._mac_hex}{pid & _U16:04X}"
        self._head: tuple[int | None, str] = (None, "")  # seconds, prefix + seconds in hex
        if not self._private:
            self._state = _shared_sequence(self._prefix)

    def next_id(self) -> str:
        """A new 5.x message ID."""
        state = self._state
        with state.lock:
            s = self._now_ms() // 1000 - V5_EPOCH_SECONDS
            if s < state.last_s:  # clock went backwards: keep the last second
                s = state.last_s
            seq = state.seq
            if seq > _U32:  # sequence wrapped: a new round must be in a later second
                seq = 0
                if s <= state.last_s:
                    s = state.last_s + 1
            state.seq = seq + 1
            state.last_s = s
            head = self._head
            if head[0] != s:
                head = self._head = (s, f"{self._prefix}{s & _U32:08X}")
        return f"{head[1]}{seq:08X}"

    def _after_fork(self) -> None:
        if self._private:
            self._state.lock = threading.Lock()
        if not self._pid_pinned:
            self._set_pid(os.getpid())
        elif not self._private:
            self._state = _shared_sequence(self._prefix)


def _after_fork_in_child() -> None:
    global _shared_lock
    _shared_lock = threading.Lock()  # a lock held by another thread at fork stays held
    for sequence in _shared.values():
        sequence.lock = threading.Lock()
    for gen in list(_live_generators):
        gen._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
