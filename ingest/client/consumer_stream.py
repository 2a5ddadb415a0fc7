"""Streams and fetchers of the high-level consumer.

A :class:`PartitionState` is one owned partition in one rebalance *generation*:
where the fetcher reads next (``fetch_offset``) and what the application has
finished with (``consumed``, committed to ZooKeeper). A :class:`Fetcher` thread
per broker multifetches every owned partition of that broker and puts chunks
(lists of messages) into the bounded queue of the partition's
:class:`MessageStream`.

At-least-once: a message counts as consumed only when the application asks the
stream for the *next* message (or calls ``commit_offsets`` with
``include_current``), so an application that dies while handling a message
has not committed it. Chunks of an older generation are dropped by the stream,
so after a rebalance no message of a partition this consumer lost is handed out.

Concurrency: ``PartitionState.consumed`` is written by the stream's thread and
read by the committer (a plain int store, atomic under the GIL); a stream is
iterated by one application thread.
"""
from __future__ import annotations

import logging
import queue
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

from ingest.broker.message_set import MessageAndOffset
from ingest.client.simple_consumer import SimpleConsumer
from ingest.errors import (BrokerUnavailableError, ConsumerTimeoutError, ErrorCode, FetchSizeTooSmallError,
                           IngestError)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PartitionState:
    topic: str
    broker_id: int
    partition: int
    generation: int
    fetch_offset: int
    consumed: int
    committed: int
    fetch_size: int
    stream: "MessageStream"


@dataclass(frozen=True, slots=True)
class ConsumedMessage:
    """A message handed to the application, with where it came from."""

    topic: str
    broker_id: int
    partition: int
    offset: int
    next_offset: int
    payload: bytes


_STOP = object()


class MessageStream:
    """An iterator of :class:`ConsumedMessage` fed by the fetchers.

    Args:
        generation: callable returning the connector's current generation.
        timeout_s: raise ConsumerTimeoutError after this long without a message (None = wait).
    """

    def __init__(self, name: str, max_chunks: int, generation: Callable[[], int], timeout_s: float | None) -> None:
        self.name = name
        self.queue: queue.Queue = queue.Queue(maxsize=max_chunks)
        self._generation = generation
        self._timeout_s = timeout_s
        self._chunk: Iterator[MessageAndOffset] | None = None
        self._chunk_state: PartitionState | None = None
        self._last: tuple[PartitionState, int] | None = None
        self._stopped = False

    def __iter__(self) -> "MessageStream":
        return self

    def mark_current_consumed(self) -> None:
        """Count the message last handed out as consumed (the app is done with it)."""
        last, self._last = self._last, None
        if last is not None:
            state, next_offset = last
            if state.generation == self._generation() and next_offset > state.consumed:
                state.consumed = next_offset

    def __next__(self) -> ConsumedMessage:
        self.mark_current_consumed()
        while True:
            if self._stopped:
                raise StopIteration
            if self._chunk is not None:
                state = self._chunk_state
                if state.generation == self._generation():
                    m = next(self._chunk, None)
                    if m is not None:
                        if m.offset < state.consumed:  # already consumed before a re-fetch
                            continue
                        self._last = (state, m.next_offset)
                        return ConsumedMessage(state.topic, state.broker_id, state.partition,
                                               m.offset, m.next_offset, m.payload)
                self._chunk = None
            try:
                item = self.queue.get(timeout=self._timeout_s)
            except queue.Empty:
                raise ConsumerTimeoutError(
                    f"stream {self.name}: no message within {self._timeout_s * 1000:.0f} ms") from None
            if item is _STOP:
                self._stopped = True
                raise StopIteration
            if isinstance(item, BaseException):
                raise item
            state, messages = item
            self._chunk, self._chunk_state = iter(messages), state

    def clear(self) -> None:
        """Drop queued chunks (used while fetchers are stopped during a rebalance)."""
        kept = []
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                kept.append(item)
        for item in kept:
            self.queue.put_nowait(item)

    def stop(self) -> None:
        self.clear()
        try:
            self.queue.put_nowait(_STOP)
        except queue.Full:
            pass


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
