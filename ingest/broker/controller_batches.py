"""Partition-state changes in batches: pipelined reads, bounded conditional transactions.

A pass of the controller (:mod:`ingest.broker.controller`) may change thousands of partition states at once
(every partition a dead broker led or followed). Kafka 0.8's controller sends its LeaderAndIsr decisions in
batches; here the decisions are ZooKeeper writes, so they are batched as ZooKeeper allows:

- the states are read pipelined (:meth:`ingest.broker.replication_view.ReplicationView.read_states`): every
  ``get`` of a group is sent before the first answer is awaited, so a thousand reads cost a few round trips,
  not a thousand;
- the changed states are written ``size`` partitions per ZooKeeper transaction, each transaction fenced
  by the controller epoch (:func:`ingest.broker.controller_fence.commit_fenced`) and each state write
  conditional on the version it was read at, exactly as a single write is: a replaced controller still
  cannot write, and a state that changed since it was read is never overwritten;
- a transaction refused because one of its states changed meanwhile (its leader shrank the in-sync set,
  say) is rolled back as a whole by ZooKeeper: that batch is read again and decided again, never skipped.
  After :data:`ATTEMPTS` refusals in a row the batch's partitions are decided one at a time, each with
  its own attempts, so a partition whose state keeps changing does not hold up the others; one that still
  could not be written is counted in :attr:`StateBatches.left` and the controller passes over it again.

``size`` 1 is one read and one transaction per partition (the controller's way before batching).

A leader's in-sync-set changes (:mod:`ingest.broker.replica_manager`) go through the same class without the
epoch fence (``fence`` None): the leader decides from the state it holds, so the first attempt reads
nothing (:meth:`StateBatches.write`); each write is conditional on that state's version, which fences a
leader that was replaced, and a refused transaction is read again and decided again as above. Kafka's
later design batches a broker's in-sync-set changes the same way (KIP-497, AlterIsr).
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable

from ingest import znodes
from ingest.broker.controller_fence import failed_operation
from ingest.errors import StaleControllerError
from ingest.znodes import PartitionState

log = logging.getLogger(__name__)

ATTEMPTS = 5          # reads and writes of one batch before its partitions are tried one by one

Item = tuple[str, int, tuple[int, ...]]          # topic, partition, its replicas
Decide = Callable[[str, int, tuple[int, ...], "PartitionState | None"], "PartitionState | None"]
Change = tuple[Item, "PartitionState | None", PartitionState]   # the item, its state as read, the new state
Written = Callable[[Item, PartitionState, "int | None"], None]   # the item, its new state, the node's version


class StateBatches:
    """Applies a decision to many partitions, ``size`` state writes per fenced transaction (module docstring).

    Args:
        client: the writer's KazooClient (the controller's, or a leader broker's).
        view: its :class:`~ingest.broker.replication_view.ReplicationView` (pipelined reads of the states).
        fence: ``() -> (epoch, epoch_version)``: the controller epoch and the ``/controller_epoch`` version
            every transaction checks; None: no epoch check (a leader's writes, fenced by the state versions).
        size: partitions per transaction (>= 1).
        on_written: called for every state a committed transaction wrote, with the node's new version
            (None for a created node), before :meth:`apply` or :meth:`write` returns.
        writer: who writes, for the log lines ("the controller", "broker 3's in-sync-set writer").
    """

    def __init__(self, client, view, fence: Callable[[], tuple[int, int]] | None, size: int,
                 on_written: Written | None = None, writer: str = "the controller") -> None:
        if size < 1:
            raise ValueError(f"partition states per transaction {size!r}: allowed is an integer >= 1")
        self.client = client
        self.view = view
        self.fence = fence
        self.size = size
        self.on_written = on_written
        self.writer = writer
        self.transactions = 0       # transactions committed
        self.conflicts = 0          # transactions refused because a state changed since it was read
        self.left = 0               # partitions given up after ATTEMPTS (the caller looks at them again later)

    def apply(self, items: Iterable[Item], decide: Decide, active: Callable[[], bool] = lambda: True) -> int:
        """Read every item's state, ``decide`` its new one (None: no change), write the changes in batches.

        Returns the number of states written. Raises StaleControllerError (from the fence) when a newer
        controller took over; ZooKeeper errors propagate (the caller repeats the pass)."""
        items = list(items)
        if self.size == 1:
            return sum(self._one(item, decide) for item in items if active())
        states = self.view.read_states([(t, p) for t, p, _ in items])
        changes = [(t, p, r, states[(t, p)]) for t, p, r in items]
        written = 0
        batch: list[tuple[Item, PartitionState | None, PartitionState]] = []
        for t, p, r, state in changes:
            new = decide(t, p, r, state)
            if new is not None:
                batch.append(((t, p, r), state, new))
            if len(batch) == self.size:
                if not active():
                    return written
                written += self._commit_batch(batch, decide)
                batch = []
        if batch and active():
            written += self._commit_batch(batch, decide)
        return written

    def write(self, changes: Iterable[Change], decide: Decide) -> int:
        """Write changes already decided from states the caller holds (no read first), ``size`` per
        transaction; a refused transaction is read again and ``decide``d again as in :meth:`apply`.

        Returns the number of states written; ZooKeeper errors propagate."""
        changes = list(changes)
        return sum(self._commit_batch(changes[i:i + self.size], decide) for i in range(0, len(changes), self.size))

    def _commit_batch(self, batch: list[Change], decide: Decide) -> int:
        for attempt in range(ATTEMPTS):
            if not batch:
                return 0
            failed = self._commit(batch)
            if failed is None:
                return len(batch)
            self.conflicts += 1
            (t, p, _), _, _ = batch[failed]
            log.info("%s-%d changed since it was read: reading its batch of %d partitions again (attempt %d)",
                     t, p, len(batch), attempt + 1)
            items = [item for item, _, _ in batch]
            states = self.view.read_states([(t, p) for t, p, _ in items])
            batch = [(item, states[item[:2]], new) for item in items
                     if (new := decide(*item, states[item[:2]])) is not None]
        log.warning("a batch of %d partition states kept changing under %s; deciding them one by one",
                    len(batch), self.writer)
        return sum(self._one(item, decide) for item, _, _ in batch)

    def _commit(self, batch: list[Change]) -> int | None:
        """One transaction (fenced, when there is a fence) writing every state of ``batch``; None when it
        committed (:attr:`on_written` told of each state), else the index in ``batch`` of the state that
        changed since it was read."""
        c = self.client
        epoch, epoch_version = self.fence() if self.fence is not None else (None, None)
        for topic in sorted({item[0] for item, old, _ in batch if old is None}):
            c.retry(c.ensure_path, znodes.partition_states_dir(topic))
        first = 0 if self.fence is None else 1   # the index of the first state's operation

        def commit():
            tx = c.transaction()
            if self.fence is not None:
                tx.check(znodes.CONTROLLER_EPOCH, epoch_version)
            for (topic, p, _), old, new in batch:
                path = znodes.partition_state_path(topic, p)
                if old is None:
                    tx.create(path, new.encode())
                else:
                    tx.set_data(path, new.encode(), version=old.zk_version)
            return tx.commit()

        results = c.retry(commit)
        failed = failed_operation(results)
        if failed is not None and failed < first:
            raise StaleControllerError(
                f"controller epoch {epoch} is no longer current in ZooKeeper; a newer controller decides")
        if failed is not None:
            return failed - first
        self.transactions += 1
        if self.on_written is not None:
            for (item, _, new), result in zip(batch, results[first:]):
                self.on_written(item, new, getattr(result, "version", None))
        return None

    def _one(self, item: Item, decide: Decide) -> int:
        """Read, decide and write one partition, with :data:`ATTEMPTS` attempts; 1 if a state was written."""
        topic, p, replicas = item
        for _ in range(ATTEMPTS):
            state = self.view.read_state(topic, p)
            new = decide(topic, p, replicas, state)
            if new is None:
                return 0
            if self._commit([(item, state, new)]) is None:
                return 1
            self.conflicts += 1
        log.warning("%s-%d: its state kept changing under %s; left for the next pass", topic, p, self.writer)
        self.left += 1
        return 0
