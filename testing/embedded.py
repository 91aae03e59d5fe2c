"""A broker for an application's tests: its own thread and event loop, a manual clock, free ports.

:class:`EmbeddedBroker` runs a name server and a broker in a background thread, so a test of
any kind uses it: an ``async def`` test on any event loop (the SDK, pytest-asyncio, anyio), a
plain test driving a synchronous client (the official 5.x SDK over gRPC). Clients reach it
over TCP like any broker. Its methods are coroutines (``await broker.advance("2h")``); a
plain test calls the same ones through ``broker.sync`` (``broker.sync.advance("2h")``).

The store lives in a temporary folder in RAM where there is one (``/dev/shm``), removed at the
stop: as fast as the in-memory store, and it can be snapshotted and recovered like a real
one. ``store="memory"`` keeps it in the process instead (no snapshots).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from pocketmq.broker.app import SEEDED_START_MS, Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.namesrv import NameServer
from pocketmq.broker.services.clock import ManualClock, parse_duration_ms
from pocketmq.store.config import StoreConfig

from .assertions import Delivered, Inspector
from .snapshots import SnapshotError, SnapshotInfo, list_snapshots, restore_snapshot, save_snapshot

__all__ = ["EmbeddedBroker", "broker_options", "test_store_config"]

T = TypeVar("T")

# Options of the fixture itself; every other option is a BrokerConfig field.
_OWN_OPTIONS = {"grpc", "http", "store", "start_ms"}
_START_TIMEOUT_S = 60.0


def test_store_config() -> StoreConfig:
    """Smaller files than a production store (8 MiB segments, a small index): a test writes
    little, and a snapshot copies every file."""
    return StoreConfig(
        commitlog_segment_size=8 * 1024 * 1024,
        consume_queue_entries_per_file=10_000,
        index_slot_count=20_000,
        index_entry_count=80_000,
    )


def broker_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``@pytest.mark.pocketmq(...)`` options into the fixture's own and BrokerConfig
    fields; an unknown name is a TypeError that lists the known ones."""
    fields = set(BrokerConfig.__struct_fields__) - {"namesrv_addrs", "data_dir", "port"}
    unknown = sorted(set(options) - fields - _OWN_OPTIONS)
    if unknown:
        raise TypeError(
            f"unknown pocketmq broker option(s) {', '.join(unknown)}: use grpc, http, store, "
            f"start_ms or a BrokerConfig field ({', '.join(sorted(fields))})"
        )
    # store= is both: where the store lives ("folder", "memory") or BrokerConfig's StoreConfig
    own = {
        k: v
        for k, v in options.items()
        if k in _OWN_OPTIONS and not (k == "store" and isinstance(v, StoreConfig))
    }
    config = {k: v for k, v in options.items() if k not in own}
    if own.get("store", "folder") not in ("folder", "memory"):
        raise TypeError(
            f"store={own['store']!r}: use 'folder' (default), 'memory' or a StoreConfig"
        )
    return own, config


def _ram_folder() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > 256 * 1024 * 1024 else None


