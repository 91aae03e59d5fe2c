"""The HTTP front's errors: one JSON shape, one table from a service's ``Kind`` to a status.

{"error": {"status": 404, "code": "topic_not_found", "message": "..."}}
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from pocketmq.broker.errors import BrokerError, Kind

__all__ = ["ApiError", "STATUS_OF", "error_middleware", "error_response"]

STATUS_OF: dict[Kind, int] = {
    Kind.BAD_REQUEST: 400,
    Kind.INVALID_PARAMETER: 400,
    Kind.ILLEGAL_TOPIC: 400,
    Kind.ILLEGAL_QUEUE: 400,
    Kind.BAD_SUBSCRIPTION: 400,
    Kind.NO_SUBSCRIPTION: 400,
    Kind.MESSAGE_ILLEGAL: 400,
    Kind.BAD_HANDLE: 400,
    Kind.STALE_HANDLE: 400,
    Kind.ILLEGAL_LITE_TOPIC: 400,
    Kind.TOPIC_NOT_FOUND: 404,
    Kind.GROUP_NOT_FOUND: 404,
    Kind.NOT_FOUND: 404,
    Kind.FORBIDDEN: 403,
    Kind.ILLEGAL_STATE: 409,
    Kind.LITE_TOPIC_QUOTA_EXCEEDED: 429,
    Kind.BUSY: 429,
    Kind.SERVICE_UNAVAILABLE: 503,
    Kind.STORE_FAILED: 500,
}

_CODE_OF_STATUS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    500: "internal_error",
    503: "service_unavailable",
}


class ApiError(Exception):
    """A refusal of the HTTP front itself: a parameter that does not parse, a body too big."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _CODE_OF_STATUS.get(status, "error")


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = {"error": {"status": status, "code": code, "message": message}}
    return web.json_response(body, status=status, headers=headers)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every refusal as JSON: ours, the services', aiohttp's own (no route, wrong method, body
    too large) and, logged with its traceback, anything unexpected as 500."""
    try:
        return await handler(request)
    except ApiError as error:
        return error_response(error.status, error.code, str(error))
    except BrokerError as error:
        status = STATUS_OF.get(error.kind, 400)
        return error_response(status, error.kind.value[0], str(error))
    except web.HTTPException as error:
        if error.status < 400:
            raise
        message = error.text or error.reason
        if error.status == 404:
            message = f"no route {request.method} {request.path}"
        elif error.status == 405:
            message = f"{request.method} is not allowed on {request.path}"
        elif error.status == 413:
            message = f"request body too large: {message}"
        headers = {k: v for k, v in error.headers.items() if k in ("Allow", "WWW-Authenticate")}
        return error_response(
            error.status, _CODE_OF_STATUS.get(error.status, "error"), str(message), headers
        )
    except Exception as error:
        request.app.logger.exception("HTTP %s %s failed", request.method, request.path)
        return error_response(500, "internal_error", f"{type(error).__name__}: {error}")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
