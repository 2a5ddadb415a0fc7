"""The high-level consumer's fetcher: one thread per broker feeding the streams of its partitions.

A :class:`Fetcher` multifetches every owned partition of one broker and puts
chunks (lists of messages) into the bounded queue of each partition's
:class:`~ingest.client.consumer_stream.MessageStream`. A fetch that returns
nothing backs off (``backoff.increment.ms``, growing to 10x); a message larger
than the fetch size grows it up to ``max.fetch.size``, beyond which the stream
gets a :class:`~ingest.errors.FetchSizeTooSmallError`; an offset out of range
is reset through the connector's ``reset`` callable.

Replicated partitions: a fetcher is given them by the broker that led them at
the rebalance, but it looks up each one's current leader every round (through
its :class:`~ingest.client.leader_consumer.LeaderConsumer`'s cached metadata) and
multifetches from each leader in turn. NOT_LEADER_FOR_PARTITION,
LEADER_NOT_AVAILABLE or an unreachable leader drops the cached answer; the next
round (after the back-off) asks TOPIC_METADATA again and fetches from the new
leader at the same ``fetch_offset`` (byte offsets are the same on every
replica). A fetch between the high watermark and the log end returns nothing
("not yet there"), like one at the log end.

Concurrency: a fetcher owns its SimpleConsumer and its PartitionStates'
``fetch_offset``/``fetch_size``; ``stop`` may be called from any thread.
"""
from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

from ingest.client.consumer_stream import PartitionState
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import (
    BrokerUnavailableError,
    FetchSizeTooSmallError,
    IngestError,
)
from ingest.wire.errors import ErrorCode

log = logging.getLogger(__name__)

LEADER_MOVED = (ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE)


class Fetcher(threading.Thread):
    """Pulls every owned partition of one broker and feeds their streams until stopped.

    Args:
        consumer: the broker's consumer (for legacy partitions; None when it has none).
        reset: callable(state) -> new fetch offset, used on OFFSET_OUT_OF_RANGE.
        leaders: a :class:`~ingest.client.leader_consumer.LeaderConsumer` (this thread's own),
            required when ``states`` hold replicated partitions.
    """

    def __init__(self, consumer: SimpleConsumer | None, states: list[PartitionState], *,
                 backoff_s: float, max_fetch_size: int, reset: Callable[[PartitionState], int],
                 leaders=None, name: str | None = None) -> None:
        super().__init__(name=name or f"fetcher-{consumer.host}:{consumer.port}", daemon=True)
        self.consumer = consumer
        self.states = states
        self.backoff_s = backoff_s
        self.max_fetch_size = max_fetch_size
        self.reset = reset
        self.leaders = leaders
        self.stop_event = threading.Event()

    def _put(self, state: PartitionState, item) -> bool:
        while not self.stop_event.is_set():
            try:
                state.stream.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _routes(self) -> list[tuple[SimpleConsumer, list[PartitionState]]]:
        """This round's ``(consumer, states)`` pairs: the broker's own, then each leader's."""
        groups: dict[int, tuple[SimpleConsumer, list[PartitionState]]] = {}
        for s in self.states:
            if not s.replicated:
                c = self.consumer
            else:
                try:
                    c = self.leaders.leader(s.topic, s.partition)
                except (IngestError, ValueError) as exc:  # no leader, no broker answered, topic gone
                    log.info("%s/%d-%d: no leader to fetch from now: %s", s.topic, s.broker_id, s.partition, exc)
                    self.leaders.metadata.invalidate(s.topic)
                    continue
            groups.setdefault(id(c), (c, []))[1].append(s)
        return list(groups.values())

    def run(self) -> None:
        try:
            self._loop()
        finally:
            if self.leaders is not None:
                self.leaders.close()

    def _loop(self) -> None:
        idle = 0
        while not self.stop_event.is_set():
            if not self.states:
                self.stop_event.wait(self.backoff_s)
                continue
            got = failed = False
            for consumer, states in self._routes():
                result = self._fetch(consumer, states)
                if result is None:
                    return
                got, failed = got or result[0], failed or result[1]
            if got:
                idle = 0
            elif failed:
                self.stop_event.wait(self.backoff_s * 5)
            else:
                idle = min(idle + 1, 10)
                self.stop_event.wait(self.backoff_s * idle)

    def _moved(self, states: list[PartitionState], why) -> None:
        for s in states:
            if s.replicated:
                self.leaders.metadata.invalidate(s.topic)
        log.info("fetcher %s: %s; retrying", self.name, why)

    def _fetch(self, consumer: SimpleConsumer, states: list[PartitionState]) -> tuple[bool, bool] | None:
        """One multifetch of ``states`` from ``consumer``: ``(got something, failed)``; None when stopped."""
        reqs = [(s.topic, s.partition, s.fetch_offset, s.fetch_size) for s in states]
        try:
            answers = consumer.multifetch_raw(reqs)
        except BrokerUnavailableError as exc:
            self._moved(states, exc)
            return False, True
        except IngestError as exc:
            log.error("fetcher %s: %s", self.name, exc)
            return False, True
        got = failed = False
        for state, (error, result) in zip(states, answers):
            if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                new = self.reset(state)
                log.warning("%s/%d-%d: offset %d out of range; reset to %d", state.topic,
                            state.broker_id, state.partition, state.fetch_offset, new)
                state.fetch_offset = state.consumed = new
                continue
            if error in LEADER_MOVED and state.replicated:
                self._moved([state], f"{state.topic}/{state.broker_id}-{state.partition}: {consumer!r} answered "
                                     f"{ErrorCode(error).name}")
                failed = True
                continue
            if error == ErrorCode.CORRUPT_RANGE and result is not None and result.next_offset > state.fetch_offset:
                # damaged bytes on the broker: skip to the next valid message, as the loader does
                log.error("%s/%d-%d: offsets %d..%d are damaged on the broker (CORRUPT_RANGE); skipping them",
                          state.topic, state.broker_id, state.partition, state.fetch_offset, result.next_offset)
                state.fetch_offset = result.next_offset
                got = True
                continue
            if error:
                log.error("%s/%d-%d: fetch error %d", state.topic, state.broker_id, state.partition, error)
                continue
            if result.messages:
                got = True
                if not self._put(state, (state, result.messages)):
                    return None
                state.fetch_offset = result.next_offset
            elif result.needed is not None and result.needed > state.fetch_size:
                if result.needed > self.max_fetch_size:
                    err = FetchSizeTooSmallError(
                        f"message at {state.topic}/{state.broker_id}-{state.partition} offset "
                        f"{state.fetch_offset} needs {result.needed} bytes, above max.fetch.size "
                        f"{self.max_fetch_size}")
                    self._put(state, err)
                    self.states = [s for s in self.states if s is not state]
                    continue
                state.fetch_size = result.needed
                got = True
        return got, failed

    def stop(self) -> None:
        self.stop_event.set()