class EmbeddedBroker:
    """A name server and a broker on a manual clock, in a thread of their own.

    ``EmbeddedBroker(**options)``: ``grpc=True`` starts the 5.x gRPC front (the ``grpc``
    extra), ``http=True`` the HTTP front, ``store="memory"`` an in-process store,
    ``start_ms`` the clock's start (default: now; with ``seed``, the seeded runs' fixed start),
    any other name a BrokerConfig field
    (``transaction_check_max=3``). ``snapshots`` is the folder of named snapshots.
    """

    def __init__(self, *, snapshots: str | Path | None = None, **options: Any) -> None:
        own, fields = broker_options(options)
        self._grpc = bool(own.get("grpc", False))
        self._http = bool(own.get("http", False))
        self._in_memory = own.get("store", "folder") == "memory"
        start_ms = own.get("start_ms")
        if start_ms is None and fields.get("seed") is not None:
            start_ms = SEEDED_START_MS  # a seeded run's timestamps are the same every time
        self.clock = ManualClock(start_ms)
        fields.setdefault("store", test_store_config())
        fields.setdefault("vip_channel", False)  # port - 2 of a free port may be anyone's
        self._fields = fields
        self._snapshots = Path(snapshots) if snapshots is not None else None
        self._own_snapshots: Path | None = None
        self._data_dir: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._namesrv: NameServer | None = None
        self._broker: Broker | None = None
        self.sync = _Blocking(self)

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> EmbeddedBroker:
        if self._loop is not None:
            raise RuntimeError("this EmbeddedBroker is started already")
        if not self._in_memory:
            self._data_dir = Path(tempfile.mkdtemp(prefix="pocketmq-test-", dir=_ram_folder()))
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=loop.run_forever, name="pocketmq-broker", daemon=True
        )
        self._thread.start()
        try:
            self._run(self._open(), _START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            if loop.is_running():
                self._run(self._close(), _START_TIMEOUT_S)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_START_TIMEOUT_S)
            if not thread.is_alive():
                loop.close()
            self._loop = self._thread = None
            for folder in (self._data_dir, self._own_snapshots):
                if folder is not None:
                    shutil.rmtree(folder, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _open(self) -> None:
        if self._grpc:
            from pocketmq.broker.grpc import grpc_available

            if not grpc_available():
                raise RuntimeError(
                    "grpc=True: the gRPC front is not installed (pip install 'pocketmq[grpc]')"
                )
        if self._namesrv is None:
            # One name server for the fixture's life: a snapshot or restore restarts only the
            # broker, and clients keep the name server address they were given.
            self._namesrv = NameServer(port=0)
            await self._namesrv.start()
        fields: dict[str, Any] = {
            "port": 0,
            "grpc_port": 0 if self._grpc else None,
            "http_port": 0 if self._http else None,
            **self._fields,
        }
        config = BrokerConfig(
            data_dir=self._data_dir,
            namesrv_addrs=[f"{self._namesrv.host}:{self._namesrv.port}"],
            **fields,
        )
        broker = Broker(config, clock=self.clock)
        await broker.start()
        self._broker = broker
        # The ports it got are kept: a restart listens where clients already connect.
        self._fields.update(port=config.port)
        self._grpc = self._grpc and config.grpc_port is not None
        if self._grpc:
            self._fields["grpc_port"] = config.grpc_port
        if self._http and config.http_port is not None:
            self._fields["http_port"] = config.http_port

    async def _close(self) -> None:
        if self._broker is not None:
            broker, self._broker = self._broker, None
            await broker.close()
        if self._namesrv is not None:
            await self._namesrv.close()
            self._namesrv = None

    # -- where clients connect ------------------------------------------------------------------

    @property
    def broker(self) -> Broker:
        """The running :class:`~pocketmq.broker.app.Broker`, for reads of your own (read from
        another thread while it runs: for changes, use the methods here)."""
        if self._broker is None:
            raise RuntimeError("the pocketmq broker is not running")
        return self._broker

    @property
    def namesrv_address(self) -> str:
        """host:port of the name server: the SDK's ``namesrv=``, a 4.x client's NAMESRV_ADDR."""
        if self._namesrv is None:
            raise RuntimeError("the pocketmq broker is not running")
        return f"{self._namesrv.host}:{self._namesrv.port}"

    @property
    def address(self) -> str:
        """host:port of the broker's remoting port."""
        return self.broker.config.address

    @property
    def grpc_address(self) -> str:
        """host:port of the 5.x gRPC front (the official SDKs' endpoints)."""
        address = self.broker.grpc_address
        if address is None:
            raise RuntimeError(
                "the gRPC front is off: ask for it with @pytest.mark.pocketmq(grpc=True) "
                "(it needs the grpc extra: pip install 'pocketmq[grpc]')"
            )
        return address

    @property
    def http_address(self) -> str:
        """host:port of the HTTP front (health, metrics, admin API)."""
        address = self.broker.http_address
        if address is None:
            raise RuntimeError("the HTTP front is off: @pytest.mark.pocketmq(http=True)")
        return address

    @property
    def data_dir(self) -> Path | None:
        return self._data_dir

    def now_ms(self) -> int:
        """The manual clock's time, epoch milliseconds."""
        return self.clock.now_ms()

    # -- running work in the broker's thread ----------------------------------------------------

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._loop is None:
            coroutine.close()
            raise RuntimeError("the pocketmq broker is not running")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        __tracebackhide__ = True  # pytest: the failure, not our frames
        return self._submit(coroutine).result(timeout)

    async def _on_broker(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the broker's loop; the caller's loop stays free meanwhile."""
        __tracebackhide__ = True  # pytest: the failure, not our frames
        return await asyncio.wrap_future(self._submit(coroutine))

    # -- the clock ------------------------------------------------------------------------------

    async def advance(self, duration: str | int) -> int:
        """Move the clock forward (``"2h"``, ``"90s"``, milliseconds): every delay level,
        timer, retry and transaction check that falls due runs, in order. Returns how many
        scheduled items ran."""
        __tracebackhide__ = True  # pytest: the failure, not our frames
        return await self._on_broker(self.broker.advance(duration))

    async def advance_until_idle(self, *, limit: str | int = "3d", items_max: int = 100_000) -> int:
        """Advance from one due item to the next until the broker has nothing scheduled (every
        delay, timer, retry and transaction check has run). Returns how many ran. Fails
        (AssertionError) when work is still scheduled after ``limit`` of clock time or
        ``items_max`` items: something keeps rescheduling itself."""
        __tracebackhide__ = True  # pytest: the failure, not our frames
        limit_ms = limit if isinstance(limit, int) else parse_duration_ms(limit)
        return await self._on_broker(Inspector(self.broker).advance_until_idle(limit_ms, items_max))

    # -- assertions -----------------------------------------------------------------------------

    async def expect_delivered(
        self,
        topic: str,
        count: int | None = None,
        *,
        tags: str | None = None,
        keys: str | list[str] | None = None,
        body: bytes | str | None = None,
        properties: dict[str, str] | None = None,
        consumed_by: str | None = None,
        timeout: float = 10.0,
    ) -> list[Delivered]:
        """Wait until ``topic`` holds ``count`` messages (exactly; None: at least one) that
        match every filter given: ``tags``, ``keys`` (each one among the message's keys),
        ``body`` (str compares as UTF-8), ``properties`` (a subset); with ``consumed_by`` the
        group must also have consumed them (its committed offset is past them and POP has
        none of them unacknowledged). Returns them in queue order. AssertionError after
        ``timeout`` seconds (wall clock: the application runs meanwhile), saying what was
        found instead."""
        __tracebackhide__ = True  # pytest: the failure, not our frames
        wanted = [keys] if isinstance(keys, str) else keys
        body_bytes = body.encode() if isinstance(body, str) else body
        return await self._on_broker(
            Inspector(self.broker).expect_delivered(
                topic, count, tags, wanted, body_bytes, properties, consumed_by, timeout
            )
        )

    async def nothing_in_flight(self, group: str | None = None, *, timeout: float = 10.0) -> None:
        """Wait until every consumer group (or ``group``) has consumed and acknowledged every
        message of its topics: no lag, nothing lent by POP unacknowledged. AssertionError after
        ``timeout`` seconds, per group and queue what is left."""
        __tracebackhide__ = True  # pytest: the failure, not our frames
        await self._on_broker(Inspector(self.broker).nothing_in_flight(group, timeout))

    async def no_pending_transactions(self, *, timeout: float = 0.0) -> None:
        """Assert no half message awaits a commit or rollback (waiting up to ``timeout``
        seconds); AssertionError listing each pending one (id, topic, producer group, checks
        so far, next check)."""
        __tracebackhide__ = True  # pytest: the failure, not our frames
        await self._on_broker(Inspector(self.broker).no_pending_transactions(timeout))

    # -- faults ---------------------------------------------------------------------------------

    @property
    def faults(self) -> _OnBrokerLoop:
        """The broker's fault plan (``broker.faults``, docs/testing.md), each method a
        coroutine run on the broker's loop: ``await pocketmq_broker.faults.plan("system_busy",
        times=2)``, ``.list()``, ``.clear()``, ``.close_connection(client_id)``, ``.crash()``
        then ``.crashed()``. A plain test: ``pocketmq_broker.sync.faults.plan(...)``."""
        return _OnBrokerLoop(self, lambda: self.broker.faults)

    # -- snapshots ------------------------------------------------------------------------------

    @property
    def snapshots_dir(self) -> Path:
        if self._snapshots is None:
            self._own_snapshots = self._snapshots = Path(
                tempfile.mkdtemp(prefix="pocketmq-snapshots-")
            )
        return self._snapshots

    async def snapshot(self, name: str, *, replace: bool = True) -> SnapshotInfo:
        """Save the whole broker under ``name``: the broker stops cleanly, its data folder
        (messages, topics, groups, offsets, pending delays, timers and transactions) is copied
        with the clock's time, and it starts again on the same ports. Connections close:
        clients reconnect by themselves."""
        folder = self._need_folder("snapshot")
        return await self._on_broker(self._restarted(lambda: self._save(folder, name, replace)))

    async def restore(self, name: str) -> SnapshotInfo:
        """Put the broker back as the snapshot ``name`` left it, its clock too (backwards if
        need be). Stop the application's consumers first: a running one would commit the
        offsets it holds over the restored ones."""
        folder = self._need_folder("restore")
        return await self._on_broker(self._restarted(lambda: self._load(folder, name)))

    def list_snapshots(self) -> list[SnapshotInfo]:
        return list_snapshots(self.snapshots_dir)

    def _need_folder(self, what: str) -> Path:
        if self._data_dir is None:
            raise SnapshotError(
                f"cannot {what} a broker with store='memory': use the default store (a "
                "temporary folder) for snapshots"
            )
        return self._data_dir

    def _save(self, folder: Path, name: str, replace: bool) -> SnapshotInfo:
        return save_snapshot(
            folder, self.snapshots_dir, name, clock_ms=self.clock.now_ms(), replace=replace
        )

    def _load(self, folder: Path, name: str) -> SnapshotInfo:
        info = restore_snapshot(self.snapshots_dir, name, folder)
        if info.clock_ms is not None:
            self.clock.set(info.clock_ms)
        return info

    async def _restarted(self, work: Callable[[], T]) -> T:
        """Stop the broker, do ``work`` on its stopped folder, start it again."""
        broker, self._broker = self.broker, None
        await broker.close()
        try:
            return await asyncio.to_thread(work)
        finally:
            await self._open()


class _OnBrokerLoop:
    """An object of the broker's whose methods must run on the broker's loop: each becomes
    a coroutine function (an awaitable result is awaited there too)."""

    def __init__(self, owner: EmbeddedBroker, target: Callable[[], object]) -> None:
        self._owner = owner
        self._target = target

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        owner, target = self._owner, self._target

        async def call(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # pytest: the failure, not our frames

            async def run() -> Any:
                result = getattr(target(), name)(*args, **kwargs)
                return await result if isinstance(result, Awaitable) else result

            return await owner._on_broker(run())

        return call


class _Blocking:
    """The broker's coroutine methods as plain calls, for tests without an event loop:
    ``broker.sync.advance("2h")``, ``broker.sync.expect_delivered("Orders", 3)``."""

    def __init__(self, owner: EmbeddedBroker | _OnBrokerLoop) -> None:
        self._owner = owner

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._owner, name)
        if isinstance(method, _OnBrokerLoop):
            return _Blocking(method)  # broker.sync.faults.plan(...)
        if not callable(method):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # pytest: the failure, not our frames
            result = method(*args, **kwargs)
            if not isinstance(result, Awaitable):
                return result
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return asyncio.run(_awaited(result))
            if isinstance(result, Coroutine):
                result.close()
            raise TypeError(
                f"broker.sync.{name}() would block this event loop: in an async test write "
                f"`await broker.{name}(...)`"
            )

        return call


async def _awaited(awaitable: Awaitable[T]) -> T:
    __tracebackhide__ = True  # pytest: the failure, not our frames
    return await awaitable
