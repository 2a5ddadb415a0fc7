"""The replicas one broker holds: who leads, who follows, and the threads that keep them so.

The replica manager turns the partition states in ZooKeeper (watched by
:class:`~ingest.broker.replication_view.ReplicationView`) into roles: for each replicated
partition this broker is a replica of, it becomes the leader when the state names it, and
otherwise follows the named leader on one of the fetcher threads towards that leader
(``num.replica.fetchers`` per leader and topic format, :mod:`ingest.broker.kafka.fetcher_manager`): a
0.7-format partition on a :class:`~ingest.broker.replica_fetcher.ReplicaFetcherThread` (REPLICA_FETCHES on
the 0.7 port), a Kafka topic's on a :class:`~ingest.broker.kafka.replica_fetcher.ReplicaFetcherThread`
(Fetch on the Kafka listener). Role changes run on one
worker thread, in the order the watches delivered them (kazoo's event thread never waits for a log).

Its other threads:

- the in-sync-set writer: every ``replica.lag.time.max.ms / 4`` (and at once when a follower
  caught up) each led partition is asked for the set it wants (:meth:`ReplicatedPartition.isr_change`)
  and every change of the pass is written in ZooKeeper transactions of ``controller.batch.partitions``
  states (:class:`~ingest.broker.controller_batches.StateBatches`), each state write conditional on the
  version this leader holds: a state that changed meanwhile refuses its whole transaction, and that batch
  is read back and decided again (a partition whose leadership moved goes to the worker); a write that
  does not land (a lost session, no ZooKeeper) leaves the set as it was;
- the high-watermark checkpointer (:mod:`ingest.broker.hw_checkpoint`), every
  ``replica.high.watermark.checkpoint.interval.ms`` and at shutdown.

Tasks of the broker's scheduler (:mod:`ingest.broker.scheduler`, ``background.threads``), not threads
of their own:

- the leader's repair of damaged ranges from in-sync followers (:mod:`ingest.broker.leader_repair`),
  asked for by the request handlers and when an in-sync set grows;
- the storage-failure publisher (:mod:`ingest.broker.storage_failures`): the replicas whose
  log cannot write (an append failed, or the flusher took the log offline) are published in
  ZooKeeper, where the controller moves their leadership and in-sync membership to replicas
  that can; a leader does not let such a follower rejoin its in-sync set.

Reassignment (:mod:`ingest.broker.reassignment`), on the worker thread: a leader whose partition's
assignment gained or lost replicas tracks the new ones as followers; a broker that left a partition's
assignment stops its replica and deletes the log (also at start-up, for a move completed while it was down).

Topic deletion and configs (Kafka's ``/admin/delete_topics`` and ``/config/topics``), on the worker
thread too: a topic marked for deletion stops being followed or led here, every log of it on this
broker is deleted, and the broker acknowledges with ``/admin/delete_topics/[topic]/[broker_id]``
(the controller removes the topic once every replica's broker has; a broker that was down does it
when it comes back, before it sets up any replica of the topic). A Kafka topic's configs are
applied to its logs here as they change (:meth:`~ingest.broker.log_manager.LogManager.set_topic_config`).

Followers that cannot copy past their leader's damaged bytes report it on the
:class:`~ingest.broker.replica_stalls.StallBoard`; the in-sync-set thread publishes it in
ZooKeeper after its writes (``ingest topics describe`` shows it).

Repeated failures of these loops (ZooKeeper away, a full disk under the checkpoint) are
logged through a :class:`~ingest.ratelimited_log.RateLimitedLog`: once a minute per cause.

Stale decisions: every state change of a controller is written in a ZooKeeper transaction
that also checks the controller epoch, so a deposed controller's writes fail in ZooKeeper;
a broker ignores states older (lower leader epoch) than one it has applied.
"""
from __future__ import annotations

