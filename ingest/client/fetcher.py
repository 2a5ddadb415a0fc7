"""The high-level consumer's fetcher: one thread per broker feeding the streams of its partitions.

A :class:`Fetcher` multifetches every owned partition of one broker and puts
chunks (lists of messages) into the bounded queue of each partition's
:class:`~ingest.client.consumer_stream.MessageStream`. A fetch that returns
nothing backs off (``backoff.increment.ms``, growing to 10x); a message larger
than the fetch size grows it up to ``max.fetch.size``, beyond which the stream
gets a :class:`~ingest.errors.FetchSizeTooSmallError`; an offset out of range
is reset through the connector's ``reset`` callable.

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
from ingest.errors import BrokerUnavailableError, ErrorCode, FetchSizeTooSmallError, IngestError

log = logging.getLogger(__name__)


class Fetcher(threading.Thread):
    """Pulls every owned partition of one broker and feeds their streams until stopped.

    Args:
        reset: callable(state) -> new fetch offset, used on OFFSET_OUT_OF_RANGE.
    """

    def __init__(self, consumer: SimpleConsumer, states: list[PartitionState], *,
                 backoff_s: float, max_fetch_size: int, reset: Callable[[PartitionState], int]) -> None:
        super().__init__(name=f"fetcher-{consumer.host}:{consumer.port}", daemon=True)
        self.consumer = consumer
        self.states = states
        self.backoff_s = backoff_s
        self.max_fetch_size = max_fetch_size
        self.reset = reset
        self.stop_event = threading.Event()

    def _put(self, state: PartitionState, item) -> bool:
        while not self.stop_event.is_set():
            try:
                state.stream.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        idle = 0
        while not self.stop_event.is_set():
            if not self.states:
                self.stop_event.wait(self.backoff_s)
                continue
            reqs = [(s.topic, s.partition, s.fetch_offset, s.fetch_size) for s in self.states]
            try:
                answers = self.consumer.multifetch_raw(reqs)
            except BrokerUnavailableError as exc:
                log.info("fetcher %s: %s; retrying", self.name, exc)
                self.stop_event.wait(self.backoff_s * 5)
                continue
            except IngestError as exc:
                log.error("fetcher %s: %s", self.name, exc)
                self.stop_event.wait(self.backoff_s * 5)
                continue
            got = False
            for state, (error, result) in zip(self.states, answers):
                if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    new = self.reset(state)
                    log.warning("%s/%d-%d: offset %d out of range; reset to %d", state.topic,
                                state.broker_id, state.partition, state.fetch_offset, new)
                    state.fetch_offset = state.consumed = new
                    continue
                if error == ErrorCode.CORRUPT_RANGE and result is not None:
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
                        return
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
            if got:
                idle = 0
            else:
                idle = min(idle + 1, 10)
                self.stop_event.wait(self.backoff_s * idle)

    def stop(self) -> None:
        self.stop_event.set()
