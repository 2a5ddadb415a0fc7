"""Partition reassignment: the controller moves a partition's replicas to a new set of brokers.

Kafka's design (the ZooKeeper controller's ``onPartitionReassignment``, with KIP-455's ``adding_replicas`` /
``removing_replicas``): an operator (``ingest topics reassign --execute``, or anyone writing the node) lists
target replicas in ``/admin/reassign_partitions``. For each partition, with O its original replicas and T
the target:

1. *start*: the topic node's assignment becomes O followed by T - O (the replicas being added), with
   ``adding_replicas`` = T - O and ``removing_replicas`` = O - T recorded beside it. The new replicas'
   brokers see themselves in the assignment and start following the leader (from an empty log); the
   leader accepts their fetches and lets them into the in-sync set once they caught up, as any follower;
2. *wait* until every replica of T is in the in-sync set;
3. *complete*, in one ZooKeeper transaction: the assignment becomes T (the move's fields go) and the state
   keeps only the in-sync replicas of T; a leader outside T hands over to the first replica of T that is
   alive and in sync (leader epoch + 1). The removed replicas' brokers, no longer in the assignment, stop
   following and delete the partition's log (Kafka's StopReplica with delete);
4. the partition leaves ``/admin/reassign_partitions``; the node is deleted when none is left.

Every step is a transaction fenced by the controller epoch (:mod:`ingest.broker.controller_fence`) and is
decided from what ZooKeeper holds now (the request, the topic node with its move, the state), so a new
controller continues a move its predecessor started, at whichever step it stopped.

A new target for a partition already being moved (``--cancel`` writes the original replicas as the target)
keeps O and replaces T: replicas that were being added and are not in the new target leave the
assignment (and the in-sync set) at once and delete their copies. Cancelling therefore restores O exactly,
in its order: the assignment lists O first during a move (Kafka lists T first, so that its cancel can
change the preferred replica).

Both replicated topic formats (Kafka and 0.7) are moved the same way: their replicas follow the same states.
A request for a partition that does not exist, or with an empty or repeating target, is logged and dropped.

Thread-safety: :meth:`Reassignments.run` runs on the controller's thread only; the watches only queue.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from kazoo.exceptions import NoNodeError

from ingest import znodes
from ingest.broker.controller_fence import commit_fenced
from ingest.ratelimited_log import RateLimitedLog
from ingest.znodes import PartitionState, ReplicaMove

log = logging.getLogger(__name__)

EVENT = "reassign"
"""The controller event that runs :meth:`Reassignments.run`."""


def invalid_target(target: tuple[int, ...]) -> str | None:
    """Why ``target`` cannot be a replica list (empty, a repeated or negative broker id), or None."""
    if not target:
        return "an empty replica list"
    if len(set(target)) != len(target):
        return f"replicas {list(target)} name a broker twice"
    if any(b < 0 for b in target):
        return f"replicas {list(target)} name a negative broker id"
    return None


def moving(original: tuple[int, ...], target: tuple[int, ...]) -> tuple[tuple[int, ...], ReplicaMove]:
    """The assignment during a move from ``original`` to ``target``, and the move (adding, removing)."""
    adding = tuple(b for b in target if b not in original)
    return original + adding, ReplicaMove(adding, tuple(b for b in original if b not in target))


def original_replicas(replicas: tuple[int, ...], move: ReplicaMove | None) -> tuple[int, ...]:
    """The replicas before the move: the assignment without the ones being added."""
    return replicas if move is None else tuple(b for b in replicas if b not in move.adding)


def partitions_being_reassigned(topic: str, topic_data: bytes | None, pending: bytes | None) -> list[int]:
    """The partitions of ``topic`` being reassigned now, sorted: those whose topic node (``topic_data``) records a
    move (replicas being added or removed), and those that ``/admin/reassign_partitions`` (``pending``, None when
    it is absent) names and the controller has not started yet. An unreadable request names none: the controller
    drops it, and it moves nothing. A topic with any of them cannot grow or be deleted now.

    Raises:
        ValueError: the topic node's move fields are not partition -> broker ids.
    """
    being = set(znodes.parse_moves(topic_data))
    if pending:
        try:
            being |= {p for t, p in znodes.parse_reassignment(pending) if t == topic}
        except ValueError:
            pass   # an unreadable request is the controller's to drop; it moves nothing
    return sorted(being)


class Reassignments:
    """The reassignment steps of one controller (module docstring).

    Args:
        controller: the :class:`~ingest.broker.controller.Controller` (its client, view, epoch and
            ``active`` flag are read at each step).
    """

    def __init__(self, controller) -> None:
        self.controller = controller
        self.client = controller.client
        self.view = controller.view
        self.requested = False        # /admin/reassign_partitions exists (its watch says)
        self._queued = threading.Event()
        self._enqueue: Callable[[], None] = lambda: None
        self._errors = RateLimitedLog(log, interval_s=60.0)

    def watch(self, put: Callable[[str], None]) -> None:
        """Queue :data:`EVENT` with ``put`` when the request node changes, and while one is pending, when a
        partition state (an in-sync set grew) or the live brokers change."""
        def enqueue() -> None:
            if not self._queued.is_set():
                self._queued.set()
                put(EVENT)

        self._enqueue = enqueue
        self.client.DataWatch(znodes.REASSIGN_PARTITIONS, self._on_node)
        self.view.on_state(lambda _t, _p, _s: self.requested and enqueue())
        self.view.on_brokers(lambda _b: self.requested and enqueue())

    def _on_node(self, data, _stat) -> bool:
        if self.controller._closed:
            return False
        self.requested = data is not None
        if self.requested:
            self._enqueue()
        return True

    # --- the controller thread -------------------------------------------------------------------

    def run(self) -> None:
        """One pass over every requested partition: start, complete or leave each as its state allows."""
        self._queued.clear()
        c = self.client
        try:
            data, _ = c.retry(c.get, znodes.REASSIGN_PARTITIONS)
        except NoNodeError:
            return
        try:
            targets = znodes.parse_reassignment(data)
        except ValueError as exc:
            log.error("deleting the unreadable %s (%s); nothing is moved", znodes.REASSIGN_PARTITIONS, exc)
            self._finish(None)
            return
        live = set(self.view.brokers)
        finished: dict[tuple[str, int], tuple[int, ...]] = {}
        for (topic, p), target in sorted(targets.items()):
            if not self.controller.active:
                return
            if self._step(topic, p, target, live):
                finished[(topic, p)] = target
        if finished:
            self._finish(finished)

    def _step(self, topic: str, p: int, target: tuple[int, ...], live: set[int]) -> bool:
        """Move ``topic``-``p`` one step towards ``target``; True when it is done (or dropped)."""
        c = self.client
        why = invalid_target(target)
        if why is None and self.view.is_deleting(topic):
            why = "the topic is being deleted"
        for _ in range(5):
            if why is not None:
                log.error("reassignment of %s-%d to %s dropped: %s", topic, p, list(target), why)
                return True
            try:
                data, stat = c.retry(c.get, znodes.topic_dir(topic))
                assignment = znodes.parse_assignment(data)
                fmt = znodes.parse_topic_format(data)
                moves = znodes.parse_moves(data)
            except NoNodeError:
                assignment = None
            except (ValueError, UnicodeDecodeError) as exc:
                why = f"its topic node is unreadable ({exc})"
                continue
            if assignment is None or p not in assignment:
                why = "no such partition of a replicated topic"
                continue
            replicas, move = assignment[p], moves.get(p)
            original = original_replicas(replicas, move)
            if move is None and replicas == target:
                return True
            union, wanted = moving(original, target)
            state = self.view.read_state(topic, p)
            if replicas != union or move != wanted:
                ok = self._write(topic, p, stat.version, fmt, assignment, moves, union, wanted, state, live,
                                 "started")
                if ok is None:
                    return False
                continue    # read again: the move may complete at once (a cancel, or a target within O)
            if state is not None and not set(target) <= set(state.isr):
                log.debug("%s-%d: reassignment waits for %s to join the in-sync set %s", topic, p,
                          sorted(set(target) - set(state.isr)), list(state.isr))
                return False
            ok = self._write(topic, p, stat.version, fmt, assignment, moves, target, None, state, live, "completed")
            if ok:
                return True
            if ok is None:
                return False
        return False

    def _write(self, topic: str, p: int, version: int, fmt: str | None,
               assignment: dict[int, tuple[int, ...]], moves: dict[int, ReplicaMove], replicas: tuple[int, ...],
               move: ReplicaMove | None, state: PartitionState | None, live: set[int], step: str) -> bool | None:
        """The topic node with ``p``'s new ``replicas`` (and ``move``, None when done), and the state without
        the replicas that left, in one fenced transaction. True: written; False: a node changed meanwhile
        (decide again); None: no replica of ``replicas`` can lead now (wait)."""
        new_state = None if state is None else self._kept(topic, p, state, replicas, live)
        if new_state is False:
            self._errors.warning(f"{topic}-{p}", "no leader", "%s-%d: reassignment to %s waits: none of them is "
                                 "alive and in the in-sync set %s to lead", topic, p, list(replicas),
                                 list(state.isr))
            return None
        new_assignment = {**assignment, p: replicas}
        new_moves = {q: m for q, m in moves.items() if q != p}
        if move is not None:
            new_moves[p] = move
        value = znodes.assignment_value(new_assignment, fmt, new_moves)

        def build(tx) -> None:
            tx.set_data(znodes.topic_dir(topic), value, version=version)
            if new_state is not None:
                tx.set_data(znodes.partition_state_path(topic, p), new_state.encode(), version=state.zk_version)

        if not commit_fenced(self.client, self.controller.epoch, self.controller._epoch_version, build):
            return False
        if new_state is not None:
            self.controller.elections += 1
        if move is not None:
            log.info("%s-%d: reassignment %s: replicas %s -> %s (adding %s, removing %s)", topic, p, step,
                     list(original_replicas(replicas, move)), [b for b in replicas if b not in move.removing],
                     list(move.adding), list(move.removing))
        else:
            now = new_state or state
            log.info("%s-%d: reassignment %s: replicas %s (leader %s, in-sync %s)", topic, p, step, list(replicas),
                     None if now is None else now.leader, None if now is None else list(now.isr))
        return True

    def _kept(self, topic: str, p: int, state: PartitionState, replicas: tuple[int, ...],
              live: set[int]) -> PartitionState | None | bool:
        """The state once the replicas outside ``replicas`` are gone: None when it does not change, False when
        its leader goes and no replica of ``replicas`` is alive and in sync to take over."""
        isr = tuple(r for r in state.isr if r in replicas)
        leader = state.leader
        if leader not in replicas:
            unable = self.view.cannot_write(topic, p) | self.view.shutting_down
            candidates = [r for r in replicas if r in isr and r in live and not self.view.predates(state, r)]
            candidates = [r for r in candidates if r not in unable] or candidates
            if not candidates:
                return False if leader >= 0 else None
            leader = candidates[0]
        if leader == state.leader and isr == state.isr:
            return None
        return PartitionState(leader, state.leader_epoch + 1, isr, self.controller.epoch)

    def _finish(self, finished: dict[tuple[str, int], tuple[int, ...]] | None) -> None:
        """Remove the ``finished`` partitions from the request (unless their target changed meanwhile), and
        the node once it is empty (``None``: the node goes whatever it holds)."""
        c = self.client
        for _ in range(5):
            try:
                data, stat = c.retry(c.get, znodes.REASSIGN_PARTITIONS)
            except NoNodeError:
                return
            try:
                targets = znodes.parse_reassignment(data) if finished is not None else {}
            except ValueError:
                targets = {}
            left = {k: t for k, t in targets.items() if finished.get(k) != t}

            def build(tx) -> None:
                if left:
                    tx.set_data(znodes.REASSIGN_PARTITIONS, znodes.reassignment_value(left), version=stat.version)
                else:
                    tx.delete(znodes.REASSIGN_PARTITIONS, version=stat.version)

            if commit_fenced(c, self.controller.epoch, self.controller._epoch_version, build):
                if not left:
                    log.info("every requested reassignment is done; %s deleted", znodes.REASSIGN_PARTITIONS)
                return
        self._enqueue()   # the request keeps changing under us: look again

