"""Producer: partitions messages over the brokers and publishes them, sync or async.

Partitioning, replicated topics (Kafka 0.8; TOPIC_METADATA lists the topic): the
partitioner picks an index into the topic's partitions ``0..P-1`` (stable CRC-32
of the key modulo P, or random without a key), so a key keeps its partition
across leader changes; each batch goes to its partition's current leader.

Partitioning, unreplicated (Kafka 0.7) topics: a topic's partitions are listed as
sorted ``(broker_id, partition)`` pairs over the live brokers and the partitioner
picks an index into that list. Partition counts come from the brokers' METADATA
answers; a broker that does not know the topic yet contributes its partition 0
(sending there creates the topic with the broker's ``num.partitions``, as Kafka
0.7's producer bootstrapped new topics; a broker with ``default.replication.factor``
> 1 creates a replicated topic instead and answers LEADER_NOT_AVAILABLE until its
leaders are elected: the producer waits for them, within ``delivery.timeout.ms``).
All payloads of one ``send`` call go to the same partition, in order.

Acknowledgement (``request.required.acks``): ``1`` (default): every batch is one
PRODUCE_ACK answered once the broker (a replicated partition's leader) appended it,
with the offset of its first message, so ``SendResult.first_offset`` is exact;
``-1``: a PRODUCE_ACKS answered once every in-sync replica has the batch (the
leader waits up to ``request.timeout.ms``, then answers REQUEST_TIMED_OUT; it
refuses with NOT_ENOUGH_REPLICAS while fewer than its ``min.insync.replicas`` are
in sync); ``0``: fire-and-forget PRODUCE (the Kafka 0.7 protocol), ``first_offset``
is None. Any other value is refused by the config.

Modes (``producer.type``):

- ``sync``: ``send`` returns after the broker acknowledged the batch, or raises.
- ``async``: ``send`` enqueues into a bounded queue (``queue.size`` messages); a
  sender thread sends when ``batch.size`` messages are queued or the oldest has
  waited ``queue.time`` ms. Queue full: ``queue.full.policy=block`` waits up to
  ``queue.enqueue.timeout.ms`` (-1 forever) and then raises ProducerQueueFullError
  (nothing of that call is enqueued past the point of failure: the messages not
  enqueued are reported failed to the callback); ``drop`` drops at once, counts the
  drop in ``stats['dropped']`` and reports the dropped messages to the callback as
  failed.

Failures (:mod:`ingest.client.send_batch` has the details): every batch has a time
budget, ``delivery.timeout.ms``, and up to ``message.send.max.retries`` re-sends,
with a back-off from ``retry.backoff.ms`` doubling up to ``retry.backoff.max.ms``.
Unreplicated topic: a batch whose broker cannot be reached marks that broker down
for an exponentially growing time (up to ``reconnect.backoff.max.ms``), during
which its partitions are left out of the list, and is re-sent to another live
partition; the wait while no broker is registered at all (as while brokers
re-register after a ZooKeeper outage) is not a failed attempt, it ends when a
broker appears. Brokers listed but down fail an attempt at once. Replicated topic
(failover): after NOT_LEADER_FOR_PARTITION, LEADER_NOT_AVAILABLE, a connection
failure, NOT_ENOUGH_REPLICAS or REQUEST_TIMED_OUT the batch is re-sent to the same
partition's leader, re-read from TOPIC_METADATA (an election is waited out; one
leader's failure costs one retry however long the election takes); each leader
change is logged once at INFO. At-least-once: a batch whose ack was lost, or whose
first attempt timed out or died with its leader after the followers copied it,
may be appended twice (Kafka 0.8 has no idempotent producer). Each batch ends in
exactly one callback ``SendResult(topic, broker_id, partition, count, first_offset,
error)`` per ``send`` call it contains; ``broker_id`` is the broker that
acknowledged (the leader).

Concurrency: ``send``, ``flush`` and ``close`` may be called from any thread.
Callbacks run on the sender thread (async) or the caller's thread (sync) and
must not call ``flush``/``close``.
"""
from __future__ import annotations

import itertools
import logging
import threading
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable, Sequence

from ingest.client.cluster import ClusterView
from ingest.client.discovery import Discovery, make_discovery
from ingest.client.kafka_sender import KafkaSender
from ingest.client.producer_config import PRODUCER_CONFIG, codec_number, format_magic
from ingest.client.send_batch import BatchSender, SendResult
from ingest.client.topic_routes import Sender, TopicRoutes
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.errors import ConfigError, IngestError, MessageTooLargeError, ProducerClosedError, ProducerQueueFullError
from ingest.records.message import HEADER_SIZE

