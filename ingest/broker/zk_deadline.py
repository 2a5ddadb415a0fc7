"""ZooKeeper calls bounded by a deadline, for work that a client is waiting on.

``client.retry`` (kazoo's default retry) repeats a call for as long as the connection is lost,
with a back-off that doubles up to an hour: right for a background thread that must succeed
eventually (registration, the controller), wrong for a request a client waits on, which then
waits for the whole outage and more (the back-off overshoots it). :class:`DeadlineCalls` runs a
kazoo call only while the session is connected, waits for its answer only until a deadline, and
retries a lost connection with a short back-off within that deadline (``KazooRetry`` with a
deadline, the recipe for bounded retries); then it raises
:class:`~ingest.errors.CoordinationUnavailableError` (wire 30, retriable). This is what Kafka's
ZooKeeper client does with ``zookeeper.connection.timeout.ms``: a request waits that long for the
connection, then fails.

A call that times out while connected is abandoned, not cancelled: ZooKeeper may still apply it (a
create) a moment later, so a retry must accept finding the node (``NodeExistsError``).

Thread-safety: any thread may call; the connection state is an Event set by a kazoo listener
(listeners run on kazoo's event thread and only set or clear it).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from ingest.errors import CoordinationUnavailableError

log = logging.getLogger(__name__)

RETRY_DELAY_S = 0.05
RETRY_MAX_DELAY_S = 0.5
"""Back-off between attempts after a lost connection: doubling from the first to the second."""


class DeadlineCalls:
    """Bounded calls on one started KazooClient (see the module docstring)."""

    def __init__(self, client) -> None:
        self.client = client
        self._connected = threading.Event()
        client.add_listener(self._on_state)
        if client.state == KazooState.CONNECTED:
            self._connected.set()

    def _on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()

    def call(self, deadline: float, op: Callable[..., Any], *args: Any, what: str, **kwargs: Any) -> Any:
        """``op(*args, **kwargs)`` (a kazoo ``*_async`` method) answered before ``deadline`` (monotonic).

        Raises:
            CoordinationUnavailableError: not connected, or no answer, by the deadline (``what`` names
                the call in its message).
            KazooException: ZooKeeper's own answer (``NoNodeError``, ``NodeExistsError``, ...).
        """
        def unavailable(cause: str) -> CoordinationUnavailableError:
            return CoordinationUnavailableError(
                f"ZooKeeper did not answer ({what}) within zk.connectiontimeout.ms: {cause}; retry")

        def attempt() -> Any:
            left = deadline - time.monotonic()
            if left <= 0 or not self._connected.wait(left):
                raise unavailable("not connected (down, or unreachable from this broker)")
            return op(*args, **kwargs).get(timeout=max(0.0, deadline - time.monotonic()))

        retry = KazooRetry(max_tries=-1, delay=RETRY_DELAY_S, max_delay=RETRY_MAX_DELAY_S, ignore_expire=True,
                           deadline=max(0.0, deadline - time.monotonic()))
        try:
            return retry(attempt)
        except (KazooTimeoutError, RetryFailedError, ConnectionLoss, OperationTimeoutError,
                SessionExpiredError) as exc:
            raise unavailable(f"{type(exc).__name__} {exc}".strip()) from exc
