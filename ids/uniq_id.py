"""4.x client unique message ID (the ``UNIQ_KEY`` property; ``SendResult.msgId`` in 4.x clients).

Layout, big-endian, shown as uppercase hex (32 chars for IPv4, 56 for IPv6):

    IP (4 / 16 bytes) | pid (low 16 bits) | discriminator (4) | month time (4) | counter (2)

RocketMQ fills the discriminator with its class loader's hash code; the time field is the
milliseconds since the start of the current month in the producer's *local* time zone, so
decoding it back to a date is only approximate (the "nearly time" rule, `nearly_time_ms`).

Uniqueness of `UniqIdGenerator` (a stated goal; RocketMQ's own generator repeats IDs once the
month-relative time field restarts, which the 5.x design document complains about):

* within one discriminator, (time, counter) strictly increases: a clock that stands still or
  goes backwards keeps the last time, and a 16-bit counter that wraps inside one millisecond
  pushes the time field 1 ms ahead instead of repeating;
* when the month changes (the time field restarts) the discriminator is re-drawn at random,
  different from every discriminator drawn or given so far in this process (all generators
  share that registry), so IDs of different months differ;
* after ``os.fork()`` a child re-draws its discriminator (and re-reads an un-pinned pid).

Remaining theoretical limits: IDs are unique per process, not globally. Two processes can
collide only if they share IP and the low 16 bits of the pid and draw the same random 32-bit
discriminator in overlapping months (about 2**-32 per pair and month). A discriminator passed
in by the caller is trusted as given. Borrowed milliseconds can push the time field past the
month's end; if it would overflow 32 bits (after ~1e14 IDs in one month) a new discriminator is
drawn. The nearly-time decode is off by the borrowed milliseconds.
"""

from __future__ import annotations

import os
import random
import secrets
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo

from pocketmq.ids._common import IpLike, format_ip, pack_ip, parse_hex, wall_clock_ms

__all__ = [
    "UNIQ_ID_LENGTHS",
    "UniqId",
    "UniqIdGenerator",
    "decode_uniq_id",
    "encode_uniq_id",
    "month_relative_ms",
    "month_start_ms",
    "nearly_time_ms",
]

UNIQ_ID_LENGTHS = (32, 56)
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF


def _month_start_of(year: int, month: int, tz: tzinfo | None) -> int:
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    # A naive datetime's timestamp() is taken in the system local zone, which is what tz=None means.
    return round(datetime(year, month, 1, tzinfo=tz).timestamp()) * 1000


