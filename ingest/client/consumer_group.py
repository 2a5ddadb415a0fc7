"""High-level consumer: consumer groups coordinated through ZooKeeper (Kafka 0.7 design).

ZooKeeper layout (``G`` = ``groupid``; brokers' nodes see ``ingest.client.discovery``;
paths are built by :mod:`ingest.znodes`)::

    /consumers/G/ids/[consumer_id]                        -> {"topic": #streams, ...}  (ephemeral, JSON)
    /consumers/G/owners/[topic]/[broker_id-partition_id]  -> owning thread id          (ephemeral)
    /consumers/G/offsets/[topic]/[broker_id-partition_id] -> next offset to consume    (persistent)

A replicated topic's partition is named by its home broker (the first replica of
its assignment, ``/brokers/topics/[topic]``'s data), so its owner and offset nodes
are ``home-partition`` whichever broker leads it; its fetcher finds the current
leader through TOPIC_METADATA and follows a failover at the consumed offset (see
:mod:`ingest.client.fetcher`). A rebalance whose outcome equals what this consumer
owns (e.g. a broker died but only replicated partitions are subscribed) changes
nothing: the fetchers keep running, so a leader failover costs no redelivery.

Rebalance (:meth:`ConsumerConnector._rebalance`, at start-up and whenever a watch
fires on ``/brokers/ids``, ``/brokers/topics[/T]`` or ``/consumers/G/ids``, and after
a session expiry): stop the fetchers, commit consumed offsets, release owned
partitions, read both registries, compute this consumer's share with
:func:`ingest.client.rebalance.assign`, create the owner nodes, and restart the
fetchers from the committed offsets (``autooffset.reset`` smallest/largest when
there is none or it is out of range). When an owner node still belongs to
another consumer (it has not released yet, or it died and its session has not
expired), release everything, back off (``rebalance.backoff.ms`` growing 1.5x
per attempt up to half the session timeout) and retry, up to
``rebalance.retries.max`` times.

Every ZooKeeper call goes through ``client.retry`` (kazoo's recipe), so a
connection loss waits for the reconnect instead of failing a commit or a
rebalance. A replayed create whose first attempt landed meets
``NodeExistsError`` and a replayed delete ``NoNodeError``; both are tolerated
where the node is ours (an owner node holding our own thread id, our
registration, an offset node we then overwrite).

Concurrency: watches only set an event; one rebalance thread does all the work
under ``_lock``, which ``commit_offsets`` and ``shutdown`` also take. Streams are
iterated by application threads (see :mod:`ingest.client.consumer_stream`), fed by
one fetcher thread per broker (:mod:`ingest.client.fetcher`), which
:mod:`ingest.client.group_fetchers` starts at each owned partition's committed offset.
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import uuid
from typing import Sequence

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from ingest import znodes
from ingest.client import group_registry as registry
from ingest.client import rebalance
from ingest.client.consumer_config import CONSUMER_CONFIG
from ingest.client.consumer_stream import ConsumedMessage, MessageStream, PartitionState
from ingest.client.discovery import BrokerAddress, read_brokers, start_kazoo
from ingest.client.group_fetchers import GroupFetchers
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.errors import ConfigError, ConsumerTimeoutError, CoordinationError, WrongTopicKindError
from ingest.zk_security import ZkSecurity

log = logging.getLogger(__name__)


class ConsumerConnector:
    """One member of a consumer group.

    Args:
        config: a :data:`CONSUMER_CONFIG` Config (or dict); needs ``zk.connect`` and ``groupid``.
    """

    def __init__(self, config: Config | dict, *, clock: Clock = SYSTEM_CLOCK) -> None:
        if not isinstance(config, Config):
            config = CONSUMER_CONFIG.parse(config)
        if not config["zk.connect"] or not config["groupid"]:
            raise ConfigError("the group consumer needs zk.connect and groupid "
                              "(use SimpleConsumer / --brokers without ZooKeeper)")
        self.config = config
        self.clock = clock
        self.group = config["groupid"]
        self.consumer_id = config["consumer.id"] or (
            f"{re.sub(r'[^A-Za-z0-9._-]', '_', socket.gethostname())}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        self.zk = start_kazoo(config["zk.connect"], session_timeout_ms=config["zk.sessiontimeout.ms"],
                              connection_timeout_ms=config["zk.connectiontimeout.ms"],
                              security=ZkSecurity.from_config(config))
        self._lock = threading.RLock()
        self._generation = 0
        self._subscription: dict[str, int] = {}
        self._whitelist: tuple[re.Pattern, int] | None = None
        self._streams: dict[str, list[MessageStream]] = {}
        self._shared_streams: list[MessageStream] = []
        self._owned: dict[tuple[str, int, int], PartitionState] = {}
        self._owner_threads: dict[tuple[str, int, int], str] = {}
        self._claim_live: dict[int, BrokerAddress] = {}
        self._fetch = GroupFetchers(self.zk, self.group, config)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._session_lost = False
        self.rebalance_count = 0
        self._watched_topics: set[str] = set()
        self._topic_nodes: set[str] = set()
        self.zk.add_listener(self._on_state)
        self._threads: list[threading.Thread] = []

    # --- public API -------------------------------------------------------------------

    def create_streams(self, topic_counts: dict[str, int]) -> dict[str, list[MessageStream]]:
        """Subscribe to topics, ``{topic: #streams}``; returns the streams per topic."""
        self._check_not_started()
        timeout = self._timeout_s()
        max_chunks = self.config["queuedchunks.max"]
        for topic, n in topic_counts.items():
            if n < 1:
                raise ConfigError(f"topic {topic!r}: number of streams must be >= 1, got {n}")
            if registry.kafka_topic(self.zk, topic):
                raise WrongTopicKindError(
                    f"topic {topic!r} is a Kafka-format topic: consumer groups of Kafka-format topics do not exist "
                    "yet; read its partitions with ingest.client.kafka.fetcher.KafkaFetcher (or `ingest "
                    "console-consumer`), or use a Kafka consumer")
            self._streams[topic] = [MessageStream(f"{topic}-{i}", max_chunks, self.generation, timeout)
                                    for i in range(n)]
        self._subscription = dict(topic_counts)
        self._start()
        return self._streams

    def create_streams_by_filter(self, whitelist: str, num_streams: int = 1) -> list[MessageStream]:
        """Subscribe to every topic whose name fully matches ``whitelist`` (a regex), now and later."""
        self._check_not_started()
        try:
            pattern = re.compile(whitelist)
        except re.error as exc:
            raise ConfigError(f"whitelist {whitelist!r} is not a valid regex: {exc}") from exc
        self._whitelist = (pattern, num_streams)
        self._shared_streams = [MessageStream(f"filter-{i}", self.config["queuedchunks.max"], self.generation,
                                              self._timeout_s()) for i in range(num_streams)]
        self._subscription = self._whitelist_topics()
        self._start()
        return self._shared_streams

    def generation(self) -> int:
        return self._generation

    def owned_partitions(self) -> dict[str, list[tuple[int, int]]]:
        """What this consumer owns now: ``{topic: sorted [(broker_id, partition)]}``."""
        with self._lock:
            out: dict[str, list[tuple[int, int]]] = {}
            for (t, b, p) in sorted(self._owned):
                out.setdefault(t, []).append((b, p))
            return out

    def commit_offsets(self, include_current: bool = True) -> int:
        """Write consumed offsets of owned partitions to ZooKeeper; returns how many changed.

        ``include_current``: also count the message each stream handed out last as
        consumed (call it after processing; autocommit passes False).
        """
        if include_current:
            for s in self._all_streams():
                s.mark_current_consumed()
        with self._lock:
            return self._commit_locked()

    def shutdown(self) -> None:
        """Commit, release ownership, deregister, stop streams and close connections."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        for t in self._threads:
            t.join(10)
        with self._lock:
            self._stop_fetchers()
            try:
                if self.config["autocommit.enable"]:
                    self._commit_locked()
                self._release_locked()
                self._delete(znodes.consumer_path(self.group, self.consumer_id))
            except Exception as exc:  # ZooKeeper gone: ephemeral nodes vanish with the session anyway
                log.warning("consumer %s: clean deregistration failed: %s", self.consumer_id, exc)
            for s in self._all_streams():
                s.stop()
            self._fetch.close()
        self.zk.stop()
        self.zk.close()

    def __enter__(self) -> "ConsumerConnector":
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # --- start-up and watches ------------------------------------------------------------

    def _timeout_s(self) -> float | None:
        ms = self.config["consumer.timeout.ms"]
        return None if ms < 0 else ms / 1000.0

    def _all_streams(self) -> list[MessageStream]:
        return [s for v in self._streams.values() for s in v] + list(self._shared_streams)

    def _check_not_started(self) -> None:
        if self._threads or self._subscription:
            raise ConfigError(f"consumer {self.consumer_id} already subscribed to {sorted(self._subscription)}; "
                              "one subscription per ConsumerConnector (create another connector)")

    def _start(self) -> None:
        for path in (znodes.group_ids_dir(self.group), znodes.group_owners_dir(self.group),
                     znodes.group_offsets_dir(self.group), znodes.BROKER_IDS, znodes.BROKER_TOPICS):
            self.zk.retry(self.zk.ensure_path, path)
        self._register()
        # Watches first (kazoo calls each once right away), then one rebalance that reads the
        # registries after them: a change from here on fires a watch and rebalances again.
        # (kazoo's ChildrenWatch recipe retries its own reads)
        self.zk.ChildrenWatch(znodes.group_ids_dir(self.group), self._on_watch)
        self.zk.ChildrenWatch(znodes.BROKER_IDS, self._on_watch)
        self.zk.ChildrenWatch(znodes.BROKER_TOPICS, self._on_topics)
        self._watch_topics()
        self._wake.clear()
        with self._lock:
            self._rebalance()
        for target, name in ((self._run_rebalancer, "rebalancer"), (self._run_autocommit, "autocommit")):
            t = threading.Thread(target=target, name=f"consumer-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    # --- ZooKeeper writes, each replayable by client.retry ----------------------------------

    def _delete(self, path: str) -> None:
        """Delete ``path``; already gone is fine (a replayed delete whose first attempt landed)."""
        try:
            self.zk.retry(self.zk.delete, path)
        except NoNodeError:
            pass

    def _put(self, path: str, value: bytes) -> None:
        """Set persistent ``path`` to ``value``, creating it if missing (a replayed create that landed is fine)."""
        try:
            self.zk.retry(self.zk.set, path, value)
            return
        except NoNodeError:
            pass
        try:
            self.zk.retry(self.zk.create, path, value, makepath=True)
        except NodeExistsError:
            self.zk.retry(self.zk.set, path, value)

    def _register(self) -> None:
        path = znodes.consumer_path(self.group, self.consumer_id)
        data = json.dumps(self._subscription, sort_keys=True).encode()
        try:
            self.zk.retry(self.zk.create, path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            self.zk.retry(self.zk.set, path, data)  # ours from a replayed create, or re-registration
        log.info("consumer %s registered in group %s for %s", self.consumer_id, self.group, self._subscription)

    def _whitelist_topics(self) -> dict[str, int]:
        pattern, n = self._whitelist
        return {t: n for t in self.zk.retry(self.zk.get_children, znodes.BROKER_TOPICS)
                if pattern.fullmatch(t) and not registry.kafka_topic(self.zk, t)}   # a group reads 0.7 topics

    def _watch_topics(self) -> None:
        # The topic node is never created here: a replicated topic's creator writes its
        # assignment as that node's data. A DataWatch works before the node exists (and
        # sees the assignment); the ChildrenWatch (brokers registering a legacy topic)
        # starts once it exists.
        for topic in self._subscription:
            path = znodes.topic_dir(topic)
            if topic not in self._topic_nodes:
                self._topic_nodes.add(topic)
                self.zk.DataWatch(path, self._on_topic_node)
            if topic not in self._watched_topics and self.zk.retry(self.zk.exists, path):
                self._watched_topics.add(topic)
                self.zk.ChildrenWatch(path, self._on_watch)

    def _on_topic_node(self, _data, _stat) -> bool:
        return self._on_watch(None)

    def _on_watch(self, _children) -> bool:
        if self._stopping.is_set():
            return False
        self._wake.set()
        return True

    def _on_topics(self, children) -> bool:
        """New topics matter only to a whitelist whose set of matching topics changed."""
        if self._stopping.is_set():
            return False
        if self._whitelist is not None:
            pattern = self._whitelist[0]
            if {t for t in children if pattern.fullmatch(t)} != set(self._subscription):
                self._wake.set()
        return True

    def _on_state(self, state) -> None:
        if self._stopping.is_set():
            return  # our own shutdown closes the session: not a loss worth a warning
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("consumer %s: ZooKeeper session lost", self.consumer_id)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._wake.set()

    def _run_rebalancer(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait()
            if self._stopping.is_set():
                return
            self._wake.clear()
            try:
                with self._lock:
                    if self._session_lost:
                        self._session_lost = False
                        self._owned.clear()  # the owner nodes died with the old session
                        self._register()
                    if self._whitelist is not None:
                        topics = self._whitelist_topics()
                        if topics != self._subscription:
                            self._subscription = topics
                            self._register()
                    self._watch_topics()
                    self._rebalance()
            except Exception as exc:
                log.error("consumer %s: rebalance failed: %s; retrying", self.consumer_id, exc)
                self.clock.sleep(self.config["rebalance.backoff.ms"] / 1000.0)
                self._wake.set()

    def _run_autocommit(self) -> None:
        if not self.config["autocommit.enable"]:
            return
        interval = self.config["autocommit.interval.ms"] / 1000.0
        while not self._stopping.wait(interval):
            try:
                self.commit_offsets(include_current=False)
            except Exception as exc:
                log.warning("consumer %s: autocommit failed: %s", self.consumer_id, exc)

    # --- rebalance (caller holds _lock) -------------------------------------------------------

    def _stop_fetchers(self) -> None:
        self._fetch.stop()

    def _commit_locked(self) -> int:
        changed = 0
        for (topic, bid, part), st in self._owned.items():
            # one read: the stream's thread moves ``consumed`` on while the write waits for ZooKeeper, and
            # remembering that newer value as committed would leave it unwritten by every later commit
            consumed = st.consumed
            if consumed != st.committed:
                self._put(znodes.offset_path(self.group, topic, bid, part), str(consumed).encode())
                st.committed = consumed
                changed += 1
        return changed

    def _release_locked(self) -> None:
        for (topic, bid, part), st in list(self._owned.items()):
            path = znodes.owner_path(self.group, topic, bid, part)
            try:
                data, _ = self.zk.retry(self.zk.get, path)
            except NoNodeError:
                continue
            if data.decode().startswith(self.consumer_id + "-"):
                self._delete(path)
        self._owned = {}
        self._owner_threads = {}

    def _rebalance(self) -> None:
        retries = self.config["rebalance.retries.max"]
        backoff = self.config["rebalance.backoff.ms"] / 1000.0
        if self._owned and self._unchanged():
            log.info("consumer %s: rebalance leaves ownership as it is", self.consumer_id)
            return
        for attempt in range(retries):
            if self._stopping.is_set():
                return
            self._stop_fetchers()
            self._generation += 1
            for s in self._all_streams():
                s.clear()
            self._commit_locked()
            self._release_locked()
            if self._try_claim():
                self.rebalance_count += 1
                log.info("consumer %s: rebalance %d done, owns %s", self.consumer_id, self.rebalance_count,
                         {t: [znodes.partition_name(*bp) for bp in v] for t, v in self.owned_partitions().items()})
                self._fetch.start(self._owned.values())
                return
            # A conflicting owner is either about to release (it rebalances too) or dead with its
            # session not yet expired: grow the back-off up to half a session timeout so the
            # retries span several session timeouts.
            delay = min(backoff * 1.5 ** attempt, max(backoff, self.config["zk.sessiontimeout.ms"] / 2000.0))
            log.info("consumer %s: ownership conflict, backing off %.2f s (attempt %d)", self.consumer_id,
                     delay, attempt + 1)
            self.clock.sleep(delay)
        raise CoordinationError(f"consumer {self.consumer_id} of group {self.group}: rebalance failed "
                                f"after {retries} attempts (ownership conflicts); see rebalance.retries.max")

    def _wanted(self, live: dict[int, BrokerAddress]) -> tuple[list[tuple[str, int, int, str]], set[str]]:
        """This consumer's share, ``[(topic, broker_id, partition, thread)]``, and the replicated topics."""
        subs = registry.group_subscriptions(self.zk, self.group)
        subs[self.consumer_id] = dict(self._subscription)
        wanted: list[tuple[str, int, int, str]] = []
        replicated: set[str] = set()
        for topic in sorted(self._subscription):
            mine = set(rebalance.thread_ids(self.consumer_id, self._subscription[topic]))
            parts, is_replicated = registry.partitions_of(self.zk, topic, live)
            if is_replicated:
                replicated.add(topic)
            plan = rebalance.assign(parts, rebalance.subscribed_threads(subs, topic))
            for thread, owned in plan.items():
                if thread in mine:
                    wanted.extend((topic, b, p, thread) for b, p in owned)
        return wanted, replicated

    def _unchanged(self) -> bool:
        """True when the assignment now is exactly what this consumer owns, under the same threads,
        and the brokers of its legacy partitions kept their addresses."""
        live = read_brokers(self.zk)
        wanted, _ = self._wanted(live)
        moved = any(live.get(b) != self._claim_live.get(b) for (_, b, _), st in self._owned.items()
                    if not st.replicated)
        return not moved and {(t, b, p): th for t, b, p, th in wanted} == self._owner_threads

    def _try_claim(self) -> bool:
        live = self._claim_live = read_brokers(self.zk)
        wanted, replicated = self._wanted(live)
        claimed: list[tuple[str, int, int, str]] = []
        for topic, bid, part, thread in wanted:
            path = znodes.owner_path(self.group, topic, bid, part)
            try:
                self.zk.retry(self.zk.create, path, thread.encode(), ephemeral=True, makepath=True)
            except NodeExistsError:
                try:
                    owner = self.zk.retry(self.zk.get, path)[0].decode()
                except NoNodeError:
                    owner = ""
                if owner != thread:  # our own thread id: a replayed create that landed, keep it
                    for t, b, p, _ in claimed:
                        self._delete(znodes.owner_path(self.group, t, b, p))
                    log.debug("partition %s/%d-%d still owned by %s", topic, bid, part, owner)
                    return False
            claimed.append((topic, bid, part, thread))
        for topic, bid, part, thread in claimed:
            offset = self._fetch.start_offset(topic, bid, part, topic in replicated)
            idx = int(thread.rsplit("-", 1)[1])
            stream = (self._streams[topic][idx] if topic in self._streams
                      else self._shared_streams[idx % len(self._shared_streams)])
            self._owned[(topic, bid, part)] = PartitionState(
                topic, bid, part, self._generation, offset, offset, offset,
                self._fetch.fetch.fetch_size, stream, topic in replicated)
            self._owner_threads[(topic, bid, part)] = thread
        return True


__all__: Sequence[str] = ["ConsumerConnector", "MessageStream", "ConsumedMessage", "ConsumerTimeoutError"]
