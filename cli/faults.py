"""``pocketmq fault list|inject|clear``: a broker's planned faults, over its HTTP API
(``/api/faults``, ``broker/http/faults.py``), so it reaches any broker started with an HTTP
port (``pocketmq standalone`` serves it on 8082)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .errors import UsageError
from .output import emit

__all__ = ["fault_clear", "fault_inject", "fault_list"]

_TIMEOUT_S = 30.0
_COLUMNS = ("id", "kind", "topic", "times", "left", "fired", "delay_ms", "detail")


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> Any:
    """One request to the broker's HTTP API; its error's message on stderr, exit status 1."""
    # Imported here: urllib.request costs tens of ms, paid by every `pocketmq` command else.
    import json
    import urllib.error
    import urllib.request

    url = f"http://{args.http}{path}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        try:
            message = json.loads(error.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {error.code}"
        raise _Refused(message) from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise _Refused(f"cannot reach the broker's HTTP API at {args.http}: {reason}") from None


class _Refused(Exception):
    pass


def _run(work: Any) -> int:
    try:
        return int(work())
    except _Refused as error:
        print(f"pocketmq: {error}", file=sys.stderr)
        return 1


def fault_list(args: argparse.Namespace) -> int:
    def work() -> int:
        faults = _call(args, "GET", "/api/faults")["faults"]
        if not faults and not args.json:
            print("no faults planned or fired")
            return 0
        emit(faults, as_json=args.json, shape="table", columns=_COLUMNS)
        return 0

    return _run(work)


def fault_inject(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"kind": args.kind}
    if args.times is not None:
        body["times"] = args.times
    if args.topic is not None:
        body["topic"] = args.topic
    if args.delay is not None:
        from pocketmq.store.durations import parse_duration_ms

        try:
            body["delay_ms"] = parse_duration_ms(args.delay)
        except ValueError as error:
            raise UsageError(f"--delay: {error}") from None
    if args.client_id is not None:
        body["client_id"] = args.client_id

    def work() -> int:
        emit([_call(args, "POST", "/api/faults", body)], as_json=args.json)
        return 0

    return _run(work)


def fault_clear(args: argparse.Namespace) -> int:
    path = "/api/faults" if args.id is None else f"/api/faults/{args.id}"

    def work() -> int:
        emit([_call(args, "DELETE", path)], as_json=args.json)
        return 0

    return _run(work)