import logging
import queue
import threading
import time

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ingest import znodes
from ingest.broker import hw_checkpoint
from ingest.broker.assignment import assign
from ingest.broker.controller_batches import StateBatches
from ingest.broker.delayed import Purgatory
from ingest.broker.followed_partition import FollowedPartition07
from ingest.broker.kafka.fetcher_manager import ReplicaFetcherManager
from ingest.broker.kafka.followed_partition import FollowedPartition
from ingest.broker.kafka.replica_fetcher import ReplicaFetcherThread
from ingest.broker.kafka.sasl_config import inter_broker_login
from ingest.broker.leader_epochs import LeaderEpochCache
from ingest.broker.leader_repair import LeaderRepair
from ingest.broker.partition import ReplicatedPartition, Role
from ingest.broker.port07_carrier import Port07Carrier
from ingest.broker.replica_fetcher import ReplicaFetcherThread as ReplicaFetcherThread07
from ingest.broker.replica_stalls import StallBoard
from ingest.broker.storage_failures import StorageFailurePublisher
from ingest.broker.throttle_configs import ThrottleConfigs
from ingest.broker.topic_kind import TopicKind, wrong_kind
from ingest.broker.zk_deadline import DeadlineCalls
from ingest.errors import (IngestError, LeaderNotAvailableError, LogOfflineError, NotLeaderForPartitionError,
                           WrongPartitionError)
from ingest.ratelimited_log import RateLimitedLog
from ingest.wire.kafka.port07 import REPLICA_FETCHES_KEY

log = logging.getLogger(__name__)

LOG_INTERVAL_S = 60.0


def _now_ms() -> float:
    return time.monotonic() * 1000.0


