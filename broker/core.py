"""What the fronts see of a broker: its configuration, its services and a few helpers.

The remoting handlers (``broker/handlers/``) and the gRPC front (``broker/grpc/``) take a
``BrokerCore``; ``Broker`` (``broker/app.py``) is one, and adds the life cycle, the remoting
server, the name-server registration and the gRPC front. So the fronts import this module and
the services, never the app, and the app imports them: the imports go one way.
"""

from __future__ import annotations

from collections.abc import Callable

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.services.clients import ClientRegistry
from pocketmq.broker.services.clock import Clock, Scheduler
from pocketmq.broker.services.faults import FaultPlan
from pocketmq.broker.services.flush import FlushService
from pocketmq.broker.services.group_admin import GroupAdmin
from pocketmq.broker.services.groups import GroupManager
from pocketmq.broker.services.lite_expiry import LiteExpiry
from pocketmq.broker.services.locks import LockManager
from pocketmq.broker.services.long_polling import PullHoldService
from pocketmq.broker.services.offsets import OffsetManager
from pocketmq.broker.services.pop import PopService
from pocketmq.broker.services.progress import ProgressService
from pocketmq.broker.services.pull import PullService
from pocketmq.broker.services.queries import MessageQueries
from pocketmq.broker.services.reply import ReplyService
from pocketmq.broker.services.retention import RetentionService
from pocketmq.broker.services.retry import RetryService
from pocketmq.broker.services.schedule import ScheduleService
from pocketmq.broker.services.send import SendService
from pocketmq.broker.services.stats import BrokerStats
from pocketmq.broker.services.timer import TimerService
from pocketmq.broker.services.topics import TopicManager
from pocketmq.broker.services.transactions import TransactionService
from pocketmq.broker.services.writer import MessageWriter
from pocketmq.ids import offset_msg_id_from_packed
from pocketmq.store.message_store import MessageStore

__all__ = ["BrokerCore"]


class BrokerCore:
    """The services of a running broker (set by ``Broker.start``) and the helpers every front
    uses."""

    config: BrokerConfig
    clock: Clock
    clock_ms: Callable[[], int]
    scheduler: Scheduler
    holds: PullHoldService
    clients: ClientRegistry
    locks: LockManager
    store: MessageStore
    topics: TopicManager
    offsets: OffsetManager
    groups: GroupManager
    flush: FlushService
    pulls: PullService
    queries: MessageQueries
    writer: MessageWriter
    send: SendService
    reply: ReplyService
    retry: RetryService
    schedule: ScheduleService
    timer: TimerService
    retention: RetentionService
    pop: PopService
    lite_expiry: LiteExpiry
    transactions: TransactionService
    stats: BrokerStats  # traffic: messages and bytes in/out, rates, latencies, connections
    progress: ProgressService  # consume progress and lag, for every view that shows them
    group_admin: GroupAdmin  # group deletes, resets told to consumers, expired segments now
    faults: FaultPlan  # faults a test planned (services/faults.py): listed, logged
    _store_host_address: bytes = b""
    _store_host_port: int = 0

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def address(self) -> str:
        return self.config.address

    def now_ms(self) -> int:
        return self.clock_ms()

    def offset_msg_id(self, physical_offset: int) -> str:
        return offset_msg_id_from_packed(
            self._store_host_address, self._store_host_port, physical_offset
        )

    def message_arrived(self, topic: str, queue_id: int) -> None:
        self.holds.notify(topic, queue_id)

    def schedule_registration(self) -> None:
        """Register with the name servers soon (a topic changed); the app does it."""
