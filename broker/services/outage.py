"""Saying once that a piece of work keeps failing, and once that it works again.

On a full or read-only disk the same write fails every few seconds (the periodic saves) or once
per message (deliveries, copies stored for clients); a WARNING with a traceback for each one
buried the line that mattered. An :class:`Outage` logs one WARNING when the work starts failing,
with what failed, why, and what happens meanwhile; nothing more while it fails the same way; and
one INFO when it works again, with how many attempts failed. An ``OSError`` (ENOSPC, EROFS) is
logged without a traceback, the disk's message says it all; any other error keeps its
traceback, as that is a bug.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["Outage"]

log = logging.getLogger("pocketmq.broker")


class Outage:
    """The state of one piece of work that may fail for a while (see the module)."""

    def __init__(self, what: str, meanwhile: str) -> None:
        self.what = what  # "saving consumer offsets"
        self.meanwhile = meanwhile  # "they stay in memory and are saved once the disk has room"
        self.failures = 0  # attempts failed in the current episode
        self._reason: object = None  # the errno (or exception type) last announced

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def failed(self, error: Exception) -> None:
        """An attempt failed: a WARNING when an episode starts or its reason changes."""
        self.failures += 1
        # StoreFullError (the guard's refusal) and the disk's own ENOSPC share errno 28: one
        # reason, not two WARNINGs.
        reason = error.errno if isinstance(error, OSError) else type(error)
        if reason == self._reason:
            return
        self._reason = reason
        if isinstance(error, OSError):
            log.warning("%s failed: %s; %s", self.what, error, self.meanwhile)
        else:
            log.warning("%s failed; %s", self.what, self.meanwhile, exc_info=error)

    def worked(self) -> None:
        """An attempt succeeded: an INFO when it ends an episode."""
        if not self.failures:
            return
        log.info("%s works again (%d attempts failed)", self.what, self.failures)
        self.failures = 0
        self._reason = None

    def run(self, work: Callable[[], object]) -> bool:
        """Run ``work``, noting its outcome; True when it worked. For periodic work, whose next
        run is the retry."""
        try:
            work()
        except Exception as error:
            self.failed(error)
            return False
        self.worked()
        return True
