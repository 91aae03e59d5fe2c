"""Errors raised by the message-ID codecs."""

from __future__ import annotations

__all__ = ["InvalidMessageIdError"]


class InvalidMessageIdError(ValueError):
    """Text that is not a message ID of any known scheme; the message says why in one line."""
