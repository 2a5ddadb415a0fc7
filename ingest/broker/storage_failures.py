"""Publishes which of this broker's replicas cannot write: ``/brokers/storage_failures/[broker_id]``.

A replica whose append failed for the storage's sake (disk full, a failed write or fsync, its
log offline) is *storage-failed* until a write succeeds on it again
(:class:`~ingest.broker.partition.ReplicatedPartition`). The broker cannot tell the controller
by RPC (brokers and controller talk through ZooKeeper only, docs/replication.md), so it keeps
the set in one ephemeral node, present while the set is not empty. The controller watches it
and moves leadership and in-sync membership away from those replicas; a leader does not let
them rejoin its in-sync set. The node is ephemeral: a broker that dies or loses its session
takes it along (a restarted broker recovers its logs and is judged afresh).

The node is written by a task on the broker's :class:`~ingest.broker.scheduler.KafkaScheduler`,
never by the thread that found the failure (a network thread serving a produce must not wait on
ZooKeeper): :meth:`update` records the wanted set, wakes the task and returns. The task writes it
with calls bounded by :data:`CALL_S` each, does nothing while the session is not connected (it is
woken when it is again), retries every :data:`RETRY_S` while ZooKeeper refuses or does not answer
(one rate-limited WARNING a minute), and writes it again after a session loss. So it never holds
a scheduler thread for longer than a few bounded calls.

Thread-safety: :meth:`update` may be called from any thread.
"""
from __future__ import annotations

import logging
import threading
import time

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from ingest import znodes
from ingest.broker.scheduler import KafkaScheduler
from ingest.broker.zk_deadline import DeadlineCalls
from ingest.errors import CoordinationUnavailableError
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""Pause before writing the node again after ZooKeeper refused or could not be reached."""
CALL_S = 5.0
"""Longest wait for one ZooKeeper call's answer; then the write is retried later."""
LOG_INTERVAL_S = 60.0


class StorageFailurePublisher:
    """Keeps ``/brokers/storage_failures/[broker_id]`` equal to the set given to :meth:`update`."""

    def __init__(self, client, broker_id: int, scheduler: KafkaScheduler | None = None) -> None:
        self.client = client
        self._calls = DeadlineCalls(client)
        self.broker_id = broker_id
        self.path = znodes.storage_failures_path(broker_id)
        self._wanted: dict[tuple[str, int], str] = {}
        self._written: dict[tuple[str, int], str] | None = {}   # None: unknown (after a session loss)
        self._losses = 0                                         # session losses so far
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._errors = RateLimitedLog(log, interval_s=LOG_INTERVAL_S)
        self._own_scheduler = scheduler is None
        self._scheduler = scheduler or KafkaScheduler(1, name=f"storage-failures-{broker_id}")
        self._task = self._scheduler.schedule(f"storage-failures-{broker_id}", self._publish)

    def start(self) -> "StorageFailurePublisher":
        self.client.add_listener(self._on_session)
        if self._own_scheduler:
            self._scheduler.start()
        self._task.wake()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._task.cancel(wait_s=10)
        if self._own_scheduler:
            self._scheduler.shutdown(10)

    def update(self, failures: dict[tuple[str, int], str]) -> None:
        """The replicas that cannot write now (``{(topic, partition): error name}``); returns at once."""
        with self._lock:
            self._wanted = dict(failures)
        self._task.wake()

    def _on_session(self, state: str) -> None:
        # kazoo's event thread: never block here
        if state == KazooState.LOST:
            with self._lock:
                self._written = None     # the ephemeral node is gone with the session
                self._losses += 1
        elif state == KazooState.CONNECTED:
            self._task.wake()

    def _publish(self) -> None:
        """One run of the task: write the wanted set if it is not what ZooKeeper holds."""
        if self._stop.is_set():
            return
        with self._lock:
            wanted, written, losses = dict(self._wanted), self._written, self._losses
        if wanted == written:
            return
        if not self.client.connected:
            self._task.wake(RETRY_S)   # and at once when the session is connected again
            return
        try:
            self._write(wanted)
        except (KazooException, KazooTimeoutError, CoordinationUnavailableError) as exc:
            self._errors.warning(self.path, "write failed", "cannot write %s to ZooKeeper (%s); retrying "
                                 "every %.0f s", self.path, exc, RETRY_S)
            self._task.wake(RETRY_S)
            return
        with self._lock:
            if self._losses == losses:   # else the session that wrote it is gone: write again
                self._written = wanted
            else:
                self._task.wake()
        log.info("storage failures of broker %d published: %s", self.broker_id,
                 ", ".join(f"{t}-{p} ({e})" for (t, p), e in sorted(wanted.items())) or "none")

    def _call(self, op: str, *args, **kwargs):
        """``client.<op>_async(*args, **kwargs)``'s answer within :data:`CALL_S`."""
        return self._calls.call(time.monotonic() + CALL_S, getattr(self.client, f"{op}_async"), *args,
                                what=f"{op} {self.path}", **kwargs)

    def _write(self, wanted: dict[tuple[str, int], str]) -> None:
        c = self.client
        if not wanted:
            try:
                self._call("delete", self.path)
            except NoNodeError:
                pass
            return
        data = znodes.storage_failures_value(wanted)
        try:
            self._call("create", self.path, data, ephemeral=True, makepath=True)
            return
        except NodeExistsError:
            pass
        _, stat = self._call("get", self.path)
        if stat.ephemeralOwner == c.client_id[0]:   # ours: an earlier write, or a retried create that landed
            self._call("set", self.path, data, version=stat.version)
            return
        # left by this broker's previous process, whose session has not expired yet: it would take
        # the node along when it does
        self._call("delete", self.path, version=stat.version)
        self._call("create", self.path, data, ephemeral=True, makepath=True)