log = logging.getLogger(__name__)

__all__ = ["Producer", "SendResult"]


Callback = Callable[[SendResult], None]


@dataclass(slots=True)
class _Item:
    """The payloads of one ``send`` call (or of a part of it) waiting in the async queue."""

    topic: str
    payloads: list[bytes]
    key: bytes | str | None
    callback: Callback | None


class _Marker:
    """Queue marker: flush (``event`` set when everything before it was sent) or close."""

    def __init__(self, close: bool = False) -> None:
        self.close = close
        self.event = threading.Event()


class Producer:
    """Publishes to a broker cluster found through ``zk.connect`` or ``broker.list``.

    Args:
        config: a :data:`PRODUCER_CONFIG` Config (or a plain dict of its keys).
        clock: for back-off sleeps and batching deadlines.
        discovery: an existing Discovery to share (not closed by the producer).
    """

    def __init__(self, config: Config | dict, *, clock: Clock = SYSTEM_CLOCK,
                 discovery: Discovery | None = None) -> None:
        if not isinstance(config, Config):
            config = PRODUCER_CONFIG.parse(config)
        self.config = config
        self.clock = clock
        self._own_discovery = discovery is None
        self.discovery = discovery or make_discovery(config)
        self.codec = codec_number(config["compression.codec"])
        self.magic = format_magic(config["message.format"])
        if self.magic == 0 and self.codec:
            raise ConfigError(f"message.format=0.6 (magic 0, no attributes byte) cannot carry compression.codec="
                              f"{config['compression.codec']}: use compression.codec=none, or message.format=0.7 "
                              "or ingest for compressed sets")
        self.acks = config["request.required.acks"]
        self._lock = threading.Lock()  # guards stats
        self.cluster = ClusterView(config, self.discovery, clock=clock, nodelay=bool(self.acks))
        self._max_message_size = config["max.message.size"]
        self.stats = {"sent": 0, "acked": 0, "failed": 0, "dropped": 0, "retries": 0}
        self._sender_of_batches = BatchSender(self.cluster, config, codec=self.codec, magic=self.magic, clock=clock,
                                              stats=self.stats, stats_lock=self._lock)
        self.routes = TopicRoutes(config, self.discovery, self.cluster, self._sender_of_batches,
                                  lambda servers: KafkaSender(config, servers, codec=self.codec, clock=clock),
                                  clock=clock)
        self._closed = False
        self._async = config["producer.type"] == "async"
        self._sender: threading.Thread | None = None
        self._capacity = config["queue.size"]
        self._block = config["queue.full.policy"] == "block"
        self._enqueue_timeout_s = config["queue.enqueue.timeout.ms"] / 1000.0
        self._items: deque = deque()           # _Item and _Marker, guarded by _qlock
        self._queued = 0                       # messages in _items, bounded by queue.size
        self._qlock = threading.Lock()
        self._not_empty = threading.Condition(self._qlock)
        self._not_full = threading.Condition(self._qlock)
        self._give_up_at: float | None = None  # close(timeout_s): after it, queued messages are failed unsent
        self._given_up = 0
        if self._async:
            self._sender = threading.Thread(target=self._run_sender, name="producer-sender", daemon=True)
            self._sender.start()

    # --- public API -----------------------------------------------------------------

    def send(self, topic: str, payloads: Sequence[bytes], key: bytes | str | None = None,
             callback: Callback | None = None) -> None:
        """Publish ``payloads`` (in order, to one partition chosen by ``key``).

        Raises:
            MessageTooLargeError: a payload exceeds ``max.message.size``.
            ProducerQueueFullError: async, policy block, no room within the timeout.
            IngestError: sync, the batch failed after all retries (callback called first).
        """
        if self._closed:
            raise IngestError("producer is closed; create a new Producer")
        if isinstance(payloads, (bytes, bytearray, memoryview)):
            payloads = [bytes(payloads)]
        if not payloads:
            return
        limit = self._max_message_size
        if max(map(len, payloads)) > limit:   # one C-level pass; name the first offender
            size = next(n for n in map(len, payloads) if n > limit)
            raise MessageTooLargeError(
                f"payload of {size} bytes for topic {topic!r} exceeds max.message.size {limit}")
        if not self._async:
            try:
                sender = self.routes.sender(topic)
            except IngestError as exc:
                result = SendResult(topic, -1, -1, len(payloads), None, exc)
            else:
                result = sender.send(topic, list(payloads), key)
                if result.error is not None:
                    self.routes.forget(topic, result.error)
            self._account(result)
            if callback is not None:
                callback(result)
            if result.error is not None:
                raise result.error
            return
        self._enqueue(topic, payloads, key, callback)

    def flush(self, timeout_s: float | None = None) -> None:
        """Async: block until everything enqueued before this call was sent (or failed)."""
        if not self._async or self._sender is None or not self._sender.is_alive():
            return
        marker = _Marker()
        self._put_marker(marker)
        if not marker.event.wait(timeout_s):
            raise IngestError(f"producer flush did not finish within {timeout_s} s")

    def close(self, timeout_s: float | None = None) -> None:
        """Drain the async queue (every queued message is sent or reported failed), then disconnect.

        ``timeout_s`` (None: no limit): once it has passed, a batch being retried stops retrying and
        what is still queued is not sent; those messages are reported failed (``stats['failed']``,
        the callback's error a :class:`~ingest.errors.ProducerClosedError`), as Kafka's
        ``KafkaProducer.close(timeout)`` fails its unsent records. A request in flight at that
        moment still gets its answer (at most ``socket.timeout.ms``).
        """
        if self._closed:
            return
        self._closed = True
        if self._async and self._sender is not None and self._sender.is_alive():
            if timeout_s is not None:
                self._give_up_at = self.clock.monotonic() + max(0.0, timeout_s)
                self._sender_of_batches.give_up_at = self._give_up_at   # the batch being retried, too
                if self.routes.kafka is not None:
                    self.routes.kafka.give_up_at = self._give_up_at
            marker = _Marker(close=True)
            self._put_marker(marker)
            self._sender.join()
            if self._given_up:
                log.error("producer closed with %d message(s) unsent after its close timeout of %.1f s; they are "
                          "reported failed", self._given_up, timeout_s)
        self.routes.close()
        self.cluster.close()
        if self._own_discovery:
            self.discovery.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- cluster view (delegated) ------------------------------------------------------------

    def partitions(self, topic: str) -> list[tuple[int, int]]:
        """Replicated or Kafka-format topic: ``(leader, partition)`` per partition, in partition order
        (leader -1 while there is none). Otherwise sorted ``(broker_id, partition)`` over the live brokers."""
        sender = self.routes.sender(topic)
        if isinstance(sender, KafkaSender):
            return sender.leaders(topic)
        leaders = self.cluster.leaders(topic)
        return leaders if leaders is not None else self.cluster.partitions(topic)

    def _account(self, result: SendResult) -> None:
        with self._lock:
            self.stats["sent"] += result.count
            if result.error is None:
                self.stats["acked"] += result.count
            else:
                self.stats["failed"] += result.count
        if result.error is not None:
            log.error("failed to send %d messages to %s: %s", result.count, result.topic, result.error)

    # --- async ---------------------------------------------------------------------------
    # The queue is a deque guarded by one lock with two conditions (as queue.Queue, minus its
    # layers: measured 3x cheaper per send). _queued counts messages, bounded by queue.size.

    def _enqueue(self, topic: str, payloads: Sequence[bytes], key, callback) -> None:
        """Put the call's payloads on the queue as few items, within ``queue.size`` messages."""
        payloads = payloads if isinstance(payloads, list) else list(payloads)
        n = len(payloads)
        with self._qlock:
            if self._queued + n <= self._capacity:  # the common case: room for all
                self._queued += n
                self._items.append(_Item(topic, payloads, key, callback))
                self._not_empty.notify()
                return
        deadline = None if self._enqueue_timeout_s < 0 else self.clock.monotonic() + self._enqueue_timeout_s
        done = 0
        while done < n:
            with self._qlock:
                room = self._capacity - self._queued
                while room <= 0 and self._block and not self._closed:
                    wait = None if deadline is None else deadline - self.clock.monotonic()
                    if wait is not None and wait <= 0:
                        break
                    self._not_full.wait(wait)
                    room = self._capacity - self._queued
                if room <= 0:
                    break
                take = min(room, n - done)
                self._queued += take
                self._items.append(_Item(topic, payloads[done:done + take], key, callback))
                self._not_empty.notify()
            done += take
        if done == n:
            return
        rest = n - done
        err = ProducerQueueFullError(
            f"async producer queue full ({self._capacity} messages, policy "
            f"{self.config['queue.full.policy']}): {rest} messages for topic {topic!r} not enqueued")
        with self._lock:
            self.stats["sent"] += rest
            self.stats["failed"] += rest
            if not self._block:
                self.stats["dropped"] += rest
        if callback is not None:
            callback(SendResult(topic, -1, -1, rest, None, err))
        if self._block:
            raise err
        log.warning("%s", err)

    def _put_marker(self, marker: "_Marker") -> None:
        with self._qlock:
            self._items.append(marker)
            self._not_empty.notify()

    def _run_sender(self) -> None:
        batch_size = self.config["batch.size"]
        linger = self.config["queue.time"] / 1000.0
        pending: list[_Item] = []
        count = 0
        first_at = 0.0
        while True:
            marker = None
            with self._qlock:
                while not self._items:
                    if not pending:
                        self._not_empty.wait()
                        continue
                    wait = first_at + linger - self.clock.monotonic()
                    if wait <= 0:
                        break
                    self._not_empty.wait(wait)
                while self._items and count < batch_size:
                    item = self._items.popleft()
                    if isinstance(item, _Marker):
                        marker = item
                        break
                    if not pending:
                        first_at = self.clock.monotonic()
                    pending.append(item)
                    count += len(item.payloads)
            if marker is not None or count >= batch_size or (
                    pending and self.clock.monotonic() - first_at >= linger):
                self._drain(pending)
                pending, count = [], 0
            if marker is not None:
                marker.event.set()
                if marker.close:
                    return

    def _drain(self, items: list[_Item]) -> None:
        """Send queued items grouped per topic-partition, at most ``batch.size`` messages per request."""
        if not items:
            return
        batch_size = self.config["batch.size"]
        groups: dict[tuple, list[tuple[Callback | None, bytes, bytes | str | None]]] = defaultdict(list)
        keys: dict[tuple, bytes | str | None] = {}
        keyless_route: dict[str, object] = {}
        for item in items:
            try:
                sender = self.routes.sender(item.topic)
            except IngestError as exc:   # the topic's kind cannot be decided now: its messages fail
                entries = [(item.callback, p, item.key) for p in item.payloads]
                self._report(SendResult(item.topic, -1, -1, len(entries), None, exc), entries, None)
                self._account(SendResult(item.topic, -1, -1, len(entries), None, exc))
                continue
            try:
                if item.key is None:
                    if item.topic not in keyless_route:
                        keyless_route[item.topic] = sender.route(item.topic, None)
                    route = keyless_route[item.topic]
                else:
                    route = sender.route(item.topic, item.key)
                gkey = (item.topic, sender, route, None)
            except IngestError:
                gkey = (item.topic, sender, None, item.key)  # routed (and retried, or failed) per key below
            keys.setdefault(gkey, item.key)
            cb = item.callback
            groups[gkey].extend((cb, p, item.key) for p in item.payloads)
        try:
            for gkey, entries in groups.items():
                topic, sender, route, _ = gkey
                for i in range(0, len(entries), batch_size):
                    chunk = entries[i:i + batch_size]
                    give_up_at = self._give_up_at
                    if give_up_at is not None and self.clock.monotonic() >= give_up_at:
                        result = self._unsent(topic, len(chunk))
                    else:
                        result = sender.send(topic, [p for _, p, _ in chunk], keys[gkey], route,
                                             keys=[k for _, _, k in chunk])
                        self._account(result)
                        if result.error is not None:
                            self.routes.forget(topic, result.error)
                    self._report(result, chunk, sender)
        finally:
            with self._qlock:
                self._queued -= sum(len(i.payloads) for i in items)
                self._not_full.notify_all()

    def _unsent(self, topic: str, count: int) -> SendResult:
        """A batch not sent because the close timeout passed: counted failed (logged once, by close)."""
        with self._lock:
            self.stats["sent"] += count
            self.stats["failed"] += count
        self._given_up += count
        return SendResult(topic, -1, -1, count, None, ProducerClosedError(
            f"{count} message(s) for topic {topic!r} not sent: the producer was closed and its close "
            "timeout passed"))

    def _report(self, result: SendResult, entries: list[tuple[Callback | None, bytes, object]],
                sender: Sender | None) -> None:
        """One callback per run of one ``send`` call's messages in the batch, with its first offset
        (record offsets count records; byte offsets, of an uncompressed 0.7 set, count bytes)."""
        offset = result.first_offset
        records = getattr(sender, "record_offsets", False)
        position = 0
        for callback, run in itertools.groupby(entries, key=lambda e: e[0]):
            run = list(run)
            if callback is not None:
                first = None
                if offset is not None:
                    first = offset + position if records or not self.codec else offset
                try:
                    callback(SendResult(result.topic, result.broker_id, result.partition, len(run),
                                        first, result.error))
                except Exception:
                    log.exception("producer callback failed")
            if offset is not None:
                if records:
                    position += len(run)
                elif not self.codec:
                    position += sum(HEADER_SIZE + len(e[1]) for e in run)
