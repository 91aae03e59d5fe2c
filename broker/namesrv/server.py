"""The name server: RocketMQ's namesrv requests over the remoting protocol.

``NameServer`` wires a ``RouteInfoManager`` (pure routing tables) to a ``RemotingServer``:

* REGISTER_BROKER (103), UNREGISTER_BROKER (104), QUERY_DATA_VERSION (322): brokers;
* GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106),
  GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_TOPICS_BY_CLUSTER (224): clients and tools;
* DELETE_TOPIC_IN_NAMESRV (216), WIPE/ADD_WRITE_PERM_OF_BROKER (205/327): admin;
* PUT/GET/DELETE_KV_CONFIG (100/101/102), GET_KVLIST_BY_NAMESPACE (219): in-memory KV store.

With a ``guard`` (the broker's ACL, ``broker/services/acl.py``) every request is checked first;
system topics are never deleted (INVALID_PARAMETER), ACL or not.

Bodies are always standard JSON (map keys quoted, as fastjson's BrowserCompatible output);
bodies received may be fastjson's non-standard JSON (unquoted integer keys and so on).

Brokers leave the routes three ways, as in RocketMQ: UNREGISTER_BROKER; the connection they
registered over closes (``BrokerHousekeepingService`` -> ``onChannelDestroy``); or no
re-registration within their timeout (120 s unless the header's ``heartbeatTimeoutMillis``
says otherwise), checked every 10 s, after which their connection is closed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Callable
from ssl import SSLContext
from types import TracebackType
from typing import Final, Self

import msgspec

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.codes import MQVersion
from pocketmq.broker.protocol.errors import MalformedBodyError, MalformedHeaderError
from pocketmq.broker.protocol.headers import (
    DataVersion,
    GetRouteInfoRequestHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    TopicConfigSerializeWrapper,
    UnregisterBrokerRequestHeader,
    decode_json_body,
    encode_json_body,
)
from pocketmq.broker.protocol.topics import system_topic_refusal
from pocketmq.broker.remoting.server import Connection, Handler, RemotingServer, ServerLimits

from ._wire import (
    GET_KVLIST_BY_NAMESPACE,
    NAMESPACE_ORDER_TOPIC_CONFIG,
    AddWritePermOfBrokerRequestHeader,
    AddWritePermOfBrokerResponseHeader,
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVConfigResponseHeader,
    GetKVListByNamespaceRequestHeader,
    GetTopicsByClusterRequestHeader,
    KVTable,
    PutKVConfigRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    TopicList,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
    decode_compressed_register_body,
)
from .routes import RouteInfoManager

__all__ = ["DEFAULT_PORT", "SCAN_INTERVAL_S", "Guard", "NameServer", "serve", "wall_clock_ms"]

log = logging.getLogger("pocketmq.namesrv")

# The access check a name server may be given: None lets the request run, a text refuses it.
Guard = Callable[[RemotingCommand, str], str | None]

DEFAULT_PORT: Final = 9876
SCAN_INTERVAL_S: Final = 10.0  # RocketMQ scans for inactive brokers every 10 s


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _java_crc32(data: bytes) -> int:
    """``UtilAll.crc32``: CRC-32 masked to 31 bits."""
    return zlib.crc32(data) & 0x7FFFFFFF


def _signed32(value: int) -> int:
    # also accept the unmasked CRC as a Java int, from peers that skip the mask
    return value - (1 << 32) if value >= 1 << 31 else value


class NameServer:
    """An asyncio name server. ``async with NameServer(port=0) as ns: ... ns.port``.

    ``clock`` returns epoch milliseconds; a manual clock plus ``scan()`` tests expiry without
    waiting. ``scan_interval_s`` is how often the background task calls ``scan()`` (None: never).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        clock: Callable[[], int] = wall_clock_ms,
        routes: RouteInfoManager | None = None,
        scan_interval_s: float | None = SCAN_INTERVAL_S,
        limits: ServerLimits | None = None,
        order_message_enable: bool = False,
        guard: Guard | None = None,
    ) -> None:
        """``guard(request, remote_address)`` is the access check (the broker's ACL): None lets
        the request run, a text refuses it with NO_PERMISSION and that remark."""
        self.host = host
        self.port = port
        self.clock = clock
        self.routes = routes if routes is not None else RouteInfoManager()
        self.scan_interval_s = scan_interval_s
        self.limits = limits or ServerLimits()
        # NamesrvConfig.orderMessageEnable: fill orderTopicConf from the KV store.
        self.order_message_enable = order_message_enable
        self.kv: dict[str, dict[str, str]] = {}
        self._server: RemotingServer | None = None
        self._scan_task: asyncio.Task[None] | None = None
        self.handlers: dict[int, Handler] = {
            RequestCode.PUT_KV_CONFIG: self._put_kv_config,
            RequestCode.GET_KV_CONFIG: self._get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self._delete_kv_config,
            GET_KVLIST_BY_NAMESPACE: self._get_kv_list,
            RequestCode.REGISTER_BROKER: self._register_broker,
            RequestCode.UNREGISTER_BROKER: self._unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self._query_data_version,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self._get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self._get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self._get_topics_by_cluster,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self._delete_topic,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self._wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self._add_write_perm,
        }
        for code, handler in list(self.handlers.items()):
            self.handlers[code] = _guarded(handler)
            if guard is not None:
                self.handlers[code] = _access_checked(guard, self.handlers[code])

    # -- lifecycle --------------------------------------------------------------------------

    async def start(
        self, host: str | None = None, port: int | None = None, ssl: SSLContext | None = None
    ) -> int:
        """Listen (defaults: the constructor's host and port; port 0 picks one); returns the port.
        With ``ssl``, TLS is served beside plaintext (``RemotingServer.start``)."""
        if self._server is not None:
            raise RuntimeError("the name server is already started")
        host = self.host if host is None else host
        port = self.port if port is None else port
        server = RemotingServer(
            self.handlers, name="namesrv", limits=self.limits, on_disconnect=self._on_disconnect
        )
        self.port = await server.start(host, port, ssl)
        self.host = host
        self._server = server
        if self.scan_interval_s is not None:
            self._scan_task = asyncio.create_task(self._scan_loop(), name="namesrv-scan")
        log.info("name server listening on %s:%d", host, self.port)
        return self.port

    async def close(self) -> None:
        task, self._scan_task = self._scan_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        server, self._server = self._server, None
        if server is None:
            return
        await server.close()
        # RemotingServer.close() closes the transports, but on Python 3.11 returns before
        # their connection_lost callbacks ran; let them run so no transport outlives us.
        for _ in range(100):
            if not server.connections:
                break
            await asyncio.sleep(0)
        log.info("name server on port %d closed", self.port)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def connections(self) -> set[Connection]:
        return set() if self._server is None else set(self._server.connections)

    # -- housekeeping -----------------------------------------------------------------------

    def scan(self) -> int:
        """Drop brokers whose registration expired and close their connections; how many."""
        gone = self.routes.expire(self.clock())
        for info in gone:
            log.warning(
                "broker %s (%s, id %d, cluster %s) expired: no registration for %d ms",
                info.broker_name,
                info.broker_addr,
                info.broker_id,
                info.cluster,
                info.timeout_ms,
            )
            if isinstance(info.channel, Connection):
                info.channel.close()
        return len(gone)

    async def _scan_loop(self) -> None:
        assert self.scan_interval_s is not None
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                self.scan()
            except Exception:
                log.exception("scanning for inactive brokers failed")

    def _on_disconnect(self, connection: Connection) -> None:
        for info in self.routes.on_channel_destroy(connection):
            log.info(
                "broker %s (%s, id %d) removed: its connection %s closed",
                info.broker_name,
                info.broker_addr,
                info.broker_id,
                connection.remote_address,
            )

    # -- brokers ----------------------------------------------------------------------------

    def _register_broker(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        ext = dict(request.ext_fields or {})
        ext.setdefault("haServerAddr", "")  # Java leaves a missing one null and carries on
        header = RegisterBrokerRequestHeader.from_ext_fields(ext)
        body = request.body
        if header.body_crc32 and body:
            crc = _java_crc32(body)
            if header.body_crc32 not in (crc, _signed32(zlib.crc32(body))):
                log.warning(
                    "REGISTER_BROKER from %s: body crc32 %d, header says %d",
                    connection.remote_address,
                    crc,
                    header.body_crc32,
                )
                return request.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        register_body = self._decode_register_body(request, header)
        wrapper = register_body.topic_config_serialize_wrapper
        result = self.routes.register_broker(
            cluster=header.cluster_name,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
            broker_addr=header.broker_addr,
            ha_server_addr=header.ha_server_addr,
            topic_configs=wrapper.topic_config_table,
            data_version=wrapper.data_version,
            now_ms=self.clock(),
            timeout_ms=header.heartbeat_timeout_millis,
            channel=connection,
            zone_name=header.zone_name,
            enable_acting_master=bool(header.enable_acting_master),
        )
        if result.first:
            log.info(
                "broker %s registered: %s, id %d, cluster %s, %d topics, from %s",
                header.broker_name,
                header.broker_addr,
                header.broker_id,
                header.cluster_name,
                len(wrapper.topic_config_table),
                connection.remote_address,
            )
        else:
            log.debug("broker %s (%s) re-registered", header.broker_name, header.broker_addr)
        order_conf = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG)
        return request.make_response(
            ResponseCode.SUCCESS,
            ext_fields=RegisterBrokerResponseHeader(
                ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
            ).to_ext_fields(),
            body=encode_json_body(KVTable(table=order_conf)) if order_conf else None,
        )

    def _decode_register_body(
        self, request: RemotingCommand, header: RegisterBrokerRequestHeader
    ) -> RegisterBrokerBody:
        body = request.body
        if not body:
            return RegisterBrokerBody(
                topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
                    data_version=DataVersion(timestamp=0, counter=0)
                )
            )
        if header.compressed:
            return decode_compressed_register_body(body, size_max=self.limits.frame_size_max)
        if request.version < MQVersion.V3_0_11:
            # Brokers older than 3.0.11 send the TopicConfigSerializeWrapper alone.
            wrapper = decode_json_body(body, TopicConfigSerializeWrapper)
            return RegisterBrokerBody(topic_config_serialize_wrapper=wrapper)
        return decode_json_body(body, RegisterBrokerBody)

    def _unregister_broker(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        header = UnregisterBrokerRequestHeader.from_ext_fields(request.ext_fields)
        known = self.routes.unregister_broker(
            cluster=header.cluster_name,
            broker_addr=header.broker_addr,
            broker_name=header.broker_name,
            broker_id=header.broker_id,
        )
        log.info(
            "broker %s (%s, id %d) unregistered%s",
            header.broker_name,
            header.broker_addr,
            header.broker_id,
            "" if known else " (it was not registered)",
        )
        return request.make_response(ResponseCode.SUCCESS)

    def _query_data_version(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        header = QueryDataVersionRequestHeader.from_ext_fields(request.ext_fields)
        version = decode_json_body(request.body, DataVersion) if request.body else DataVersion()
        changed = self.routes.is_topic_config_changed(
            header.cluster_name, header.broker_addr, version
        )
        if not changed:
            self.routes.touch(header.cluster_name, header.broker_addr, self.clock())
        stored = self.routes.data_version_of(header.cluster_name, header.broker_addr)
        return request.make_response(
            ResponseCode.SUCCESS,
            ext_fields=QueryDataVersionResponseHeader(changed=changed).to_ext_fields(),
            body=None if stored is None else encode_json_body(stored),
        )

    # -- routes -----------------------------------------------------------------------------

    def _get_route_info(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext_fields(request.ext_fields)
        route = self.routes.route_of(header.topic)
        if route is None:
            return request.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {header.topic}",
            )
        if self.order_message_enable:
            conf = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, {}).get(header.topic)
            if conf is not None:
                route = msgspec.structs.replace(route, order_topic_conf=conf)
        # Standard JSON whatever the request's version or acceptStandardJsonOnly.
        return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(route))

    def _get_cluster_info(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        return request.make_response(
            ResponseCode.SUCCESS, body=encode_json_body(self.routes.cluster_info())
        )

    def _get_all_topics(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        body = TopicList(topic_list=self.routes.all_topics())
        return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))

    def _get_topics_by_cluster(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        header = GetTopicsByClusterRequestHeader.from_ext_fields(request.ext_fields)
        body = TopicList(topic_list=self.routes.topics_by_cluster(header.cluster))
        return request.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))

    def _delete_topic(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        header = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(request.ext_fields)
        refusal = system_topic_refusal(header.topic)
        if refusal is not None:
            return request.make_response(ResponseCode.INVALID_PARAMETER, refusal)
        if self.routes.delete_topic(header.topic, header.cluster_name):
            log.info(
                "topic %s deleted%s by %s",
                header.topic,
                f" from cluster {header.cluster_name}" if header.cluster_name else "",
                connection.remote_address,
            )
        return request.make_response(ResponseCode.SUCCESS)

    def _wipe_write_perm(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        header = WipeWritePermOfBrokerRequestHeader.from_ext_fields(request.ext_fields)
        count = self.routes.wipe_write_perm(header.broker_name)
        log.info("write permission of broker %s wiped on %d topics", header.broker_name, count)
        return request.make_response(
            ResponseCode.SUCCESS,
            ext_fields=WipeWritePermOfBrokerResponseHeader(wipe_topic_count=count).to_ext_fields(),
        )

    def _add_write_perm(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        header = AddWritePermOfBrokerRequestHeader.from_ext_fields(request.ext_fields)
        count = self.routes.add_write_perm(header.broker_name)
        log.info("write permission of broker %s added on %d topics", header.broker_name, count)
        return request.make_response(
            ResponseCode.SUCCESS,
            ext_fields=AddWritePermOfBrokerResponseHeader(add_topic_count=count).to_ext_fields(),
        )

    # -- KV config --------------------------------------------------------------------------

    def _put_kv_config(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        header = PutKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        self.kv.setdefault(header.namespace, {})[header.key] = header.value
        return request.make_response(ResponseCode.SUCCESS)

    def _get_kv_config(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        header = GetKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        value = self.kv.get(header.namespace, {}).get(header.key)
        if value is None:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {header.namespace} Key: {header.key}",
            )
        return request.make_response(
            ResponseCode.SUCCESS,
            ext_fields=GetKVConfigResponseHeader(value=value).to_ext_fields(),
        )

    def _delete_kv_config(
        self, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        header = DeleteKVConfigRequestHeader.from_ext_fields(request.ext_fields)
        table = self.kv.get(header.namespace)
        if table is not None:
            table.pop(header.key, None)
            if not table:
                del self.kv[header.namespace]
        return request.make_response(ResponseCode.SUCCESS)

    def _get_kv_list(self, request: RemotingCommand, connection: Connection) -> RemotingCommand:
        header = GetKVListByNamespaceRequestHeader.from_ext_fields(request.ext_fields)
        table = self.kv.get(header.namespace)
        if not table:
            return request.make_response(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {header.namespace}"
            )
        return request.make_response(
            ResponseCode.SUCCESS, body=encode_json_body(KVTable(table=dict(table)))
        )


def _guarded(handler: Handler) -> Handler:
    """Answer a request whose header or body does not decode with SYSTEM_ERROR and the reason
    (Java: RemotingCommandException -> SYSTEM_ERROR), logged without a stack trace."""

    def run(request: RemotingCommand, connection: Connection) -> RemotingCommand | None:
        try:
            return handler(request, connection)  # type: ignore[return-value]
        except (MalformedHeaderError, MalformedBodyError) as error:
            log.warning(
                "request code %d from %s refused: %s",
                request.code,
                connection.remote_address,
                error,
            )
            return request.make_response(ResponseCode.SYSTEM_ERROR, str(error))

    return run


def _access_checked(guard: Guard, handler: Handler) -> Handler:
    """Run ``handler`` only for a request the guard lets through."""

    def run(request: RemotingCommand, connection: Connection) -> object:
        remark = guard(request, connection.remote_address)
        if remark is not None:
            return request.make_response(ResponseCode.NO_PERMISSION, remark)
        return handler(request, connection)

    return run  # type: ignore[return-value]


async def serve(
    host: str = "0.0.0.0",
    port: int = DEFAULT_PORT,
    *,
    ready: Callable[[int], None] | None = None,
    clock: Callable[[], int] = wall_clock_ms,
) -> None:
    """Run a name server until cancelled; ``ready(port)`` is called once it listens."""
    async with NameServer(host=host, port=port, clock=clock) as server:
        if ready is not None:
            ready(server.port)
        await asyncio.Event().wait()
