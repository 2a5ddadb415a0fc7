"""A broker's view of the replication state in ZooKeeper, kept current by watches.

What it watches (layout in :mod:`ingest.znodes`): the live brokers (``/brokers/ids``) and
their Kafka listeners (``/brokers/endpoints``), the controller (``/controller``),
every replicated topic's assignment and kind (the data of ``/brokers/topics/[topic]``), every
replicated partition's state (``/brokers/partition_states/[topic]/[p]``) and each broker's
replicas that cannot write (``/brokers/storage_failures/[id]``), and the brokers in a controlled
shutdown (``/admin/controlled_shutdown/[id]``). The replica manager, the
controller and the TOPIC_METADATA handler read it; listeners hear about changes.

Listeners run on kazoo's event thread and must not block: they hand work to their own
threads. Readers get immutable snapshots (dicts replaced whole), safe from any thread.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from kazoo.exceptions import NoNodeError

from ingest import znodes
from ingest.znodes import PartitionState

log = logging.getLogger(__name__)

READ_GROUP = 1000     # pipelined reads in flight at once (bounds kazoo's queue and the server's)

StateListener = Callable[[str, int, "PartitionState | None"], None]


class ReplicationView:
    """Brokers, assignments and partition states from ZooKeeper (see the module docstring).

    Args:
        client: the broker's started KazooClient (its session is the broker's).
    """

    def __init__(self, client) -> None:
        self.client = client
        self.brokers: dict[int, tuple[str, int]] = {}
        self.sessions: dict[int, int] = {}     # broker id -> czxid of its /brokers/ids node (its registration)
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.kafka_topics: frozenset[str] = frozenset()   # the cluster topics whose assignment says "format":"kafka"
        self.endpoints: dict[int, dict[str, tuple[str, int]]] = {}   # broker id -> Kafka listener -> (host, port)
        self.principals: dict[int, str] = {}   # broker id -> its inter-broker principal (/brokers/endpoints)
        self.private_apis: dict[int, frozenset[int]] = {}   # broker id -> the private Kafka api keys it serves
        self.controller_id = -1
        self.states: dict[tuple[str, int], PartitionState] = {}
        self.storage_failures: dict[int, dict[tuple[str, int], str]] = {}   # broker id -> failed replicas
        self.deleting: frozenset[str] = frozenset()   # topics marked for deletion (/admin/delete_topics)
        self.shutting_down: frozenset[int] = frozenset()   # brokers in a controlled shutdown
        self._shutdown_listeners: list[Callable[[frozenset[int]], None]] = []
        self._shutdown_asked: dict[int, int | None] = {}   # broker id -> czxid of its registration when it asked
        self._shutdown_nodes: frozenset[int] = frozenset()   # the request nodes there now
        self.topic_configs: dict[str, dict[str, str]] = {}   # Kafka topic -> its configs (/config/topics)
        self._watched_configs: set[str] = set()
        self._deleting_listeners: list[Callable[[frozenset[str]], None]] = []
        self._deleting_seen = threading.Condition()   # notified whenever ``deleting`` is replaced
        self._config_listeners: list[Callable[[str, dict[str, str]], None]] = []
        self._lock = threading.Lock()
        self._watched_topics: set[str] = set()
        self._watched_states: set[tuple[str, int]] = set()
        self._state_listeners: list[StateListener] = []
        self._broker_listeners: list[Callable[[dict[int, tuple[str, int]]], None]] = []
        self._topic_listeners: list[Callable[[str, dict[int, tuple[int, ...]]], None]] = []
        self._failure_listeners: list[Callable[[], None]] = []
        self._watched_failures: set[int] = set()
        self._closed = False

    # --- listeners -------------------------------------------------------------------------

    def on_state(self, fn: StateListener) -> None:
        self._state_listeners.append(fn)

    def on_brokers(self, fn: Callable[[dict[int, tuple[str, int]]], None]) -> None:
        self._broker_listeners.append(fn)

    def on_topic(self, fn: Callable[[str, dict[int, tuple[int, ...]]], None]) -> None:
        self._topic_listeners.append(fn)

    def on_storage_failures(self, fn: Callable[[], None]) -> None:
        """``fn()`` after any broker's set of replicas that cannot write changed."""
        self._failure_listeners.append(fn)

    def on_deleting(self, fn: Callable[[frozenset[str]], None]) -> None:
        """``fn(topics)`` after the set of topics marked for deletion changed."""
        self._deleting_listeners.append(fn)

    def on_shutting_down(self, fn: Callable[[frozenset[int]], None]) -> None:
        """``fn(broker_ids)`` after the set of brokers in a controlled shutdown changed."""
        self._shutdown_listeners.append(fn)

    def on_topic_config(self, fn: Callable[[str, dict[str, str]], None]) -> None:
        """``fn(topic, configs)`` after a Kafka topic's configs changed (first read included)."""
        self._config_listeners.append(fn)

    def _call(self, listeners, *args) -> None:
        for fn in list(listeners):
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a listener bug must not stop the watches
                log.exception("replication view listener failed")

    # --- watches ---------------------------------------------------------------------------

    def start(self) -> "ReplicationView":
        c = self.client
        c.retry(c.ensure_path, znodes.BROKER_IDS)
        c.retry(c.ensure_path, znodes.BROKER_TOPICS)
        c.retry(c.ensure_path, znodes.DELETE_TOPICS)
        # before the topics: a topic marked for deletion is never set up again by a restarting broker
        c.ChildrenWatch(znodes.DELETE_TOPICS, self._on_deleting)
        c.ChildrenWatch(znodes.BROKER_IDS, self._on_ids)
        c.ChildrenWatch(znodes.BROKER_TOPICS, self._on_topics)
        c.retry(c.ensure_path, znodes.STORAGE_FAILURES)
        c.ChildrenWatch(znodes.STORAGE_FAILURES, self._on_failure_nodes)
        c.retry(c.ensure_path, znodes.BROKER_ENDPOINTS)
        c.ChildrenWatch(znodes.BROKER_ENDPOINTS, self._on_endpoint_nodes)
        c.retry(c.ensure_path, znodes.CONTROLLED_SHUTDOWN)
        c.ChildrenWatch(znodes.CONTROLLED_SHUTDOWN, self._on_shutting_down)
        c.DataWatch(znodes.CONTROLLER, self._on_controller)
        return self

    def _on_shutting_down(self, children: list[str]) -> bool:
        if self._closed:
            return False
        asked = frozenset(int(c) for c in children if c.isdigit())
        with self._lock:
            for b in asked:
                self._shutdown_asked.setdefault(b, self.sessions.get(b))
            self._shutdown_nodes = asked
        self._update_shutting_down()
        return True

    def _update_shutting_down(self) -> None:
        """A broker that asked stays shutting down until its registration goes (or is a new one): its
        request node and its ``/brokers/ids`` node vanish together when its session closes, and their
        watches may fire in either order; a retry deletes and writes the node again."""
        with self._lock:
            self._shutdown_asked = {b: s for b, s in self._shutdown_asked.items()
                                    if b in self._shutdown_nodes or (s is not None and self.sessions.get(b) == s)}
            found = frozenset(self._shutdown_asked)
            changed = found != self.shutting_down
            self.shutting_down = found
        if changed:
            self._call(self._shutdown_listeners, found)

    def _on_endpoint_nodes(self, children: list[str]) -> bool:
        """A broker's endpoints node is written once per ZooKeeper session: the children tell every change."""
        if self._closed:
            return False
        found: dict[int, dict[str, tuple[str, int]]] = {}
        principals: dict[int, str] = {}
        private: dict[int, frozenset[int]] = {}
        for child in children:
            try:
                bid = int(child)
                data, _ = self.client.retry(self.client.get, znodes.broker_endpoints_path(bid))
                found[bid] = znodes.parse_broker_endpoints(data)
            except (NoNodeError, ValueError, UnicodeDecodeError):
                continue
            principal = znodes.parse_broker_principal(data)
            if principal is not None:
                principals[bid] = principal
            private[bid] = znodes.parse_private_apis(data)
        self.endpoints = found
        self.principals = principals
        self.private_apis = private
        self._call(self._broker_listeners, self.brokers)
        return True

    def _on_deleting(self, children: list[str]) -> bool:
        if self._closed:
            return False
        found = frozenset(children)
        if found != self.deleting:
            with self._deleting_seen:
                self.deleting = found
                self._deleting_seen.notify_all()
            self._call(self._deleting_listeners, found)
        return True

    def wait_deleting(self, topic: str, timeout_s: float) -> bool:
        """Wait until this view has seen ``topic`` marked for deletion; False if ``timeout_s`` passed first.

        For the broker that marked it: its own answers (Metadata, ...) stop naming the topic only once the
        watch has fired, which comes after the marker's write is acknowledged."""
        with self._deleting_seen:
            return self._deleting_seen.wait_for(lambda: topic in self.deleting, max(0.0, timeout_s))

    def _config_watcher(self, topic: str):
        def watch(data, _stat) -> bool:
            if self._closed:
                return False
            try:
                configs = znodes.parse_topic_config(data)
            except (ValueError, UnicodeDecodeError) as exc:
                log.error("topic %s: unreadable configs in ZooKeeper (%s); keeping the previous ones", topic, exc)
                return True
            with self._lock:
                if self.topic_configs.get(topic, {}) == configs and topic in self.topic_configs:
                    return True
                self.topic_configs = {**self.topic_configs, topic: configs}
            self._call(self._config_listeners, topic, configs)
            return True
        return watch

    def _on_controller(self, data, _stat) -> bool:
        if self._closed:
            return False
        try:
            self.controller_id = -1 if data is None else znodes.parse_controller(data)
        except ValueError:
            self.controller_id = -1
        return True

    def close(self) -> None:
        self._closed = True

    def _on_ids(self, children: list[str]) -> bool:
        if self._closed:
            return False
        found: dict[int, tuple[str, int]] = {}
        sessions: dict[int, int] = {}
        for child in children:
            try:
                bid = int(child)
                data, stat = self.client.retry(self.client.get, znodes.broker_path(bid))
                found[bid] = znodes.parse_broker_value(data)
                sessions[bid] = stat.czxid
            except (NoNodeError, ValueError, UnicodeDecodeError):
                continue
        self.sessions = sessions
        self.brokers = found
        self._update_shutting_down()
        self._call(self._broker_listeners, found)
        return True

    def _on_topics(self, children: list[str]) -> bool:
        if self._closed:
            return False
        for topic in children:
            with self._lock:
                new = topic not in self._watched_topics
                self._watched_topics.add(topic)
            if new:
                self.client.DataWatch(znodes.topic_dir(topic), self._topic_watcher(topic))
        return True

    def _topic_watcher(self, topic: str):
        def watch(data, _stat) -> bool:
            if self._closed:
                return False
            try:
                assignment = znodes.parse_assignment(data)
                kafka = znodes.parse_topic_format(data) == znodes.KAFKA_FORMAT
            except ValueError as exc:
                log.error("topic %s: unreadable assignment in ZooKeeper (%s); ignoring it", topic, exc)
                return True
            if assignment is None:
                if data is None and topic in self.assignments:   # deleted: the controller finished deleting it
                    with self._lock:
                        self.assignments = {t: a for t, a in self.assignments.items() if t != topic}
                        self.kafka_topics = self.kafka_topics - {topic}
                    log.info("topic %s is gone from ZooKeeper", topic)
                    self._call(self._topic_listeners, topic, {})
                return True  # a legacy (0.7) topic, or not written yet
            with self._lock:
                known = self.assignments.get(topic)
                if known == assignment:
                    return True
                if kafka:   # set before the assignment: a reader never sees a Kafka topic as a 0.7 one
                    self.kafka_topics = self.kafka_topics | {topic}
                self.assignments = {**self.assignments, topic: assignment}
                fresh = [(topic, p) for p in assignment if (topic, p) not in self._watched_states]
                self._watched_states.update(fresh)
                watch_config = kafka and topic not in self._watched_configs
                self._watched_configs.add(topic)
            if watch_config:   # before the listeners: a new Kafka topic's logs are created with its configs
                self.client.DataWatch(znodes.topic_config_path(topic), self._config_watcher(topic))
            self._call(self._topic_listeners, topic, assignment)
            for key in fresh:
                self.client.DataWatch(znodes.partition_state_path(*key), self._state_watcher(*key))
            return True
        return watch

    def _state_watcher(self, topic: str, partition: int):
        def watch(data, stat) -> bool:
            if self._closed:
                return False
            state = None
            if data:
                try:
                    state = PartitionState.parse(data, stat.version, stat.mzxid)
                except ValueError as exc:
                    log.error("%s-%d: unreadable partition state (%s); ignoring it", topic, partition, exc)
                    return True
            with self._lock:
                states = dict(self.states)
                if state is None:
                    states.pop((topic, partition), None)
                else:
                    states[(topic, partition)] = state
                self.states = states
            self._call(self._state_listeners, topic, partition, state)
            return True
        return watch

    def _on_failure_nodes(self, children: list[str]) -> bool:
        if self._closed:
            return False
        for child in children:
            try:
                bid = int(child)
            except ValueError:
                continue
            with self._lock:
                new = bid not in self._watched_failures
                self._watched_failures.add(bid)
            if new:
                self.client.DataWatch(znodes.storage_failures_path(bid), self._failure_watcher(bid))
        return True

    def _failure_watcher(self, broker_id: int):
        def watch(data, _stat) -> bool:
            if self._closed:
                return False
            failed: dict[tuple[str, int], str] = {}
            if data:
                try:
                    failed = znodes.parse_storage_failures(data)
                except ValueError as exc:
                    log.error("broker %d: unreadable storage failures node (%s); ignoring it", broker_id, exc)
                    return True
            with self._lock:
                if self.storage_failures.get(broker_id, {}) == failed:
                    return True
                current = {b: f for b, f in self.storage_failures.items() if b != broker_id}
                if failed:
                    current[broker_id] = failed
                self.storage_failures = current
            self._call(self._failure_listeners)
            return True
        return watch

    # --- reads -----------------------------------------------------------------------------

    def state(self, topic: str, partition: int) -> PartitionState | None:
        return self.states.get((topic, partition))

    def read_state(self, topic: str, partition: int) -> PartitionState | None:
        """The state read from ZooKeeper now (not the watched copy), with its version."""
        try:
            data, stat = self.client.retry(self.client.get, znodes.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return PartitionState.parse(data, stat.version, stat.mzxid)

    def read_states(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], PartitionState | None]:
        """Many partitions' states read from ZooKeeper now, None where a partition has none: the reads are
        pipelined (kazoo's ``get_async``, :data:`READ_GROUP` in flight), so a thousand of them cost a few
        round trips, not a thousand."""
        c = self.client

        def read(group: list[tuple[str, int]]) -> dict[tuple[str, int], PartitionState | None]:
            pending = [(key, c.get_async(znodes.partition_state_path(*key))) for key in group]
            out: dict[tuple[str, int], PartitionState | None] = {}
            for key, result in pending:
                try:
                    data, stat = result.get()
                except NoNodeError:
                    out[key] = None
                    continue
                out[key] = PartitionState.parse(data, stat.version, stat.mzxid)
            return out

        states: dict[tuple[str, int], PartitionState | None] = {}
        for i in range(0, len(keys), READ_GROUP):
            states.update(c.retry(read, keys[i:i + READ_GROUP]))
        return states

    def predates(self, state: PartitionState, broker_id: int) -> bool:
        """True when ``state`` was written before ``broker_id``'s current registration: a state from
        before that broker (re)started, which says nothing about what its log holds now."""
        czxid = self.sessions.get(broker_id)
        return czxid is not None and 0 <= state.mzxid < czxid

    def is_replicated(self, topic: str) -> bool:
        return topic in self.assignments

    def is_kafka(self, topic: str) -> bool:
        """Whether ``topic`` is a Kafka cluster topic (its assignment says ``"format":"kafka"``)."""
        return topic in self.kafka_topics

    def is_deleting(self, topic: str) -> bool:
        """Whether ``topic`` is marked for deletion (its replicas are being deleted; clients no longer see it)."""
        return topic in self.deleting

    def is_replicated_07(self, topic: str) -> bool:
        """Whether ``topic`` is a replicated 0.7 topic (an assignment without a format)."""
        return topic in self.assignments and topic not in self.kafka_topics

    def serves(self, broker_id: int, api_key: int) -> bool:
        """Whether ``broker_id`` registered that its Kafka listeners serve the private api ``api_key``."""
        return api_key in self.private_apis.get(broker_id, ())

    def kafka_endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        """``(host, port)`` of ``broker_id``'s Kafka listener ``listener``, None while it has none registered."""
        return self.endpoints.get(broker_id, {}).get(listener)

    def cannot_write(self, topic: str, partition: int) -> frozenset[int]:
        """The brokers whose replica of ``topic``-``partition`` reported a storage failure."""
        return frozenset(b for b, failed in self.storage_failures.items() if (topic, partition) in failed)
