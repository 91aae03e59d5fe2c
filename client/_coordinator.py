"""The push consumer's coordinator: who this consumer is to the brokers and which queues it owns
(RocketMQ's ``RebalanceImpl``, the heartbeat and lock parts of ``MQClientInstance``, and the
offset store's persistence).

* at start, a subscription that is not by tag (SQL92) is checked with CHECK_CLIENT_CONFIG by
  every broker (RocketMQ's ``checkClientInBroker``): a bad expression, or a broker without
  property filters, fails ``start()`` with the broker's answer.
* membership: HEART_BEAT with the group's subscriptions to every broker of the routes, every
  ``heartbeat_interval_s`` and at once when a subscription changes or a broker lost it;
  UNREGISTER_CLIENT on close.
* rebalance: every ``rebalance_interval_s``, and at once on NOTIFY_CONSUMER_IDS_CHANGED, each
  subscribed topic's queues are shared out by ``allocate`` among the group's consumers
  (clustering; broadcasting owns them all). Queues no longer owned are dropped: pulling and
  consuming stop, the offset is committed, the lock released; new ones are taken from the
  committed offset, else where ``consume_from`` says.
* orderly clustering: a queue is taken only once the broker grants its lock (LOCK_BATCH_MQ),
  renewed every ``lock_interval_s``; UNLOCK_BATCH_MQ when it is given up.
* offsets: committed every ``persist_interval_s`` (and on the pulls, by the fetcher).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Final

from pocketmq.broker.protocol import RemotingCommand, RequestCode
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.headers import (
    ConsumerData,
    ConsumerListBody,
    GetConsumerListByGroupRequestHeader,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
    UnregisterClientRequestHeader,
    decode_json_body,
    encode_json_body,
)

from . import _queries
from ._core import ClientCore
from ._dispatcher import Dispatcher
from ._fetcher import Fetcher
from ._process_queue import ProcessQueue
from ._push_common import FROM_WHERE, MODELS, PushOptions, Subscriptions, cancel_all, need_lock
from .connection import Connection, check_response, make_request
from .errors import ClientError
from .filter import TagExpression, check_client_config_request, check_client_config_response
from .message import RETRY_TOPIC_PREFIX, MessageQueue
from .offset_store import OffsetStore
from .route import TopicRoute

__all__ = ["Coordinator"]

log = logging.getLogger("pocketmq.client.consumer")

_UNREGISTER_TIMEOUT_MS: Final = 1000
_REBALANCE_SOON_S: Final = 1.0


class Coordinator:
    """Heartbeats, rebalance, orderly locks and offset commits of one push consumer."""

    def __init__(
        self,
        core: ClientCore,
        options: PushOptions,
        offsets: OffsetStore,
        subscriptions: Subscriptions,
        fetcher: Fetcher,
        dispatcher: Dispatcher,
    ) -> None:
        self._core = core
        self._options = options
        self._offsets = offsets
        self._subscriptions = subscriptions
        self._fetcher = fetcher
        self._dispatcher = dispatcher
        self._rebalance_lock = asyncio.Lock()
        self._rebalance_wake = asyncio.Event()
        self._rebalance_soon_pending = False
        self.closing = False

    # -- life cycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Meet the brokers, take queues, then keep at it in the background."""
        core, options = self._core, self._options
        core.pool.handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = self._on_ids_changed
        await self.refresh_routes()
        await self.check_subscriptions()
        await self.heartbeat_all()
        await self.rebalance()
        core.every(options.heartbeat_interval_s, self.heartbeat_all, name="consumer-heartbeat")
        core.every(core.routes.refresh_interval_s, self.refresh_routes, name="consumer-routes")
        core.every(options.persist_interval_s, self._persist_offsets, name="consumer-offsets")
        core.every(
            options.rebalance_interval_s,
            self.rebalance,
            name="consumer-rebalance",
            wake=self._rebalance_wake,
        )
        if need_lock(options):
            core.every(options.lock_interval_s, self._lock_all, name="consumer-lock")

    async def leave(self, mqs: Sequence[MessageQueue]) -> None:
        """The consumer closes: commit the offsets of ``mqs``, release their locks, unregister."""
        await self._offsets.persist_all(mqs, oneway=False)
        if need_lock(self._options):
            await self._unlock(mqs)
        await self._unregister()

    # -- membership --------------------------------------------------------------------------

    async def resubscribe(self) -> None:
        """The subscriptions changed: tell the brokers, then take queues."""
        await self.refresh_routes()
        await self.heartbeat_all()
        self._rebalance_wake.set()

    def heartbeat_soon(self) -> None:
        """A broker lost the subscription (a pull said so): heartbeat now."""
        self._core.spawn(self.heartbeat_all(), name="consumer-heartbeat-now")

    async def _on_ids_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        log.debug("consumer ids of %s changed: rebalancing", self._options.group)
        self._rebalance_wake.set()
        return None

    async def refresh_routes(self) -> None:
        for topic in self._subscriptions.all():
            try:
                self._core.routes.invalidate(topic)
                await self._core.routes.get(topic)
            except ClientError as e:
                log.debug("no route for %s yet: %s", topic, e)

    async def check_subscriptions(self) -> None:
        """Ask every broker whether it takes each non-TAG subscription; raise its refusal
        (SUBSCRIPTION_PARSE_FAILED with the parser's message, or SYSTEM_ERROR when property
        filters are off). TAG subscriptions need no check: the client parsed them."""
        options = self._options
        for topic, sub in self._subscriptions.topics.items():
            if isinstance(sub.expression, TagExpression):
                continue
            data = sub.expression.subscription_data(topic, sub_version=sub.sub_version)
            for addr in sorted(self._core.routes.all_broker_addrs()):
                request = check_client_config_request(options.client_id, options.group, data)
                response = await self._core.invoke(addr, request)
                check_client_config_response(response, addr, topic, sub.expression)

    def _heartbeat_request(self) -> RemotingCommand:
        options = self._options
        subs = [
            sub.expression.subscription_data(topic, sub_version=sub.sub_version)
            for topic, sub in self._subscriptions.all().items()
        ]
        data = HeartbeatData(
            client_id=options.client_id,
            consumer_data_set=[
                ConsumerData(
                    group_name=options.group,
                    consume_type="CONSUME_PASSIVELY",
                    message_model=MODELS[options.message_model],
                    consume_from_where=FROM_WHERE[options.consume_from],
                    subscription_data_set=subs,
                    unit_mode=False,
                )
            ],
        )
        return make_request(RequestCode.HEART_BEAT, body=encode_json_body(data))

    async def heartbeat_all(self) -> None:
        for addr in sorted(self._core.routes.all_broker_addrs()):
            try:
                check_response(await self._core.invoke(addr, self._heartbeat_request()))
            except ClientError as e:
                log.warning("heartbeat to %s failed: %s", addr, e)

    async def _unregister(self) -> None:
        options = self._options
        header = UnregisterClientRequestHeader(
            client_id=options.client_id, consumer_group=options.group
        )
        for addr in sorted(self._core.routes.all_broker_addrs()):
            try:
                cmd = make_request(RequestCode.UNREGISTER_CLIENT, header)
                await self._core.invoke(addr, cmd, _UNREGISTER_TIMEOUT_MS)
            except ClientError as e:
                log.debug("unregister from %s failed: %s", addr, e)

    # -- rebalance ---------------------------------------------------------------------------

    async def _consumer_ids(self, route: TopicRoute) -> list[str] | None:
        addrs = [a for a in (route.any_addr(n) for n in route.brokers) if a]
        if not addrs:
            return None
        group = self._options.group
        header = GetConsumerListByGroupRequestHeader(consumer_group=group)
        try:
            response = await self._core.invoke(
                self._core.rng.choice(addrs),
                make_request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, header),
            )
            check_response(response)
            body = decode_json_body(response.body or b"{}", ConsumerListBody)
        except (ClientError, RemoteProtocolError) as e:
            log.debug("consumer list of %s unavailable: %s", group, e)
            return None
        return body.consumer_id_list

    async def rebalance(self) -> None:
        """Work out which queues this consumer owns, then drop and take queues to match."""
        async with self._rebalance_lock:
            if self.closing:
                return
            options = self._options
            owned = self._fetcher.queues
            wanted: dict[str, set[MessageQueue]] = {}
            for topic in self._subscriptions.all():
                current = {mq for mq in owned if mq.topic == topic}
                try:
                    route = await self._core.routes.get(topic)
                except ClientError as e:
                    log.debug("rebalance of %s skipped: %s", topic, e)
                    wanted[topic] = current
                    # A topic created after the consumer started: look again in a second rather
                    # than at the next periodic rebalance (RocketMQ waits 20 s).
                    self._rebalance_soon()
                    continue
                queues = list(route.subscribe_queues)
                if not options.clustering:
                    wanted[topic] = set(queues)
                    continue
                cids = await self._consumer_ids(route)
                if cids is None:
                    # The broker does not know us yet (its route was not known at our last
                    # heartbeat): heartbeat it and try again shortly.
                    wanted[topic] = current
                    self._rebalance_soon()
                    continue
                mine = options.allocate(options.group, options.client_id, queues, cids)
                wanted[topic] = set(mine)
            await self._apply_allocation(wanted)

    def _rebalance_soon(self) -> None:
        if not self._rebalance_soon_pending:
            self._rebalance_soon_pending = True
            self._core.spawn(self._rebalance_later(), name="consumer-rebalance-soon")

    async def _rebalance_later(self) -> None:
        await asyncio.sleep(_REBALANCE_SOON_S)
        self._rebalance_soon_pending = False
        if not self.closing:
            await self.heartbeat_all()  # brokers whose routes just appeared learn about us
            self._rebalance_wake.set()

    async def _apply_allocation(self, wanted: dict[str, set[MessageQueue]]) -> None:
        owned = self._fetcher.queues
        for mq, pq in list(owned.items()):
            if mq not in wanted.get(mq.topic, set()):
                await self.drop(pq)
        new = sorted(mq for mqs in wanted.values() for mq in mqs if mq not in owned)
        if not new:
            return
        locking = need_lock(self._options)
        locked: set[MessageQueue] = set(new)
        if locking:
            locked, _ = await self._lock(new)
        for mq in new:
            if mq not in locked or self.closing:
                continue  # RocketMQ skips a queue it cannot lock; the next rebalance retries
            try:
                offset = await self._start_offset(mq)
            except (ClientError, RemoteProtocolError) as e:
                log.warning("no start offset for %s, skipped: %s", mq, e)
                if locking:
                    await self._unlock([mq])
                continue
            pq = self._fetcher.take(mq, offset, locked=locking)
            if self._options.orderly:
                self._dispatcher.start_orderly(pq)
            log.info("%s takes %s from offset %d", self._options.client_id, mq, offset)

    async def _start_offset(self, mq: MessageQueue) -> int:
        """The committed offset, else where ``consume_from`` says to start."""
        stored = await self._offsets.read_from_store(mq)
        if stored is not None and stored >= 0:
            return stored
        retry = mq.topic.startswith(RETRY_TOPIC_PREFIX)
        consume_from = self._options.consume_from
        if consume_from == "first":
            return 0
        if consume_from == "last":
            return 0 if retry else await _queries.max_offset(self._core, mq)
        if retry:
            return await _queries.max_offset(self._core, mq)
        timestamp_ms = self._options.consume_timestamp_ms
        assert timestamp_ms is not None
        return await _queries.search_offset(self._core, mq, timestamp_ms)

    async def drop(self, pq: ProcessQueue, *, persist_oneway: bool = True) -> None:
        """Give a queue up: stop pulling and consuming, commit its offset, release its lock."""
        pq.drop()
        self._fetcher.forget(pq)
        current = asyncio.current_task()
        tasks = [t for t in (pq.pull_task, pq.consume_task) if t and t is not current]
        if pq.consume_task and pq.consume_task in tasks:
            # let the message being consumed finish so the next owner does not overlap it
            timeout_s = self._options.close_timeout_ms / 1000
            await asyncio.wait([pq.consume_task], timeout=timeout_s)
        await cancel_all(tasks)
        try:
            await self._offsets.persist(pq.mq, oneway=persist_oneway)
        except ClientError as e:
            log.warning("offset of %s not committed: %s", pq.mq, e)
        if self._options.clustering:
            self._offsets.remove(pq.mq)
        if need_lock(self._options):
            await self._unlock([pq.mq])
        log.info("%s gives up %s", self._options.client_id, pq.mq)

    async def offset_moved(self, pq: ProcessQueue, next_offset: int) -> None:
        """PULL_OFFSET_MOVED: the queue is dropped at the corrected offset and taken again."""
        log.warning("offset of %s moved to %d", pq.mq, next_offset)
        self._offsets.update(pq.mq, next_offset, increase_only=False)
        await self.drop(pq, persist_oneway=False)
        self._rebalance_wake.set()

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (``MQClientInstance.resetOffset``): each owned queue of
        ``topic`` the table names stops, takes its new offset, commits it and is given up; the
        rebalance asked for at once takes it again from there."""
        async with self._rebalance_lock:
            pqs = [
                pq for mq, pq in self._fetcher.queues.items() if mq.topic == topic and mq in offsets
            ]
            for pq in pqs:  # all stop at once, as the Java client drops them before its pause
                pq.drop()
            for pq in pqs:
                await self.drop(pq, persist_oneway=False)
                self._offsets.update(pq.mq, offsets[pq.mq], increase_only=False)
                try:
                    await self._offsets.persist(pq.mq, oneway=False)
                except ClientError as e:
                    log.warning("reset offset of %s not committed: %s", pq.mq, e)
                if self._options.clustering:
                    self._offsets.remove(pq.mq)
                log.info("offset of %s reset to %d", pq.mq, offsets[pq.mq])
        self._rebalance_wake.set()

    # -- locks -------------------------------------------------------------------------------

    @staticmethod
    def _by_broker(mqs: Sequence[MessageQueue]) -> dict[str, list[MessageQueue]]:
        groups: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            groups.setdefault(mq.broker_name, []).append(mq)
        return groups

    async def _lock(self, mqs: Sequence[MessageQueue]) -> tuple[set[MessageQueue], set[str]]:
        """LOCK_BATCH_MQ per broker; returns the queues granted and the brokers that answered."""
        granted: set[MessageQueue] = set()
        answered: set[str] = set()
        options = self._options
        for broker_name, group in self._by_broker(mqs).items():
            body = LockBatchRequestBody(
                consumer_group=options.group,
                client_id=options.client_id,
                mq_set=[mq.to_wire() for mq in group],
            )
            try:
                addr = self._core.broker_addr(broker_name)
                cmd = make_request(RequestCode.LOCK_BATCH_MQ, body=encode_json_body(body))
                response = check_response(await self._core.invoke(addr, cmd))
                result = decode_json_body(response.body or b"{}", LockBatchResponseBody)
            except (ClientError, RemoteProtocolError) as e:
                log.warning("lock of %d queues on %s failed: %s", len(group), broker_name, e)
                continue
            answered.add(broker_name)
            granted |= {MessageQueue.from_wire(mq) for mq in result.lock_ok_mq_set}
        return granted, answered

    async def _unlock(self, mqs: Sequence[MessageQueue]) -> None:
        options = self._options
        for broker_name, group in self._by_broker(mqs).items():
            body = UnlockBatchRequestBody(
                consumer_group=options.group,
                client_id=options.client_id,
                mq_set=[mq.to_wire() for mq in group],
            )
            try:
                addr = self._core.broker_addr(broker_name)
                cmd = make_request(RequestCode.UNLOCK_BATCH_MQ, body=encode_json_body(body))
                await self._core.invoke_oneway(addr, cmd)
            except ClientError as e:
                log.debug("unlock on %s failed: %s", broker_name, e)

    async def _lock_all(self) -> None:
        """Renew the locks of every owned queue; a queue the broker refuses stops consuming."""
        pqs = list(self._fetcher.queues.values())
        if not pqs:
            return
        granted, answered = await self._lock([pq.mq for pq in pqs])
        now = asyncio.get_running_loop().time()
        for pq in pqs:
            if pq.mq in granted:
                pq.set_locked(True, now)
            elif pq.mq.broker_name in answered:
                pq.set_locked(False, now)  # refused: another client holds it
            # a broker that did not answer: the lock runs until it expires

    # -- offsets -----------------------------------------------------------------------------

    async def _persist_offsets(self) -> None:
        await self._offsets.persist_all(list(self._fetcher.queues), oneway=True)
