"""The high-level consumer's message streams and the per-partition state they share with fetchers.

A :class:`PartitionState` is one owned partition in one rebalance *generation*
(a replicated partition is named by its home broker and fetched from its leader):
where the fetcher reads next (``fetch_offset``) and what the application has
finished with (``consumed``, committed to ZooKeeper). Fetcher threads
(:mod:`ingest.client.fetcher`) put chunks (lists of messages) into the bounded
queue of the partition's :class:`MessageStream`; the application iterates it.

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

import queue
from dataclasses import dataclass
from typing import Callable, Iterator

from ingest.errors import ConsumerTimeoutError
from ingest.records.message_batch import MessageAndOffset


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
    replicated: bool = False  # broker_id is the home broker; fetched from the current leader


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
