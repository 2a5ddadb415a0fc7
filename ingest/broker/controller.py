"""The controller: one broker at a time elects partition leaders (Kafka 0.8's design).

Election of the controller: every broker tries to create the ephemeral ``/controller``
node; the one that succeeds is the controller until its session ends, when the node
vanishes and the others try again (a watch on the node). Each new controller increments
``/controller_epoch`` (a conditional write), and every state it writes goes in a ZooKeeper
transaction that first checks that epoch node's version: a controller that was replaced
(its session expired while it was paused or cut off) has its writes refused by ZooKeeper
itself, so its stale decisions never land.

What it decides, always by a conditional write of the partition's state node
(``/brokers/partition_states/[topic]/[p]``, :mod:`ingest.znodes`):

- a new partition (an assignment without states): leader = the first live replica in
  assignment order, in-sync set = the live replicas, leader epoch 0;
- a leader whose broker left ``/brokers/ids`` (death or lost session): the new leader is the
  first replica, in assignment order, of the in-sync set that is alive; the in-sync set
  loses the dead brokers; the leader epoch grows. With no live in-sync replica the partition
  goes *offline* (leader -1, the in-sync set kept, so that a returning member is elected),
  unless ``unclean.leader.election.enable`` lets a live replica outside the set lead;
- a follower that died leaves the in-sync set (leader epoch grows);
- a returning broker that was in the in-sync set of an offline partition becomes its leader;
- a replica that cannot write (its broker listed it in ``/brokers/storage_failures/[id]``: disk full,
  a failed write or fsync, its log offline) is treated like a dead one while another in-sync
  replica can write: a leader that cannot write is replaced by the first in-sync replica that
  can, and such a replica leaves the in-sync set (its leader lets it back once it writes again
  and has caught up). With no in-sync replica that can write, the leader stays (it still serves
  reads) and, if it is gone, one that cannot write is elected rather than none;
- controlled shutdown (Kafka's ``ControlledShutdown``, its ``ControlledShutdownLeaderSelector``): a broker
  about to stop lists itself under ``/admin/controlled_shutdown`` (:mod:`ingest.broker.controlled_shutdown`);
  every partition it leads gets the first other in-sync replica (assignment order) that is alive, able to
  write and not shutting down too, and every in-sync set it belongs to loses it, so that acks=-1 writes
  stop waiting for it. A partition whose only such replica is the stopping broker keeps it as leader
  (nothing to move to), as in Kafka. A stopping broker is treated like one that cannot write (below);
- preferred-replica election (``/admin/preferred_replica_election``): each named partition
  whose first replica is alive, in sync and able to write gets it back as leader; the node is
  deleted after;
- automatic preferred-replica election (Kafka's ``auto.leader.rebalance.enable``): every
  ``leader.imbalance.check.interval.seconds``, for each broker whose share of partitions it
  prefers but does not lead is above ``leader.imbalance.per.broker.percentage``, those partitions
  get it back as leader where it is alive, in sync and able to write. This is how a leader that
  gave up leadership (a failure, a restart, a full disk) takes it back once it has recovered
  and caught up.

- topic deletion (Kafka's ``/admin/delete_topics``, its ``TopicDeletionManager``): a topic marked for
  deletion gets no more elections; each broker holding a replica of it deletes its logs and
  acknowledges with a child ``/admin/delete_topics/[topic]/[broker_id]``; once every broker named in
  the topic's assignment has, the controller removes the topic's partition states, its assignment,
  its configs and the marker in one transaction fenced by the controller epoch. A broker that is down
  holds the deletion up until it returns and deletes its copy (Kafka's controller waits for it too).
- partition reassignment (Kafka's ``/admin/reassign_partitions``): :mod:`ingest.broker.reassignment` adds
  the target replicas, waits until they are in sync, moves the leadership if needed, then removes the old
  replicas, whose brokers delete their copies.

All of it runs on one thread (events queued by watches), and every pass re-reads each
state with its version, so a pass is always safe to repeat. A pass and a preferred election read their
partitions' states pipelined and write the changes ``controller.batch.partitions`` per fenced transaction
(:mod:`ingest.broker.controller_batches`): a broker failure costs a few ZooKeeper round trips, not two per
partition it held.

States an earlier version wrote under ``/brokers/topics/[topic]/partitions`` (where Kafka 0.7
clients misread them as broker ids) are moved: a partition without a state at its place now
whose old state exists is decided from that old state (so a replica that restarted since it was
written is still treated as restarted), and the decision, or the old state unchanged, is
created at the new place in the same transaction that deletes the old node; the emptied
directories are removed after.
"""
from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState

