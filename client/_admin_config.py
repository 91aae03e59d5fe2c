"""A broker's settings through the SDK: GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG (25),
mixed into ``Admin``::

    settings = await admin.broker_config()            # {broker name: {key: value}}
    print(settings["broker-a"]["fileReservedTime"])   # RocketMQ's names and units
    await admin.update_broker_config({"fileReservedTime": 24, "autoCreateTopicEnable": False})

Keys are RocketMQ's (docs/configuration.md lists them); the broker refuses a key that only
takes effect at a start with ``NoPermissionError`` naming it, and an unknown key or a bad value
with ``BrokerSystemError``; nothing is changed then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.properties import format_properties, parse_properties

from .connection import check_response, make_request
from .errors import ClientUsageError, UnknownBrokerError

__all__ = ["AdminConfigMixin"]

_CONFIG_TIMEOUT_MS = 10_000  # an update may write the broker's config file


def _text(key: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ClientUsageError(f"{key}: a setting is a str, int, float or bool, not {value!r}")


class AdminConfigMixin:
    """GET/UPDATE_BROKER_CONFIG for ``Admin`` (which provides ``_check_open``, ``_targets``
    and ``_core``)."""

    if TYPE_CHECKING:
        _core: Any

        def _check_open(self) -> None: ...

        async def _targets(self, broker: str | None) -> dict[str, str]: ...

    async def broker_config(self, *, broker: str | None = None) -> dict[str, dict[str, str]]:
        """Each master broker's settings (or ``broker``'s: a name or "host:port") as RocketMQ's
        GET_BROKER_CONFIG answers them: broker name -> {key: value}, values as text."""
        self._check_open()
        out = {}
        for name, addr in (await self._targets(broker)).items():
            request = make_request(RequestCode.GET_BROKER_CONFIG)
            response = check_response(await self._core.invoke(addr, request, _CONFIG_TIMEOUT_MS))
            try:
                out[name] = parse_properties((response.body or b"").decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as error:
                raise UnknownBrokerError(
                    response.code, f"malformed config from {addr}: {error}"
                ) from None
        return out

    async def update_broker_config(
        self, settings: Mapping[str, object], *, broker: str | None = None
    ) -> list[str]:
        """Change settings on each master broker (or on ``broker``) while it runs; returns the
        brokers changed. A broker started with a config file saves the change into it."""
        self._check_open()
        if not settings:
            raise ClientUsageError("settings: name at least one key")
        body = format_properties((key, _text(key, value)) for key, value in settings.items())
        changed = []
        for name, addr in (await self._targets(broker)).items():
            request = make_request(RequestCode.UPDATE_BROKER_CONFIG, body=body.encode())
            check_response(await self._core.invoke(addr, request, _CONFIG_TIMEOUT_MS))
            changed.append(name)
        return changed
