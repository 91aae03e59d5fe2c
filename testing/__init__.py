"""pocketmq's test toolkit for applications that use RocketMQ (docs/testing.md).

- :class:`EmbeddedBroker`: a name server and a broker on a manual clock, in a thread of their
  own, with assertions (``expect_delivered``, ``nothing_in_flight``,
  ``no_pending_transactions``, ``advance_until_idle``) and snapshots;
- the pytest plugin (``pocketmq.testing.plugin``, installed with the package: fixtures
  ``pocketmq_broker`` and ``pocketmq_session_broker``, marker ``@pytest.mark.pocketmq``);
- :func:`replay`: a store's traffic sent again with its timing, on the manual clock.
"""

from .assertions import Delivered
from .embedded import EmbeddedBroker
from .replay import ReplayReport, replay
from .snapshots import SnapshotError, SnapshotInfo

__all__ = [
    "Delivered",
    "EmbeddedBroker",
    "ReplayReport",
    "SnapshotError",
    "SnapshotInfo",
    "replay",
]