class ReplicaManager:
    """See the module docstring.

    Args:
        config: the broker config (replication keys).
        log_manager: creates and holds the replica logs.
        client: the broker's KazooClient; ``view``: its ReplicationView (started).
    """

    def __init__(self, config, broker_id: int, log_manager, client, view, *, kafka_purgatory: Purgatory | None = None,
                 inter_broker_listener: str | None = None, inter_broker_ssl=None, scheduler=None, timer=None) -> None:
        self.config = config
        self.kafka_purgatory = kafka_purgatory   # where the Kafka listener's fetches and acks=-1 produces wait
        self.inter_broker_listener = inter_broker_listener   # the leader's Kafka listener a Kafka topic's follower uses
        self.inter_broker_login = inter_broker_login(config, inter_broker_listener)   # its SASL login, if any
        self.inter_broker_ssl = inter_broker_ssl   # the client SSLContext towards that listener when it is SSL
        self.broker_id = broker_id
        self.logs = log_manager
        self.client = client
        self.view = view
        self.purgatory = Purgatory(f"purgatory-{broker_id}", timer)   # timer: the broker's shared DelayTimer
        self.min_isr = config["min.insync.replicas"]
        self.lag_ms = config["replica.lag.time.max.ms"]
        self.partitions: dict[tuple[str, int], ReplicatedPartition] = {}
        self.fetchers07 = ReplicaFetcherManager(config["num.replica.fetchers"], self._fetcher_thread07)
        """The fetcher threads of 0.7-format partitions (a Kafka topic's are :attr:`kafka_fetchers`)."""
        self.throttles = ThrottleConfigs(config, broker_id)
        """The replication throttle's leader and follower quotas (Kafka topics only)."""
        self.kafka_fetchers = ReplicaFetcherManager(config["num.replica.fetchers"], self._fetcher_thread)
        self._hws = hw_checkpoint.read(config["log.dir"])
        self.zk = DeadlineCalls(client)   # for requests a client waits on (never client.retry's endless wait)
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._isr_wanted = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.stalls = StallBoard(broker_id, on_change=self._isr_wanted.set)
        self.port07 = Port07Carrier(view, inter_broker_listener, inter_broker_ssl, f"broker-{broker_id}",
                                    self.inter_broker_login)
        """How 0.7 replicated topics' followers and repair reads reach another broker."""
        self.repair = LeaderRepair(broker_id, lambda: list(self.partitions.values()), self.port07.connect,
                                   timeout_s=config["replica.socket.timeout.ms"] / 1000.0,
                                   max_bytes=config["replica.fetch.max.bytes"], scheduler=scheduler)
        self.storage_failures = StorageFailurePublisher(client, broker_id, scheduler)   # the broker's KafkaScheduler
        self._storage_lock = threading.Lock()   # the last update publishes the latest set
        self._errors = RateLimitedLog(log, interval_s=LOG_INTERVAL_S)
        self.isr_batches = StateBatches(client, view, None, config["controller.batch.partitions"],
                                        on_written=self._isr_written,
                                        writer=f"broker {broker_id}'s in-sync-set writer")
        """The in-sync-set writes: conditional on each state's version, in bounded transactions."""

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> "ReplicaManager":
        self.throttles.watch(self.client)   # first: no fetcher starts before the rates are known
        for name, target in (("replica-manager", self._worker), ("isr-writer", self._isr_loop)):
            t = threading.Thread(target=target, name=f"{name}-{self.broker_id}", daemon=True)
            t.start()
            self._threads.append(t)
        self.repair.start()
        self.storage_failures.start()
        self.view.on_storage_failures(self._isr_wanted.set)   # a follower that writes again may rejoin
        self.view.on_shutting_down(lambda _ids: self._isr_wanted.set())   # a restarted broker may rejoin
        self.view.on_topic(lambda topic, assignment: self._enqueue_topic(topic, assignment))
        self.view.on_state(lambda topic, p, _state: self._work.put((topic, p)))
        self.view.on_brokers(lambda _brokers: self._work.put("brokers"))
        self.view.on_deleting(lambda topics: [self._work.put(("delete", t)) for t in sorted(topics)])
        self.view.on_topic_config(self.throttles.apply_topic)   # no I/O: on the watch's thread
        self.view.on_topic_config(lambda topic, configs: self._work.put(("config", topic, configs)))
        for topic in sorted(self.view.deleting):
            self._work.put(("delete", topic))
        for topic, configs in list(self.view.topic_configs.items()):
            self.logs.set_topic_config(topic, configs)
            self.throttles.apply_topic(topic, configs)
        for topic, assignment in list(self.view.assignments.items()):
            self._enqueue_topic(topic, assignment)
        return self

    def stop(self) -> None:
        """Stop following, answer every waiting request, save the high watermarks."""
        self._stop.set()
        self._work.put(None)
        self._isr_wanted.set()
        self.fetchers07.stop()
        self.throttles.close()
        self.kafka_fetchers.stop()
        self.repair.stop()
        self.purgatory.close()
        for t in self._threads:
            t.join(10)
        self.storage_failures.stop()
        self.checkpoint()

    def _enqueue_topic(self, topic: str, assignment: dict[int, tuple[int, ...]]) -> None:
        for p, replicas in assignment.items():
            if self.broker_id in replicas:
                self._work.put((topic, p))
            elif (topic, p) in self.partitions or self.logs.get_log(topic, p) is not None:
                self._work.put(("remove", topic, p))   # reassigned away (also while this broker was down)

    # --- roles -----------------------------------------------------------------------------------

    def _worker(self) -> None:
        while not self._stop.is_set():
            item = self._work.get()
            if item is None:
                return
            try:
                if item == "brokers":
                    for key, part in list(self.partitions.items()):
                        if part.role is not Role.LEADER:
                            self._reconcile(*key)
                elif item[0] == "delete":
                    self._delete_topic(item[1])
                elif item[0] == "remove":
                    self._remove_replica(item[1], item[2])
                elif item[0] == "config":
                    n = self.logs.set_topic_config(item[1], item[2])
                    log.info("topic %s: configs %s applied to %d log(s) here", item[1], item[2] or "{}", n)
                else:
                    self._reconcile(*item)
            except Exception:  # noqa: BLE001 - one partition's failure must not stop the others
                self._errors.log(logging.ERROR, str(item), "handling failed", "replica manager: handling %s failed",
                                 item, exc_info=True)

    def _reconcile(self, topic: str, partition: int) -> None:
        replicas = self.view.assignments.get(topic, {}).get(partition)
        if not replicas or self.broker_id not in replicas or self.view.is_deleting(topic):
            return
        state = self.view.state(topic, partition)
        part = self.partitions.get((topic, partition))
        kafka = self.view.is_kafka(topic)
        if part is not None and part.replicas != replicas:
            part.set_replicas(replicas)   # reassigned: replicas added or removed
        if part is None:
            kind = TopicKind.KAFKA if kafka else TopicKind.V07
            lg = self.logs.get_or_create_replica_log(topic, partition, kind)
            purgatory = self.kafka_purgatory if kafka and self.kafka_purgatory is not None else self.purgatory
            part = ReplicatedPartition(topic, partition, self.broker_id, lg, replicas,
                                       self._hws.get((topic, partition), 0), purgatory, _now_ms)
            if kafka:
                part.epochs = LeaderEpochCache(lg.directory, lg.log_end)
            part.on_storage = self._storage_changed
            with self._lock:
                self.partitions[(topic, partition)] = part
        if state is None:
            return
        if state.leader_epoch < part.epoch:
            log.info("%s: ignoring an older state (epoch %d)", part, state.leader_epoch)
            return
        if state.leader == self.broker_id and self.view.predates(state, self.broker_id) \
                and part.role is not Role.LEADER:
            # written before this broker registered (it restarted): the controller re-elects first
            log.info("%s: the state naming this broker leader predates its registration; waiting for the "
                     "controller's election", part)
            self._stop_fetcher(part.key)
            part.become_follower(znodes.PartitionState(-1, state.leader_epoch, state.isr, state.controller_epoch,
                                                       state.zk_version, state.mzxid))
            return
        if state.leader == self.broker_id:
            if part.role is Role.LEADER and state.leader_epoch == part.epoch:
                part.update_state(state)
                return
            self._stop_fetcher(part.key)
            part.become_leader(state)
            self._isr_wanted.set()
            return
        if kafka:
            addr = None if self.inter_broker_listener is None else \
                self.view.kafka_endpoint(state.leader, self.inter_broker_listener)
            self._follow(part, state, addr, self.kafka_fetchers, FollowedPartition,
                         f" with Kafka listener {self.inter_broker_listener}")
            return
        found = self.port07.address(state.leader)
        addr = found[1:] if found is not None else None
        self._follow(part, state, addr, self.fetchers07, FollowedPartition07, "")

    def _follow(self, part: ReplicatedPartition, state, addr: tuple[str, int] | None, fetchers, follow_cls,
                registered: str) -> None:
        """Follow ``part`` from ``state.leader`` at ``addr`` on one of ``fetchers``' threads as a ``follow_cls``
        (worker thread). A state that changes neither leader, epoch nor address only updates the partition;
        ``addr`` None means the leader has not registered yet (``registered`` names where, for the log)."""
        followed = fetchers.followed(part.key)
        if (part.role is Role.FOLLOWER and state.leader_epoch == part.epoch and part.leader == state.leader
                and followed is not None and addr == (followed[0].host, followed[0].port)):
            part.update_state(state)
            return
        self._stop_fetcher(part.key)
        part.become_follower(state)
        if state.leader >= 0 and addr is not None:
            fetchers.add(follow_cls(part, state.leader, state.leader_epoch,
                                    max_bytes=self.config["replica.fetch.max.bytes"],
                                    on_stall=self.stalls.report), (state.leader, *addr))
        elif state.leader >= 0:
            log.info("%s: leader %d is not registered yet%s; waiting for it", part, state.leader, registered)

    def _fetcher_thread(self, fetcher_id: int, leader: tuple[int, str, int]) -> ReplicaFetcherThread:
        return ReplicaFetcherThread(fetcher_id, self.broker_id, leader,
                                    wait_ms=self.config["replica.fetch.wait.max.ms"],
                                    response_max_bytes=self.config["replica.fetch.response.max.bytes"],
                                    socket_timeout_s=self.config["replica.socket.timeout.ms"] / 1000.0,
                                    ssl_context=self.inter_broker_ssl, sasl=self.inter_broker_login,
                                    quota=self.throttles.follower)

    def _fetcher_thread07(self, fetcher_id: int, leader: tuple[int, str, int]) -> ReplicaFetcherThread07:
        found = self.port07.address(leader[0])
        # over the Kafka listener (a secured leader): its TLS and the broker's inter-broker login, and
        # REPLICA_FETCHES only if the leader registered its key (an older leader did not)
        extra = {"sasl": self.inter_broker_login, "ssl_context": self.inter_broker_ssl, "over_kafka": True,
                 "knows_fetches": lambda: self.view.serves(leader[0], REPLICA_FETCHES_KEY)} \
            if found is not None and found[0] and found[1:] == leader[1:] else {}
        return ReplicaFetcherThread07(fetcher_id, self.broker_id, leader,
                                      wait_ms=self.config["replica.fetch.wait.max.ms"],
                                      response_max_bytes=self.config["replica.fetch.response.max.bytes"],
                                      socket_timeout_s=self.config["replica.socket.timeout.ms"] / 1000.0, **extra)

    def _delete_topic(self, topic: str) -> None:
        """Stop being a replica of ``topic``, delete its logs here, acknowledge in ZooKeeper (worker thread)."""
        if not self.view.is_deleting(topic):
            return   # the marker is gone: the controller finished (this broker acknowledged earlier)
        keys = [key for key in list(self.partitions) if key[0] == topic]
        for key in keys:
            self._stop_fetcher(key)
        with self._lock:
            for key in keys:
                part = self.partitions.pop(key, None)
                if part is not None:
                    part.become_follower(znodes.PartitionState(-1, part.epoch, (), 0))   # answers waiting requests
        self._hws = {k: v for k, v in self._hws.items() if k[0] != topic}
        self.logs.delete_topic(topic)
        for key in keys:
            self.stalls.report(key, None)
        try:
            self.client.retry(self.client.create, znodes.delete_ack_path(topic, self.broker_id))
        except NodeExistsError:
            pass   # acknowledged before (a restart, or a replayed create)
        except NoNodeError:
            return   # the controller finished meanwhile
        log.info("topic %s: deleted its logs on broker %d and acknowledged", topic, self.broker_id)

    def _remove_replica(self, topic: str, partition: int) -> None:
        """This broker is no longer in the partition's assignment (a reassignment moved its replica away):
        stop following, answer waiting requests, delete the log here (Kafka's StopReplica with delete)."""
        replicas = self.view.assignments.get(topic, {}).get(partition)
        if replicas is None or self.broker_id in replicas or self.view.is_deleting(topic):
            return   # assigned here again, or the topic's deletion removes it
        key = (topic, partition)
        self._stop_fetcher(key)
        with self._lock:
            part = self.partitions.pop(key, None)
        if part is not None:
            part.become_follower(znodes.PartitionState(-1, part.epoch, (), 0))   # answers waiting requests
        self._hws = {k: v for k, v in self._hws.items() if k != key}   # replaced whole: the checkpointer reads it
        self.stalls.report(key, None)
        deleted = self.logs.delete_partition(topic, partition)
        log.info("%s-%d: broker %d is no longer a replica (replicas now %s); stopped it%s", topic, partition,
                 self.broker_id, list(replicas), f" and deleted {deleted[0]}" if deleted else "")

    def _stop_fetcher(self, key: tuple[str, int]) -> None:
        self.fetchers07.remove(key)
        self.kafka_fetchers.remove(key)

    # --- requests ----------------------------------------------------------------------------------

    def partition(self, topic: str, partition: int, kind: TopicKind = TopicKind.V07) -> ReplicatedPartition | None:
        """The replica of a replicated topic's partition, or None when ``topic`` is not replicated.

        Raises:
            WrongTopicKindError: the topic is a cluster topic of the other ``kind`` (the port that asks
                serves only its own kind).
            NotLeaderForPartitionError / LeaderNotAvailableError: the topic is replicated but this
                broker holds no replica of that partition (or has not set it up yet).
        """
        assignment = self.view.assignments.get(topic)
        if assignment is None:
            return None
        if self.view.is_kafka(topic) != (kind is TopicKind.KAFKA):
            raise wrong_kind(topic, TopicKind.V07 if kind is TopicKind.KAFKA else TopicKind.KAFKA)
        if self.view.is_deleting(topic):   # never a local log of that name until the controller removed it
            raise LeaderNotAvailableError(f"topic {topic!r} is being deleted; once it is gone, a produce to it "
                                          "creates it anew as auto.create.topics.enable allows")
        part = self.partitions.get((topic, partition))
        if part is not None:
            return part
        state = self.view.state(topic, partition)
        if partition not in assignment:
            raise WrongPartitionError(
                f"replicated topic {topic!r} has partitions 0..{len(assignment) - 1}; {partition} is not one")
        if state is None or state.leader < 0:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader yet")
        raise NotLeaderForPartitionError(
            f"broker {self.broker_id} holds no replica of {topic}-{partition}; its leader is broker {state.leader}")

    def is_replicated(self, topic: str) -> bool:
        return topic in self.view.assignments

    def replicated_in_zookeeper(self, topic: str, deadline: float) -> bool:
        """Ask ZooKeeper itself (not the watched view) whether ``topic`` is replicated: before this
        broker creates a 0.7 log for a topic it has never seen. An unreadable node counts as a 0.7 topic.

        Raises:
            CoordinationUnavailableError: ZooKeeper did not answer by ``deadline`` (monotonic); a
                topic ZooKeeper cannot vouch for is not created (it may be replicated).
        """
        if topic in self.view.assignments:
            return True
        try:
            data, _ = self.zk.call(deadline, self.client.get_async, znodes.topic_dir(topic),
                                   what=f"is topic {topic} replicated")
            return znodes.parse_assignment(data) is not None
        except NoNodeError:
            return False
        except (KazooException, ValueError) as exc:   # every produce to the topic asks again: rate-limited
            self._errors.warning(topic, "unreadable topic node", "cannot read topic %s in ZooKeeper (%s: %s); "
                                 "treating it as a 0.7 topic", topic, type(exc).__name__, exc)
            return False

    def wants_isr_check(self) -> None:
        self._isr_wanted.set()

    def request_repair(self, key: tuple[str, int]) -> None:
        """Ask the repair thread to look at ``key``'s damaged ranges (never blocks: network threads call it)."""
        self.repair.request(key)

    def create_topic(self, topic: str, partitions: int, replication_factor: int, deadline: float,
                     kind: TopicKind = TopicKind.V07) -> None:
        """Write a replicated topic's assignment (a produce auto-created it) of ``kind``; the controller then
        elects its leaders. Never raises for a topic created meanwhile by someone else.

        Raises:
            CoordinationUnavailableError: ZooKeeper did not answer by ``deadline`` (monotonic); the
                write may still land (a retry then finds the topic).
        """
        live = sorted(self.view.brokers)
        try:
            assignment = assign(live, partitions, min(replication_factor, len(live)))
        except IngestError as exc:   # every produce to the topic tries again: rate-limited
            self._errors.warning(topic, "auto-create refused", "cannot auto-create replicated topic %s: %s",
                                 topic, exc)
            return
        try:
            fmt = znodes.KAFKA_FORMAT if kind is TopicKind.KAFKA else None
            self.zk.call(deadline, self.client.create_async, znodes.topic_dir(topic),
                         znodes.assignment_value(assignment, fmt), makepath=True, what=f"create topic {topic}")
            log.info("auto-created %s topic %s: %s", "Kafka" if fmt else "replicated", topic, assignment)
        except NodeExistsError:
            pass
        except KazooException as exc:
            self._errors.warning(topic, "auto-create refused", "cannot auto-create replicated topic %s: %s: %s",
                                 topic, type(exc).__name__, exc)

    # --- storage failures --------------------------------------------------------------------------

    def _storage_changed(self, _part: ReplicatedPartition) -> None:
        """A replica's storage failed or recovered: publish the broker's set (never waits on ZooKeeper)."""
        with self._storage_lock:
            self.storage_failures.update({key: part.storage_failure for key, part in list(self.partitions.items())
                                          if part.storage_failure is not None})

    def _check_offline_logs(self) -> None:
        """A log the flusher took offline fails no append until one is tried: mark its replica now."""
        for part in list(self.partitions.values()):
            if part.storage_failure is None and part.log.offline:
                part.storage_failed(LogOfflineError(f"log {part.log.name} is offline"))

    # --- in-sync sets ----------------------------------------------------------------------------

    def _isr_loop(self) -> None:
        """The leaders' in-sync set checks (every lag/4, or when something asks), and the high-watermark
        checkpoint every ``replica.high.watermark.checkpoint.interval.ms`` on the same thread."""
        interval = max(0.05, self.lag_ms / 4000.0)
        checkpoint_s = self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000.0
        next_pass = next_checkpoint = time.monotonic()
        next_pass += interval
        next_checkpoint += checkpoint_s
        while not self._stop.is_set():
            wanted = self._isr_wanted.wait(max(0.0, min(next_pass, next_checkpoint) - time.monotonic()))
            if self._stop.is_set():
                return
            now = time.monotonic()
            if now >= next_checkpoint:
                self.checkpoint()
                next_checkpoint = now + checkpoint_s
            if not wanted and now < next_pass:
                continue
            self._isr_wanted.clear()
            next_pass = now + interval
            self._check_offline_logs()
            try:
                self._write_isrs()
            except Exception:  # noqa: BLE001 - a pass runs every lag/4: a repeated failure is rate-limited
                self._errors.log(logging.ERROR, "in-sync sets", "in-sync set update failed",
                                 "in-sync set update failed", exc_info=True)
            try:
                self.stalls.publish(self.client)
            except Exception:  # noqa: BLE001 - the in-sync sets matter more than this report
                self._errors.log(logging.ERROR, "zookeeper", "stalled replicas not published",
                                 "publishing the stalled replicas failed", exc_info=True)

    def _not_joining(self, part: ReplicatedPartition) -> frozenset[int]:
        # a broker in a controlled shutdown was taken out of the in-sync set by the controller: it stays out;
        # and a follower whose broker is gone does not join on the strength of its last fetches
        gone = frozenset(r for r in part.replicas if r not in self.view.brokers)
        return self.view.cannot_write(part.topic, part.partition) | self.view.shutting_down | gone

    def _write_isrs(self) -> None:
        """Every led partition whose in-sync set should change, written ``controller.batch.partitions`` per
        conditional ZooKeeper transaction (:meth:`StateBatches.write
        <ingest.broker.controller_batches.StateBatches.write>`); a refused one is read back and decided
        again (:meth:`_decide_again`); one whose write did not land keeps its set."""
        pending: list[ReplicatedPartition] = []
        changes = []
        for part in list(self.partitions.values()):
            if part.role is not Role.LEADER:
                continue
            change = part.isr_change(self.lag_ms, self._not_joining(part))
            if change is None:
                continue
            new_isr, epoch, version, controller_epoch = change
            pending.append(part)
            held = znodes.PartitionState(self.broker_id, epoch, part.isr, controller_epoch, version)
            changes.append(((part.topic, part.partition, part.replicas), held,
                            znodes.PartitionState(self.broker_id, epoch, new_isr, controller_epoch)))
        if not changes:
            return
        try:
            self.isr_batches.write(changes, self._decide_again)
        except (KazooException, KazooTimeoutError) as exc:
            self._errors.warning("zookeeper", "in-sync set write failed",
                                 "cannot write the in-sync sets of %d partition(s) to ZooKeeper (%s: %s); "
                                 "each keeps its set", len(changes), type(exc).__name__, exc)
        finally:
            for part in pending:
                if part.isr_pending:   # not written: free it for the next pass
                    part.isr_written(None, part.epoch, part.zk_version)

    def _decide_again(self, topic: str, partition: int, _replicas, state: znodes.PartitionState | None
                      ) -> znodes.PartitionState | None:
        """A refused in-sync-set write, on the state read back: the set wanted now if this broker still leads
        in the same epoch (the state's version taken in), else nothing (the worker applies the new state)."""
        part = self.partitions.get((topic, partition))
        if part is None or state is None or state.leader != self.broker_id or state.leader_epoch != part.epoch:
            self._work.put((topic, partition))
            return None
        if state.zk_version != part.zk_version:   # this one changed (the others of its batch were rolled back)
            log.info("%s: state changed under the in-sync set update; deciding again on version %d", part,
                     state.zk_version)
            part.update_state(state)
        change = part.wanted_isr(self.lag_ms, self._not_joining(part))
        if change is None:
            return None
        new_isr, epoch, _version, controller_epoch = change
        return znodes.PartitionState(self.broker_id, epoch, new_isr, controller_epoch)

    def _isr_written(self, item, state: znodes.PartitionState, version: int | None) -> None:
        part = self.partitions.get(item[:2])
        if part is None or version is None:
            return
        joined = set(state.isr) - set(part.isr)
        part.isr_written(state.isr, state.leader_epoch, version)
        if joined and part.log.damaged_ranges():
            self.repair.request(part.key)   # a replica joined: it may hold good bytes for our damage

    # --- high watermarks ---------------------------------------------------------------------------

    def checkpoint(self) -> None:
        hws = {**self._hws, **{key: part.hw for key, part in list(self.partitions.items())}}
        try:
            hw_checkpoint.write(self.config["log.dir"], hws)
        except OSError as exc:
            self._errors.warning(self.config["log.dir"], f"checkpoint {exc.strerror}",
                                 "cannot save the high-watermark checkpoint: %s", exc)
