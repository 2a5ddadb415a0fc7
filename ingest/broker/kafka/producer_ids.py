"""Where a broker's producer ids come from: blocks taken from ZooKeeper, or its own clock without ZooKeeper.

InitProducerId gives every idempotent producer an id that no other producer of the cluster was given,
before or after a restart of any broker (KIP-98), so the partitions' producer state never mixes two
producers' sequences:

- :class:`ZkProducerIds` (ZooKeeper): as Kafka's ZooKeeper-mode ``ProducerIdManager``, a broker takes
  blocks of :data:`BLOCK_SIZE` consecutive ids; ``/latest_producer_id_block`` holds the last block any
  broker took (:mod:`ingest.znodes`), moved on by a versioned write (a broker that loses the race reads
  again). Taking a block calls ZooKeeper, so it is done on the coordination thread, never on a network
  thread (:class:`~ingest.errors.NeedsZooKeeperError` sends the InitProducerId there); ids of the
  current block are handed out on any thread. A block taken whose write timed out but was applied is
  skipped, never given twice.
- :class:`LocalProducerIds` (one broker without ZooKeeper): a counter in the low 16 bits, the broker id
  in the next 10, the broker's start time in ms above them (since 2026-01-01): distinct across restarts
  unless the clock goes back.

Thread-safety: ``next()`` may be called from any thread.
"""
from __future__ import annotations

import logging
import threading
import time

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from ingest import znodes
from ingest.errors import CoordinationUnavailableError, NeedsZooKeeperError

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000
"""Ids per block (Kafka's ``PID_BLOCK_SIZE``)."""
MAX_PRODUCER_ID = 2 ** 63 - 1

_COUNTER_BITS, _BROKER_BITS = 16, 10
_EPOCH_MS = 1_767_225_600_000   # 2026-01-01: keeps the ids well inside int64 for centuries


class LocalProducerIds:
    """The ids one broker without ZooKeeper gives out (module docstring)."""

    def __init__(self, broker_id: int, now_ms: int | None = None) -> None:
        start = (now_ms if now_ms is not None else int(time.time() * 1000)) - _EPOCH_MS
        self._base = ((max(0, start) << _BROKER_BITS) | (broker_id % (1 << _BROKER_BITS))) << _COUNTER_BITS
        self._n = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            if self._n >> _COUNTER_BITS:   # the counter is full: move the time part on (never back)
                self._base += 1 << (_COUNTER_BITS + _BROKER_BITS)
                self._n = 0
            n = self._n
            self._n += 1
            return self._base | n


class ZkProducerIds:
    """Blocks of producer ids from ``/latest_producer_id_block`` (module docstring).

    Args:
        broker_id: written into the block node (who took it).
        zk: the broker's :class:`~ingest.broker.zk_deadline.DeadlineCalls`; ``client`` its KazooClient.
        coordinated: the coordination thread (``on_worker()``, ``deadline``).
    """

    def __init__(self, broker_id: int, zk, client, coordinated) -> None:
        self.broker_id = broker_id
        self._zk = zk
        self._client = client
        self._coordinated = coordinated
        self._lock = threading.Lock()
        self._next, self._end = 0, -1   # no block yet

    def next(self) -> int:
        """The next id of this broker's block; takes a new block when it is used up.

        Raises:
            NeedsZooKeeperError: a new block is needed and this is not the coordination thread.
            CoordinationUnavailableError: ZooKeeper did not answer by the request's deadline.
        """
        with self._lock:
            if self._next <= self._end:
                self._next += 1
                return self._next - 1
        if not self._coordinated.on_worker():
            raise NeedsZooKeeperError("a new block of producer ids needs ZooKeeper")
        start, end = self._take_block(self._coordinated.deadline)
        with self._lock:
            if self._next > self._end:   # only the coordination thread takes blocks
                self._next, self._end = start, end
            self._next += 1
            return self._next - 1

    def _take_block(self, deadline: float) -> tuple[int, int]:
        path = znodes.LATEST_PRODUCER_ID_BLOCK
        call, c = self._zk.call, self._client
        while True:
            try:
                data, stat = call(deadline, c.get_async, path, what="read the latest producer id block")
            except NoNodeError:
                data, stat = None, None
            if data:
                try:
                    _s, last = znodes.parse_producer_id_block(data)
                except ValueError as exc:
                    raise CoordinationUnavailableError(f"{path} is damaged ({exc}); no producer ids can be "
                                                       "given until it is repaired") from exc
                start = last + 1
            else:
                start = 0
            end = start + BLOCK_SIZE - 1
            if end > MAX_PRODUCER_ID:
                raise CoordinationUnavailableError(f"the producer ids are used up ({path} ends at {start - 1})")
            value = znodes.producer_id_block_value(self.broker_id, start, end)
            try:
                if stat is None:
                    call(deadline, c.create_async, path, value, what="create the producer id block")
                else:
                    call(deadline, c.set_async, path, value, stat.version, what="take a producer id block")
            except (BadVersionError, NodeExistsError):
                continue   # another broker took a block first: read again
            except KazooException as exc:
                raise CoordinationUnavailableError(f"cannot take a producer id block: {exc!r}") from exc
            log.info("broker %d took producer ids %d..%d", self.broker_id, start, end)
            return start, end