from ingest import znodes
from ingest.broker.controller_batches import StateBatches
from ingest.broker.controller_fence import failed_operation
from ingest.broker.reassignment import Reassignments
from ingest.errors import StaleControllerError
from ingest.ratelimited_log import RateLimitedLog
from ingest.znodes import PartitionState

log = logging.getLogger(__name__)

ZK_ERRORS = (KazooException, KazooTimeoutError)


@dataclass(frozen=True)
class Rebalance:
    """Automatic preferred-replica election (Kafka's keys and defaults)."""

    enable: bool = True                 # auto.leader.rebalance.enable
    interval_s: float = 300.0           # leader.imbalance.check.interval.seconds
    imbalance_percent: int = 10         # leader.imbalance.per.broker.percentage

    @classmethod
    def from_config(cls, config) -> "Rebalance":
        return cls(config["auto.leader.rebalance.enable"], float(config["leader.imbalance.check.interval.seconds"]),
                   config["leader.imbalance.per.broker.percentage"])


class Controller:
    """Competes for ``/controller`` and, while it holds it, elects leaders (module docstring)."""

    def __init__(self, broker_id: int, client, view, *, unclean: bool = False,
                 rebalance: Rebalance = Rebalance(), batch_partitions: int = 100) -> None:
        self.broker_id = broker_id
        self.client = client
        self.view = view
        self.unclean = unclean
        self.rebalance = rebalance
        self.active = False
        self.epoch = 0
        self._epoch_version = -1
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"controller-{broker_id}", daemon=True)
        self._closed = False
        self._errors = RateLimitedLog(log, interval_s=60.0)
        self.elections = 0
        self._watched_markers: set[str] = set()
        self.reassignments = Reassignments(self)
        self._pass_lock = threading.Lock()
        self._pass_queued = False
        self._pass_all = False                # the queued pass looks at every partition ...
        self._pass_topics: set[str] = set()   # ... or at these topics' only
        # every decision over many partitions (a pass, preferred elections) reads their states pipelined and
        # writes them batch_partitions per fenced transaction (controller.batch.partitions)
        self.batches = StateBatches(client, view, lambda: (self.epoch, self._epoch_version), batch_partitions)

    def start(self) -> "Controller":
        self._thread.start()
        self.client.add_listener(self._on_session)
        self.client.DataWatch(znodes.CONTROLLER, self._on_controller_node)
        self.client.DataWatch(znodes.PREFERRED_REPLICA_ELECTION, self._on_preferred)
        self.client.retry(self.client.ensure_path, znodes.DELETE_TOPICS)
        self.client.ChildrenWatch(znodes.DELETE_TOPICS, self._on_delete_markers)
        self.view.on_brokers(lambda _b: self._want_pass())
        self.view.on_topic(lambda topic, _a: self._want_pass(topic))
        self.view.on_storage_failures(lambda: self._want_pass())
        self.view.on_shutting_down(lambda _ids: self._want_pass())
        self.reassignments.watch(self._events.put)
        return self

    def close(self) -> None:
        self._closed = True
        self.active = False
        self._events.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(10)

    # --- watches (kazoo's thread: queue only) ---------------------------------------------------

    def _want_pass(self, topic: str | None = None) -> None:
        """Queue a pass over every partition, or over ``topic``'s when only its assignment changed, unless
        one is queued and not started: a pass reads the states when it starts, so changes that come before
        it (100 topics created in a row, say) need no pass each; the queued one widens to cover them."""
        with self._pass_lock:
            if topic is None:
                self._pass_all = True
            else:
                self._pass_topics.add(topic)
            if self._pass_queued:
                return
            self._pass_queued = True
        self._events.put("pass")

    def _on_session(self, state: str) -> None:
        if state == KazooState.LOST and self.active:
            self.active = False
            log.warning("broker %d: ZooKeeper session lost; no longer the controller", self.broker_id)

    def _on_controller_node(self, data, _stat) -> bool:
        if self._closed:
            return False
        if data is None:
            self._events.put("elect")
        return True

    def _on_preferred(self, data, _stat) -> bool:
        if self._closed:
            return False
        if data is not None:
            self._events.put("preferred")
        return True

    def _on_delete_markers(self, children: list[str]) -> bool:
        if self._closed:
            return False
        for topic in children:
            if topic not in self._watched_markers:
                self._watched_markers.add(topic)
                self.client.ChildrenWatch(znodes.delete_topic_path(topic), self._ack_watcher(topic))
        self._events.put("delete")
        return True

    def _ack_watcher(self, topic: str):
        def watch(_children) -> bool:
            if self._closed:
                return False
            self._events.put("delete")
            return True
        return watch

    # --- the controller thread -----------------------------------------------------------------

    def _run(self) -> None:
        # the imbalance check is due every leader.imbalance.check.interval.seconds: timed by this thread's wait
        # for events, not by a thread of its own
        next_check = time.monotonic() + self.rebalance.interval_s
        while True:
            try:
                event = self._events.get(timeout=max(0.0, next_check - time.monotonic())
                                         if self.rebalance.enable else None)
            except queue.Empty:
                next_check = time.monotonic() + self.rebalance.interval_s
                event = "rebalance"
            if event is None or self._closed:
                return
            try:
                if event == "elect":
                    self._try_become()
                elif event == "pass":
                    with self._pass_lock:   # a change from now on queues the next pass
                        self._pass_queued = False
                        everything, topics = self._pass_all, self._pass_topics
                        self._pass_all, self._pass_topics = False, set()
                    if self.active:
                        self._pass(None if everything else topics)
                elif self.active and event == "preferred":
                    self._preferred()
                elif self.active and event == "rebalance":
                    self._rebalance()
                elif self.active and event == "delete":
                    self._finish_deletions()
                elif self.active and event == "reassign":
                    self.reassignments.run()
            except StaleControllerError as exc:
                self.active = False
                log.warning("broker %d: %s; stepping down as controller", self.broker_id, exc)
            except ZK_ERRORS as exc:
                self._errors.warning("zookeeper", event, "controller %d: ZooKeeper failed during %s (%s); retrying",
                                     self.broker_id, event, exc)
                retry = self._want_pass if event == "pass" else functools.partial(self._events.put, event)
                threading.Timer(0.5, retry).start()   # a pass is retried over everything: its scope is gone
            except Exception:  # noqa: BLE001 - the controller thread must survive a bug in one pass
                log.exception("controller %d: %s failed", self.broker_id, event)

    def _try_become(self) -> None:
        c = self.client
        try:
            c.retry(c.create, znodes.CONTROLLER, znodes.controller_value(self.broker_id), ephemeral=True)
        except NodeExistsError:
            try:
                data, stat = c.retry(c.get, znodes.CONTROLLER)
            except NoNodeError:
                self._events.put("elect")
                return
            if stat.ephemeralOwner != c.client_id[0]:
                self.active = False
                return
        self._bump_epoch()
        self.active = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        self._pass()
        self._preferred()
        self._finish_deletions()
        self.reassignments.run()

    def _bump_epoch(self) -> None:
        c = self.client
        while True:
            try:
                data, stat = c.retry(c.get, znodes.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    c.retry(c.create, znodes.CONTROLLER_EPOCH, b"1", makepath=True)
                    self.epoch, self._epoch_version = 1, 0
                    return
                except NodeExistsError:
                    continue
            try:
                new = int(data.decode() or 0) + 1
                stat2 = c.retry(c.set, znodes.CONTROLLER_EPOCH, str(new).encode(), version=stat.version)
                self.epoch, self._epoch_version = new, stat2.version
                return
            except BadVersionError:
                continue

    # --- decisions -------------------------------------------------------------------------------

    def _pass(self, only: set[str] | None = None) -> None:
        """Look at every replicated partition once (or every one of the topics ``only``); fix what the live
        brokers require."""
        live = set(self.view.brokers)
        topics = [(t, a) for t, a in sorted(self.view.assignments.items())
                  if not self.view.is_deleting(t) and (only is None or t in only)]
        legacy = self._legacy_topics([t for t, _ in topics])
        items = [(t, p, replicas) for t, a in topics if t not in legacy for p, replicas in sorted(a.items())]
        left_before, tx_before, started = self.batches.left, self.batches.transactions, time.monotonic()
        written = self.batches.apply(
            items, lambda t, p, replicas, state: self._decide(t, p, replicas, live, state), lambda: self.active)
        self.elections += written
        log.log(logging.INFO if written else logging.DEBUG,
                "controller pass over %d partitions: %d states written in %d transactions, %.2f s", len(items),
                written, self.batches.transactions - tx_before, time.monotonic() - started)
        if self.batches.left > left_before and self.active:
            threading.Timer(0.5, self._want_pass).start()   # a state kept changing: look again
        for topic, assignment in topics:
            if topic not in legacy:
                continue
            for p, replicas in sorted(assignment.items()):
                if not self.active:
                    return
                self._handle(topic, p, replicas, live, legacy=True)
            self._remove_legacy_dirs(topic)

    def _legacy_topics(self, topics: list[str]) -> set[str]:
        """The topics that still have states at the old place (one pipelined ``exists`` each)."""
        c = self.client

        def check() -> set[str]:
            pending = [(t, c.exists_async(znodes.legacy_partitions_dir(t))) for t in topics]
            return {t for t, result in pending if result.get() is not None}
        return c.retry(check)

    def _handle(self, topic: str, p: int, replicas: tuple[int, ...], live: set[int], legacy: bool = False) -> None:
        for _ in range(5):
            state = self.view.read_state(topic, p)
            old = self._legacy_state(topic, p) if legacy and state is None else None
            new = self._decide(topic, p, replicas, live, state or old)
            if old is not None:
                new = new or old
                log.info("%s-%d: moving its state from %s to %s", topic, p,
                         znodes.legacy_partition_state_path(topic, p), znodes.partition_state_path(topic, p))
            if new is None:
                return
            if self._write(topic, p, new, None if state is None else state.zk_version,
                           legacy_version=None if old is None else old.zk_version):
                return

    def _legacy_state(self, topic: str, p: int) -> PartitionState | None:
        """The state an earlier version wrote at the old place, with its version and zxid, or None."""
        c = self.client
        try:
            data, stat = c.retry(c.get, znodes.legacy_partition_state_path(topic, p))
        except NoNodeError:
            return None
        try:
            return PartitionState.parse(data, stat.version, stat.mzxid)
        except ValueError as exc:
            log.error("%s-%d: unreadable state at the old place (%s); electing anew", topic, p, exc)
            return None

    def _remove_legacy_dirs(self, topic: str) -> None:
        """Delete ``/brokers/topics/[topic]/partitions`` once no state is left in it (kept otherwise)."""
        c = self.client
        old_dir = znodes.legacy_partitions_dir(topic)
        try:
            for child in c.retry(c.get_children, old_dir):
                c.retry(c.delete, znodes.legacy_partition_dir(topic, child))   # NotEmptyError while a state is left
            c.retry(c.delete, old_dir)
            log.info("topic %s: removed %s (its states moved)", topic, old_dir)
        except NoNodeError:
            pass
        except NotEmptyError:
            log.warning("topic %s: %s still holds a state; left for the next pass", topic, old_dir)

    def _decide(self, topic: str, p: int, replicas: tuple[int, ...], live: set[int],
                state: PartitionState | None) -> PartitionState | None:
        if state is None:
            isr = tuple(r for r in replicas if r in live)
            if not isr:
                return None
            return PartitionState(isr[0], 0, isr, self.epoch)
        # A replica whose registration is newer than the state restarted since (SIGKILL and a quick
        # restart look "alive" all along): it may have lost unflushed data, so it is treated as a
        # failure followed by a start: it leaves the in-sync set and rejoins by catching up.
        restarted = {r for r in replicas if r in live and self.view.predates(state, r)}
        # Replicas whose storage cannot write (their broker says so) count as failed while another
        # in-sync replica can write; with none that can, they are still better than no leader.
        failed = self.view.cannot_write(topic, p)
        stopping = self.view.shutting_down & live   # a controlled shutdown: moved away from like a failed replica
        failed = failed | stopping
        live_isr = tuple(r for r in state.isr if r in live)
        fresh_isr = tuple(r for r in live_isr if r not in restarted)
        healthy_isr = tuple(r for r in fresh_isr if r not in failed)
        if state.leader >= 0 and state.leader in live and state.leader not in restarted \
                and (state.leader not in failed or not healthy_isr):
            # a follower died, restarted or cannot write: it leaves the in-sync set
            keep = tuple(r for r in fresh_isr if r not in failed or r == state.leader)
            if keep != state.isr:
                return PartitionState(state.leader, state.leader_epoch + 1, keep, self.epoch)
            return None
        groups = (healthy_isr, tuple(r for r in live_isr if r not in failed), fresh_isr, live_isr)
        candidates = next(([r for r in replicas if r in g] for g in groups if g), [])
        if candidates:
            leader = candidates[0]
            isr = healthy_isr if leader in healthy_isr else (leader,) + healthy_isr
            why = ("restarted" if state.leader in restarted else
                   "shutting down" if state.leader in stopping else
                   "cannot write" if state.leader in failed and state.leader in live else "gone")
            log.info("%s-%d: electing broker %d (in-sync %s; previous leader %d %s)", topic, p, leader,
                     list(isr), state.leader, why)
            return PartitionState(leader, state.leader_epoch + 1, isr, self.epoch)
        live_replicas = [r for r in replicas if r in live]
        if self.unclean and live_replicas:
            leader = live_replicas[0]
            log.warning("%s-%d: UNCLEAN election of broker %d: no in-sync replica %s is alive; acknowledged "
                        "writes it lacks are lost (unclean.leader.election.enable=true)", topic, p, leader,
                        list(state.isr))
            return PartitionState(leader, state.leader_epoch + 1, (leader,), self.epoch)
        if state.leader == -1:
            return None
        log.error("%s-%d is OFFLINE: no in-sync replica %s is alive (unclean.leader.election.enable=false); "
                  "it waits for one of them to return", topic, p, list(state.isr))
        return PartitionState(-1, state.leader_epoch + 1, state.isr, self.epoch)

    def _write(self, topic: str, p: int, state: PartitionState, version: int | None,
               legacy_version: int | None = None) -> bool:
        """Conditional write, fenced by the controller epoch; False when the state changed meanwhile.
        With ``legacy_version``, the old-place state node of that version is deleted in the same
        transaction."""
        c = self.client
        path = znodes.partition_state_path(topic, p)
        if version is None:
            c.retry(c.ensure_path, znodes.partition_states_dir(topic))

        def commit():
            tx = c.transaction()
            tx.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
            if version is None:
                tx.create(path, state.encode())
            else:
                tx.set_data(path, state.encode(), version=version)
            if legacy_version is not None:
                tx.delete(znodes.legacy_partition_state_path(topic, p), version=legacy_version)
            return tx.commit()

        failed = failed_operation(c.retry(commit))
        if failed == 0:
            raise StaleControllerError(
                f"controller epoch {self.epoch} is no longer current in ZooKeeper; a newer controller decides")
        if failed is not None:   # the state (or the old-place node) changed since it was read
            return False
        self.elections += 1
        return True

    def _preferred(self) -> None:
        c = self.client
        try:
            data, _ = c.retry(c.get, znodes.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return
        try:
            wanted = znodes.parse_preferred_election(data)
        except ValueError as exc:
            log.error("ignoring a malformed preferred replica election request: %s", exc)
            wanted = []
        live = set(self.view.brokers)
        items = []
        for topic, p in wanted:
            replicas = self.view.assignments.get(topic, {}).get(p)
            if not replicas:
                log.warning("preferred replica election: %s-%d is not a replicated partition", topic, p)
                continue
            items.append((topic, p, replicas))
        self.elections += self.batches.apply(
            items, lambda t, p, replicas, state: self._preferred_decision(t, p, replicas, live, state, requested=True),
            lambda: self.active)
        try:
            c.retry(c.delete, znodes.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            pass

    def _preferred_decision(self, topic: str, p: int, replicas: tuple[int, ...], live: set[int],
                            state: PartitionState | None, *, requested: bool) -> PartitionState | None:
        """The state that makes the first replica the leader if it is alive, in sync and able to write; None
        when it leads already or cannot. ``requested``: an operator asked (an ineligible replica is logged at
        WARNING)."""
        preferred = replicas[0]
        if state is None or state.leader == preferred:
            return None
        if preferred not in live or preferred not in state.isr or self.view.predates(state, preferred) \
                or preferred in self.view.cannot_write(topic, p):
            if requested:
                log.warning("preferred replica election: broker %d is not alive, in sync and able to write "
                            "for %s-%d (in-sync %s); leader stays %d", preferred, topic, p, list(state.isr),
                            state.leader)
            return None
        log.info("%s-%d: moving leadership back to the preferred replica %d%s", topic, p, preferred,
                 "" if requested else " (auto.leader.rebalance.enable)")
        return PartitionState(preferred, state.leader_epoch + 1, state.isr, self.epoch)

    # --- topic deletion ------------------------------------------------------------------------------

    def _finish_deletions(self) -> None:
        """Remove every topic marked for deletion whose replicas' brokers all acknowledged (module docstring)."""
        c = self.client
        try:
            marked = c.retry(c.get_children, znodes.DELETE_TOPICS)
        except NoNodeError:
            return
        for topic in sorted(marked):
            if not self.active:
                return
            try:
                acked = {int(b) for b in c.retry(c.get_children, znodes.delete_topic_path(topic)) if b.isdigit()}
            except NoNodeError:
                continue
            try:
                data, _ = c.retry(c.get, znodes.topic_dir(topic))
                assignment = znodes.parse_assignment(data) or {}
            except NoNodeError:
                assignment = {}
            except ValueError:
                log.error("topic %s: unreadable assignment; deleting it without waiting for replicas", topic)
                assignment = {}
            holders = {b for replicas in assignment.values() for b in replicas}
            waiting = sorted(holders - acked)
            if waiting:
                log.info("topic %s: deletion waits for broker(s) %s to delete their replicas%s", topic, waiting,
                         "" if set(waiting) <= set(self.view.brokers) else " (some are down: when they return)")
                continue
            self._remove_topic(topic, acked)

    def _remove_topic(self, topic: str, acked: set[int]) -> None:
        c = self.client
        try:
            states = c.retry(c.get_children, znodes.partition_states_dir(topic))
        except NoNodeError:
            states = None

        def commit():
            tx = c.transaction()
            tx.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
            for child in states or ():
                tx.delete(f"{znodes.partition_states_dir(topic)}/{child}")
            if states is not None:
                tx.delete(znodes.partition_states_dir(topic))
            if c.exists(znodes.topic_dir(topic)) is not None:
                tx.delete(znodes.topic_dir(topic))
            if c.exists(znodes.topic_config_path(topic)) is not None:
                tx.delete(znodes.topic_config_path(topic))
            for b in sorted(acked):
                tx.delete(znodes.delete_ack_path(topic, b))
            tx.delete(znodes.delete_topic_path(topic))
            return tx.commit()

        failed = failed_operation(c.retry(commit))
        if failed == 0:
            raise StaleControllerError(
                f"controller epoch {self.epoch} is no longer current in ZooKeeper; a newer controller decides")
        if failed is not None:
            log.info("topic %s: its nodes changed while it was being removed; trying again", topic)
            threading.Timer(0.5, self._events.put, ("delete",)).start()
            return
        self._watched_markers.discard(topic)
        log.info("topic %s deleted: every replica's broker removed its logs; its assignment, states and configs "
                 "are gone from ZooKeeper", topic)

    # --- automatic preferred-replica election ----------------------------------------------------

    def _rebalance(self) -> None:
        """Kafka's leader imbalance check: per preferred broker, the share of its partitions led by
        another broker; above ``leader.imbalance.per.broker.percentage``, move those back."""
        live = set(self.view.brokers)
        preferred_by: dict[int, list[tuple[str, int, tuple[int, ...]]]] = {}
        for topic, assignment in sorted(self.view.assignments.items()):
            if self.view.is_deleting(topic):
                continue
            for p, replicas in sorted(assignment.items()):
                preferred_by.setdefault(replicas[0], []).append((topic, p, replicas))
        for broker, parts in sorted(preferred_by.items()):
            if broker not in live:
                continue
            elsewhere = [(t, p, r) for t, p, r in parts
                         if (s := self.view.state(t, p)) is not None and s.leader != broker]
            if not elsewhere or len(elsewhere) * 100 <= self.rebalance.imbalance_percent * len(parts):
                continue
            self.elections += self.batches.apply(
                elsewhere,
                lambda t, p, replicas, state: self._preferred_decision(t, p, replicas, live, state, requested=False),
                lambda: self.active)
