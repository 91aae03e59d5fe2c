"""GET_BROKER_CONFIG (26) and UPDATE_BROKER_CONFIG (25), as RocketMQ's AdminBrokerProcessor.

GET answers every setting as properties text (``key=value`` lines sorted by key, RocketMQ's
names and units: ``broker/config_properties.py``) and the ``version`` header field (a
DataVersion, counted up by each update). UPDATE takes a properties body and changes the settings
that can change while the broker runs (``Setting.live``); RocketMQ refuses the keys of its
``configBlackList`` with NO_PERMISSION "Can not update config in black list.", pocketmq does so
for every key that only takes effect at a start, naming them. An update is all or nothing: an
unknown key or a bad value refuses the whole body (RocketMQ skips unknown keys silently). When
the broker was started with a config file (``brokerConfigPath``), the changes are saved into it,
as RocketMQ saves its broker.conf, comments and other lines kept.
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from typing import Any

import msgspec

from pocketmq.broker.config_properties import (
    Setting,
    config_properties,
    field_value,
    find_setting,
    rewrite_config_file,
)
from pocketmq.broker.core import BrokerCore
from pocketmq.broker.protocol import RemotingCommand, ResponseCode
from pocketmq.broker.protocol.headers import DataVersion
from pocketmq.broker.protocol.properties import (
    PropertiesSyntaxError,
    format_properties,
    parse_entries,
)
from pocketmq.broker.remoting.server import Connection
from pocketmq.store.topics import AUTO_CREATE_TOPIC

__all__ = ["handle_get_broker_config", "handle_update_broker_config"]

log = logging.getLogger("pocketmq.broker")

_BODY_SIZE_MAX = 64 * 1024  # a few settings; RocketMQ's whole config is under 16 KiB
_versions: weakref.WeakKeyDictionary[BrokerCore, DataVersion] = weakref.WeakKeyDictionary()


def _version(broker: BrokerCore) -> DataVersion:
    return _versions.setdefault(broker, DataVersion(timestamp=broker.now_ms()))


def handle_get_broker_config(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    body = format_properties(config_properties(broker.config)).encode()
    response = request.make_response(ResponseCode.SUCCESS, body=body)
    response.ext_fields = {"version": msgspec.json.encode(_version(broker)).decode()}
    return response


def _read_update(text: str) -> tuple[dict[Setting, Any], str | None]:
    """Setting -> new value, or the remark refusing the whole body."""
    try:
        entries = parse_entries(text)
    except PropertiesSyntaxError as error:
        return {}, f"bad properties body: {error}"
    changes: dict[Setting, Any] = {}
    unknown, fixed, bad = [], [], []
    for entry in entries:
        setting = find_setting(entry.key)
        if setting is None:
            unknown.append(entry.key)
        elif not setting.live:
            fixed.append(entry.key)
        else:
            try:
                changes[setting] = setting.kind.parse(entry.value)
            except ValueError as error:
                bad.append(f"{entry.key}: {error}")
    if fixed:
        return {}, (
            "Can not update config in black list: " + ", ".join(fixed) + " (they take effect "
            "only at a start: change the config file and restart)"
        )
    if unknown or bad:
        parts = [f"unknown keys: {', '.join(unknown)}"] if unknown else []
        return {}, "; ".join(parts + bad)
    return changes, None


def handle_update_broker_config(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    if not request.body:
        return request.make_response(ResponseCode.SUCCESS)  # RocketMQ: nothing to do
    if len(request.body) > _BODY_SIZE_MAX:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, f"body of {len(request.body)} bytes, over {_BODY_SIZE_MAX}"
        )
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError as error:
        return request.make_response(ResponseCode.SYSTEM_ERROR, f"body not UTF-8: {error}")
    changes, remark = _read_update(text)
    if remark is not None:
        code = ResponseCode.NO_PERMISSION if "black list" in remark else ResponseCode.SYSTEM_ERROR
        log.warning("UPDATE_BROKER_CONFIG from %s refused: %s", connection.remote_address, remark)
        return request.make_response(code, remark)
    if not changes:  # only comments: nothing to do, as in RocketMQ
        return request.make_response(ResponseCode.SUCCESS)
    shown = []
    for setting, value in changes.items():
        assert "." not in setting.field, setting  # live settings are BrokerConfig's own
        old = setting.kind.format(field_value(broker.config, setting.field))
        setattr(broker.config, setting.field, value)
        shown.append(f"{setting.key} {old} -> {setting.kind.format(value)}")
    _apply(broker, {setting.field for setting in changes})
    version = _version(broker)
    _versions[broker] = DataVersion(
        timestamp=broker.now_ms(), counter=version.counter + 1, state_version=version.state_version
    )
    saved = _save(broker, changes)
    log.info(
        "broker config updated by %s: %s%s", connection.remote_address, ", ".join(shown), saved
    )
    return request.make_response(ResponseCode.SUCCESS)


def _save(broker: BrokerCore, changes: dict[Setting, Any]) -> str:
    """Write the changes into the config file, if any; what to add to the log line."""
    path = broker.config.config_file
    if path is None:
        return " (no config file: until the stop)"
    try:
        rewrite_config_file(path, {s.key: s.kind.format(v) for s, v in changes.items()})
    except OSError as error:
        # The change holds in memory; the operator learns that the file does not have it.
        log.warning("broker config change not saved to %s: %s", path, error)
        return f" (NOT saved to {path}: {error.strerror or error})"
    return f"; saved to {path}"


def _apply(broker: BrokerCore, fields: set[str]) -> None:
    """Hand the new values to the services that copied them at the start (the others read
    ``broker.config`` each time)."""
    config = broker.config
    broker.topics.auto_create = config.auto_create_topic
    broker.topics.default_queue_nums = config.default_topic_queue_nums
    if "auto_create_topic" in fields and config.auto_create_topic:
        if broker.topics.get(AUTO_CREATE_TOPIC) is None:
            # producers fall back to its route for a topic the name server does not know
            broker.topics.create(AUTO_CREATE_TOPIC, perm=7)
    broker.groups.auto_create = config.auto_create_subscription_group
    broker.holds.holds_max = config.long_poll_holds_max
    broker.locks.expiry_ms = config.lock_expiry_ms
    broker.flush.interval_ms = config.flush_interval_ms
    broker.flush.metadata_interval_ms = config.flush_all_interval_ms
    broker.flush.timeout_ms = config.sync_flush_timeout_ms
    broker.transactions.timeout_ms = config.transaction_timeout_ms
    broker.transactions.check_interval_ms = config.transaction_check_interval_ms
    broker.transactions.check_max = config.transaction_check_max
    broker.timer.max_delay_ms = config.timer_max_delay_ms
    broker.pop.in_flight_max = config.pop_in_flight_max
    broker.pulls.property_filter = config.property_filter
    broker.retention.policy = dataclasses.replace(
        broker.retention.policy,
        file_reserved_time_ms=int(config.file_reserved_time_h * 3_600_000),
        delete_when=config.delete_when,
        disk_max_used_space_ratio=config.disk_max_used_space_ratio,
        disk_space_clean_forcibly_ratio=config.disk_space_clean_forcibly_ratio,
        disk_space_warning_level_ratio=config.disk_space_warning_level_ratio,
        delete_file_batch_max=config.delete_file_batch_max,
        clean_file_forcibly=config.clean_file_forcibly,
    )
    broker.send.disk.warning_ratio = broker.retention.policy.warning_ratio
    if "broker_permission" in fields and broker.topics.on_change is not None:
        broker.topics.on_change()  # register again now, as RocketMQ does for brokerPermission
