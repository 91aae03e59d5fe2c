"""The ``pocketmq`` command line (``pocketmq --help``; every command in docs/cli.md).

Servers: ``standalone``, ``namesrv``, ``broker``. Through the SDK (brokers found through the
name server, ``--namesrv``; ``--broker`` picks one): ``send``, ``consume``, ``topic``,
``group``, ``time`` (the manual clock), ``msg``, ``dlq``, ``tx``. Offline: ``id decode``,
``store inspect``, ``export``.

Exit status: 0 on success; 1 when the broker refused, a server or broker cannot be reached, an
SDK error happened, or ``store inspect`` found damage; 2 for a usage error (a wrong argument or
environment variable, an ID that fits no scheme, a folder that is not a store); 130 when
interrupted. Whatever the user typed, the answer is a one-line error, never a traceback
(``POCKETMQ_DEBUG=1`` adds the traceback of an unexpected error).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence

from .errors import UsageError
from .parser import build_parser

__all__ = ["build_parser", "main"]

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(default: str, flag: str | None = None) -> int:
    """``--log-level`` (``flag``), else ``$POCKETMQ_LOG_LEVEL``, in any case (``debug``,
    ``Info``...), else ``default``."""
    text = flag or os.environ.get("POCKETMQ_LOG_LEVEL", "").strip() or default
    name = text.upper()
    if name == "WARN":
        name = "WARNING"
    if name not in _LEVELS:
        raise UsageError(
            f"POCKETMQ_LOG_LEVEL={text!r} is not a log level; use one of {', '.join(_LEVELS)}"
        )
    return logging.getLevelNamesMapping()[name]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(
            level=log_level(
                "INFO" if getattr(args, "server", False) else "WARNING",
                getattr(args, "log_level", None),
            ),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        return int(args.handler(args))
    except UsageError as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `pocketmq ... | head`: the reader is gone; say nothing more on that pipe (the
        # interpreter's last flush would fail again).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # noqa: BLE001 - the last line of defence: one line, no traceback
        print(f"{parser.prog}: unexpected error: {type(error).__name__}: {error}", file=sys.stderr)
        if os.environ.get("POCKETMQ_DEBUG"):
            traceback.print_exc()
        else:
            print(
                f"{parser.prog}: (please report it; POCKETMQ_DEBUG=1 shows the traceback)",
                file=sys.stderr,
            )
        return 1
