"""Giving the heap's free pages back to the system: glibc's ``malloc_trim``.

Start-up and the loading of a front at its first connection (``broker/http/lazy.py``,
``broker/grpc/lazy.py``) free many temporaries (import machinery, sources, recovery buffers).
glibc keeps freed pages resident in its heaps until a later allocation reuses them, which an
idle broker does not make, and a front loaded in a worker thread leaves them in that thread's
own heap (arena), which the event loop never reuses. ``malloc_trim(0)`` releases the free pages
of every arena: about 1.7 MiB at start, 2-3 MiB after a front loads (``bench/idle_rss.py``).
Where libc has no ``malloc_trim`` (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

__all__ = ["release_free_heap"]


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


_trim = _malloc_trim()


def release_free_heap() -> bool:
    """Return the free pages of every malloc arena to the system; whether any was returned
    (False also where there is no ``malloc_trim``)."""
    return bool(_trim(0)) if _trim is not None else False
