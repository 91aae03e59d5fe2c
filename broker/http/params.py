"""Reading a request's parameters and JSON body, each refusal a 400 that says what and where."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from pocketmq.broker.http.errors import ApiError

__all__ = ["BODY_MAX", "int_param", "json_body", "opt_str", "path_int"]

BODY_MAX = 64 * 1024  # bytes of a request body (aiohttp answers 413 above)


def int_param(
    request: web.Request, name: str, default: int | None, low: int, high: int
) -> int | None:
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"query parameter {name}={text!r} is not an integer") from None
    if not low <= value <= high:
        raise ApiError(400, f"query parameter {name}={value} is out of range [{low}, {high}]")
    return value


def path_int(request: web.Request, name: str, low: int = 0, high: int = (1 << 63) - 1) -> int:
    text = request.match_info[name]
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"path segment {name} {text!r} is not an integer") from None
    if not low <= value <= high:
        raise ApiError(400, f"path segment {name}={value} is out of range [{low}, {high}]")
    return value


def opt_str(request: web.Request, name: str) -> str | None:
    text = request.query.get(name)
    return text if text else None


async def json_body(request: web.Request, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object; an empty body is ``{}`` unless ``required``."""
    raw = await request.read()  # bounded by the application's client_max_size
    if not raw:
        if required:
            raise ApiError(400, "a JSON object body is needed")
        return {}
    if request.content_type not in ("application/json", "application/octet-stream", ""):
        raise ApiError(415, f"the body must be application/json, not {request.content_type}")
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(400, f"the body is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise ApiError(400, f"the body must be a JSON object, not {type(value).__name__}")
    return value


def body_field(body: dict[str, Any], name: str, kind: type, default: Any = ...) -> Any:
    """``body[name]`` checked to be a ``kind``; a missing field takes ``default`` or is a 400."""
    if name not in body or body[name] is None:
        if default is ...:
            raise ApiError(400, f"body field {name!r} is missing")
        return default
    value = body[name]
    # bool is an int in Python: a flag is not a count, nor a count a flag.
    if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
        raise ApiError(400, f"body field {name!r} must be {kind.__name__}, got {value!r:.80}")
    return value