def _year_month(epoch_ms: int, tz: tzinfo | None) -> tuple[int, int]:
    dt = datetime.fromtimestamp(epoch_ms // 1000, tz)
    return dt.year, dt.month


def month_start_ms(epoch_ms: int, tz: tzinfo | None = None, *, months: int = 0) -> int:
    """Epoch ms of local midnight on the 1st of epoch_ms's month in tz (None: system zone),
    shifted by `months` whole months."""
    year, month = _year_month(epoch_ms, tz)
    return _month_start_of(year, month + months, tz)


def month_relative_ms(epoch_ms: int, tz: tzinfo | None = None) -> int:
    """The UNIQ_KEY time field for an instant: ms since the start of its month in tz."""
    return epoch_ms - month_start_ms(epoch_ms, tz)


def nearly_time_ms(month_ms: int, now_ms: int, tz: tzinfo | None = None) -> int:
    """RocketMQ's "nearly time" rule: month_ms after the start of now's month, or of the
    previous month if that would not be before now. Exact only if the ID was made less than
    a month before now (more precisely: after now's position in the previous month)."""
    start = month_start_ms(now_ms, tz)
    if start + month_ms >= now_ms:
        start = month_start_ms(now_ms, tz, months=-1)
    return start + month_ms


def _aware(epoch_ms: int, tz: tzinfo | None) -> datetime:
    dt = datetime.fromtimestamp(epoch_ms // 1000, tz).replace(microsecond=epoch_ms % 1000 * 1000)
    return dt if tz is not None else dt.astimezone()


@dataclass(frozen=True, slots=True)
class UniqId:
    """A decoded UNIQ_KEY. nearly_time is aware, in the zone used for decoding."""

    ip: str
    ip_version: int
    pid: int
    discriminator: int
    month_ms: int
    counter: int
    nearly_time_ms: int
    nearly_time: datetime


def encode_uniq_id(ip: IpLike, pid: int, discriminator: int, month_ms: int, counter: int) -> str:
    """Encode a UNIQ_KEY. pid keeps its low 16 bits (as RocketMQ does); discriminator may be a
    signed Java int or an unsigned 32-bit value."""
    if pid < 0:
        raise ValueError(f"pid must not be negative: {pid}")
    if not -(1 << 31) <= discriminator <= _U32:
        raise ValueError(f"discriminator out of 32-bit range: {discriminator}")
    if not 0 <= month_ms <= _U32:
        raise ValueError(f"month_ms out of range: {month_ms}")
    if not 0 <= counter <= _U16:
        raise ValueError(f"counter out of range: {counter}")
    packed = pack_ip(ip)
    return f"{packed.hex().upper()}{pid & _U16:04X}{discriminator & _U32:08X}{month_ms:08X}{counter:04X}"


def decode_uniq_id(text: str, *, now_ms: int | None = None, tz: tzinfo | None = None) -> UniqId:
    """Decode a 32/56-char UNIQ_KEY (case-insensitive). now_ms (default: wall clock) and tz
    (default: system local zone) feed the nearly-time rule; use the producer's zone."""
    raw = parse_hex(text, UNIQ_ID_LENGTHS, "4.x unique message ID")
    ip_len = 4 if len(raw) == 16 else 16
    rest = raw[ip_len:]
    month_ms = int.from_bytes(rest[6:10], "big")  # unsigned: a 31-day month overflows a Java int
    now = wall_clock_ms() if now_ms is None else now_ms
    nearly = nearly_time_ms(month_ms, now, tz)
    return UniqId(
        ip=format_ip(raw[:ip_len]),
        ip_version=4 if ip_len == 4 else 6,
        pid=int.from_bytes(rest[0:2], "big"),
        discriminator=int.from_bytes(rest[2:6], "big"),
        month_ms=month_ms,
        counter=int.from_bytes(rest[10:12], "big"),
        nearly_time_ms=nearly,
        nearly_time=_aware(nearly, tz),
    )


# Every discriminator drawn or given in this process, so no two months/generators share one.
_used_discriminators: set[int] = set()
_registry_lock = threading.Lock()
_live_generators: weakref.WeakSet[UniqIdGenerator] = weakref.WeakSet()


def _claim(discriminator: int | None) -> int:
    with _registry_lock:
        if discriminator is None:
            discriminator = secrets.randbits(32)
            while discriminator in _used_discriminators:
                discriminator = secrets.randbits(32)
        _used_discriminators.add(discriminator)
        return discriminator


class UniqIdGenerator:
    """Thread-safe UNIQ_KEY generator that never repeats an ID within the process.

    ip: the producer's address (default 127.0.0.1; pass the real one, this package does not
    touch sockets). pid: default os.getpid(). discriminator: the first 4-byte discriminator
    (default random). now_ms: time source in epoch ms. tz: zone of the month-relative time
    field (default: system local zone, as RocketMQ's JVM default). rng: draw discriminators
    from it (a seeded, repeatable run) instead of at random, unique in the process.
    """

    def __init__(
        self,
        ip: IpLike = "127.0.0.1",
        pid: int | None = None,
        discriminator: int | None = None,
        *,
        now_ms: Callable[[], int] = wall_clock_ms,
        tz: tzinfo | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if discriminator is not None and not -(1 << 31) <= discriminator <= _U32:
            raise ValueError(f"discriminator out of 32-bit range: {discriminator}")
        if pid is not None and pid < 0:
            raise ValueError(f"pid must not be negative: {pid}")
        self._ip_hex = pack_ip(ip).hex().upper()
        self._pid_pinned = pid is not None
        self._pid = (os.getpid() if pid is None else pid) & _U16
        self._now_ms = now_ms
        self._tz = tz
        self._lock = threading.Lock()
        # Seeded (rng): discriminators drawn from it, the same in every run, and not checked
        # against the others of this process (a repeated run repeats its IDs on purpose).
        self._rng = rng
        self._discriminator = self._draw(None if discriminator is None else discriminator & _U32)
        self._fresh = True  # the first month keeps the initial discriminator
        self._month_ms = 0
        self._next_month_ms = -(1 << 62)  # forces a month setup on the first call
        self._last_t = -1
        self._counter = 0
        self._prefix = ""
        _live_generators.add(self)

    @property
    def discriminator(self) -> int:
        """The discriminator currently in use."""
        return self._discriminator

    def _start_epoch(self, now: int) -> None:
        # A new month (or an exhausted time field): new discriminator, time field from scratch.
        if not self._fresh:
            self._discriminator = self._draw(None)
        self._fresh = False
        year, month = _year_month(now, self._tz)
        self._month_ms = _month_start_of(year, month, self._tz)
        self._next_month_ms = _month_start_of(year, month + 1, self._tz)
        self._last_t = -1
        self._counter = 0
        self._prefix = f"{self._ip_hex}{self._pid:04X}{self._discriminator:08X}"

    def _draw(self, discriminator: int | None) -> int:
        if self._rng is None:
            return _claim(discriminator)
        return self._rng.getrandbits(32) if discriminator is None else discriminator

    def next_id(self) -> str:
        """A new UNIQ_KEY."""
        with self._lock:
            now = self._now_ms()
            if now >= self._next_month_ms:
                self._start_epoch(now)
            t = now - self._month_ms
            if t > self._last_t:
                counter = 0
            else:  # same ms or clock went backwards: stay on the last time
                t = self._last_t
                counter = self._counter + 1
                if counter > _U16:  # counter wrapped inside one ms: borrow the next ms
                    t += 1
                    counter = 0
                    if t > _U32:
                        self._start_epoch(now)
                        t = now - self._month_ms
            self._last_t = t
            self._counter = counter
            prefix = self._prefix
        return f"{prefix}{t:08X}{counter:04X}"

    def _after_fork(self) -> None:
        # The parent keeps its discriminator, so the child must not reuse it.
        self._lock = threading.Lock()
        if not self._pid_pinned:
            self._pid = os.getpid() & _U16
        self._fresh = False
        self._next_month_ms = -(1 << 62)


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for gen in list(_live_generators):
        gen._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
