"""The pytest plugin pocketmq installs (entry point ``pytest11: pocketmq``).

It only adds names: the fixtures ``pocketmq_broker`` (one broker per test) and
``pocketmq_session_broker`` (one for the whole run), and the marker
``@pytest.mark.pocketmq(**options)`` that sets the per-test broker's options. Nothing is
imported or started until a test asks for a fixture, so a suite that does not use them runs as
before. ``-p no:pocketmq`` turns the plugin off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .embedded import EmbeddedBroker

_MARKER = (
    "pocketmq(**options): options of the pocketmq_broker fixture's broker: grpc=True, "
    "http=True, store='memory', start_ms=EPOCH_MS, or any BrokerConfig field "
    "(transaction_check_max=3, default_topic_queue_nums=1)"
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)


def _snapshots(factory: pytest.TempPathFactory) -> Any:
    # One folder per run: a snapshot saved by one test can be restored by a later one.
    folder = factory.getbasetemp() / "pocketmq-snapshots"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture
def pocketmq_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EmbeddedBroker]:
    """A name server and a broker for this test: manual clock, free ports, a fresh store."""
    from .embedded import EmbeddedBroker

    options: dict[str, Any] = {}
    # closest last: a marker on the test wins over one on its class or module
    for marker in reversed(list(request.node.iter_markers("pocketmq"))):
        if marker.args:
            raise TypeError("@pytest.mark.pocketmq takes keyword options only, e.g. grpc=True")
        options.update(marker.kwargs)
    with EmbeddedBroker(snapshots=_snapshots(tmp_path_factory), **options) as broker:
        yield broker


@pytest.fixture(scope="session")
def pocketmq_session_broker(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[EmbeddedBroker]:
    """One broker for the whole run (default options; the marker does not apply to it):
    cheaper than one per test, shared state, so use distinct topics and groups per test."""
    from .embedded import EmbeddedBroker

    with EmbeddedBroker(snapshots=_snapshots(tmp_path_factory)) as broker:
        yield broker
