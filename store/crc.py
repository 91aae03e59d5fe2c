"""The CRC-32 of every hot path (record body, whole record, recovery scan).

The function is zlib's CRC-32 (the polynomial of Java's ``java.util.zip.CRC32``, which RocketMQ
uses), taken from ISA-L (the ``isal`` package) when it is installed: its folded carry-less
multiply runs about seven times faster than zlib 1.2's table loop on a 1 KiB body on this
machine (``python bench/crc.py``) and gives the same values. Without ``isal``, ``zlib.crc32``.
crcmod stays the reference the property tests compare both against.
"""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - isal has wheels for the platforms we support
    from zlib import crc32

__all__ = ["crc32"]
