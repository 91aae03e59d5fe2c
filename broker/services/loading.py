"""Importing a front's modules when it is first used, off the event loop (``broker/http/lazy.py``,
``broker/grpc/lazy.py``).

An import is CPU work (aiohttp's takes ~0.3 s): in a worker thread the loop keeps its turns
between the import's bytecodes. The imports run one at a time, under one lock: two threads
importing two module trees that import each other could otherwise each wait for the other's
module lock, which Python breaks by raising ``_DeadlockError`` in one of them.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from types import ModuleType

__all__ = ["import_off_loop"]

_one_at_a_time = threading.Lock()


def _import(name: str) -> ModuleType:
    with _one_at_a_time:
        return importlib.import_module(name)


async def import_off_loop(name: str) -> ModuleType:
    """``importlib.import_module(name)`` in a worker thread, one such import at a time."""
    return await asyncio.to_thread(_import, name)
