"""Broker registration in ZooKeeper (kazoo), as in the Kafka 0.7 design.

Znode layout (paths relative to the chroot of ``zk.connect``; built by
:mod:`ingest.znodes`, which documents the whole tree)::

    /brokers/ids/[broker_id]                -> "creator:host:port"      ephemeral
    /brokers/endpoints/[broker_id]          -> the Kafka listeners (JSON, Kafka's shape)  ephemeral
    /brokers/topics/[topic]/[broker_id]     -> "<partition count>"      ephemeral

``/brokers/ids`` and ``/brokers/topics/[topic]`` themselves are persistent
(created on demand). Producers and consumers watch these paths to discover
brokers and the partitions of each topic.

Rules (kazoo recipes):

- Every write goes through ``client.retry``; a ``NodeExistsError`` on our own
  node (same session owns it, e.g. a retry after a connection loss whose first
  create did land) is tolerated.
- Start-up refuses a broker id whose node is owned by another live session:
  :class:`~ingest.errors.BrokerIdTakenError`. One exception: if that node
  names exactly our ``host:port`` we just bound that port ourselves, so its
  owner cannot be serving; it is the not-yet-expired session of a crashed
  predecessor (a SIGKILLed broker restarted quickly). We wait up to the
  session timeout for it to vanish, then register.
- After a session loss (``KazooState.LOST``, ephemeral nodes gone) the
  registry re-creates all its nodes as soon as a new session is connected,
  on a separate thread (listeners must not block kazoo's event thread).

Thread-safety: ``register_topic`` may be called from any thread and never
blocks on ZooKeeper: the topic registrar, a task on the broker's
:class:`~ingest.broker.scheduler.KafkaScheduler`, writes the node with calls bounded by
:data:`CALL_S` each, only while the session is connected (it is woken when it is again, and
tries every :data:`RETRY_S` meanwhile). The known and the pending topics are guarded by a lock.
"""
from __future__ import annotations

import logging
import threading
import time

from kazoo.client import KazooState
from kazoo.exceptions import KazooException, NoAuthError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ingest import znodes
from ingest.broker.scheduler import KafkaScheduler
from ingest.broker.zk_deadline import DeadlineCalls
from ingest.errors import BrokerIdTakenError, CoordinationError, CoordinationUnavailableError
from ingest.ratelimited_log import RateLimitedLog
from ingest.zk_security import ZkSecurity, new_kazoo, refused_message, secure_chroot

log = logging.getLogger(__name__)

CALL_S = 5.0
"""Longest wait for one ZooKeeper call of the topic registrar; then the topic is tried again later."""
RETRY_S = 1.0
"""Pause before the registrar tries again after ZooKeeper did not answer."""


class BrokerRegistry:
    """Keeps this broker's ephemeral nodes in ZooKeeper for as long as it runs.

    Args:
        zk_connect: ``host:port[,host:port][/chroot]``.
        broker_id, host, port: what to register.
        session_timeout_ms: the session timeout asked of ZooKeeper.
        connection_timeout_ms: how long ``start`` waits for the first connection.
        security: the broker's ZooKeeper identity and ACL policy (none: open nodes, as before).
        scheduler: the broker's (started by it); None: one of its own, of one thread.
    """

    def __init__(self, zk_connect: str, broker_id: int, host: str, port: int, *,
                 session_timeout_ms: int = 6000, connection_timeout_ms: int = 6000,
                 endpoints: bytes | None = None, security: ZkSecurity | None = None,
                 scheduler: KafkaScheduler | None = None) -> None:
        self.zk_connect = zk_connect
        self.endpoints = endpoints   # the /brokers/endpoints/[id] value (None: no Kafka listener)
        self.broker_id = broker_id
        self.host, self.port = host, port
        self.address = f"{host}:{port}"
        self.session_timeout_s = session_timeout_ms / 1000.0
        self.connection_timeout_s = connection_timeout_ms / 1000.0
        self.security = security or ZkSecurity()
        self.client = new_kazoo(zk_connect, self.security, timeout=self.session_timeout_s)
        self._pending: dict[str, int] = {}   # topic -> partitions, not yet written by the registrar
        self._own_scheduler = scheduler is None
        self._scheduler = scheduler or KafkaScheduler(1, name="zk-topics")
        self._registrar = self._scheduler.schedule("topic-registrar", self._register_pending)
        self._calls: DeadlineCalls | None = None
        self._errors = RateLimitedLog(log, interval_s=60.0)
        self._topics: dict[str, int] = {}
        self._lock = threading.Lock()
        self._session_lost = False
        self._closed = False
        self.registrations = 0          # how many times the broker node was (re)created

    # --- lifecycle --------------------------------------------------------------------------

    def start(self, topics: dict[str, int] | None = None) -> "BrokerRegistry":
        """Connect, register the broker id and ``topics``.

        Raises:
            CoordinationError: ZooKeeper not reachable within the connection timeout.
            BrokerIdTakenError: another live broker holds this id.
        """
        try:
            self.client.start(timeout=self.connection_timeout_s)
        except KazooTimeoutError as exc:
            self.client.close()
            raise CoordinationError(
                f"cannot connect to ZooKeeper at {self.zk_connect!r} within "
                f"{self.connection_timeout_s:g}s (zk.connectiontimeout.ms); is it running?") from exc
        try:
            secure_chroot(self.client, self.security)
            self._register_broker(initial=True)
            with self._lock:
                self._topics.update(topics or {})
                current = dict(self._topics)
            for topic, count in current.items():
                self._register_topic_node(topic, count)
        except NoAuthError as exc:
            self.client.stop()
            self.client.close()
            raise CoordinationError(refused_message(self.zk_connect, self.security)) from exc
        except BaseException:
            self.client.stop()
            self.client.close()
            raise
        self._calls = DeadlineCalls(self.client)
        self.client.add_listener(self._on_state)
        if self._own_scheduler:
            self._scheduler.start()
        self._registrar.wake()
        log.info("registered broker %d at %s in ZooKeeper %s", self.broker_id, self.address, self.zk_connect)
        return self

    def close(self) -> None:
        """End the session: ZooKeeper deletes all our ephemeral nodes at once.

        Closing the session is one request and removes every node of this
        broker atomically, so peers see the broker and its topics vanish
        together. If ZooKeeper is unreachable right now the nodes stay until
        the session times out, as after a crash; close never blocks on it.
        """
        if self._closed:
            return
        self._closed = True
        self._registrar.cancel()
        try:
            self.client.stop()
        finally:
            self.client.close()
            if self._own_scheduler:
                self._scheduler.shutdown(10)
        log.info("deregistered broker %d from ZooKeeper (session closed)", self.broker_id)

    # --- topics ------------------------------------------------------------------------------

    def register_topic(self, topic: str, partitions: int) -> None:
        """Announce that this broker holds ``partitions`` partitions of ``topic``.

        Returns at once: the node is written by the topic registrar (a scheduler task), so a
        network thread serving a produce never waits on ZooKeeper (which may
        be unreachable for a while; the write is retried until it lands).
        """
        with self._lock:
            if self._topics.get(topic) == partitions:
                return
            self._topics[topic] = partitions
            self._pending[topic] = partitions
        self._registrar.wake()

    def _register_pending(self) -> None:
        """The registrar's run: write every pending topic's node, with bounded calls, while connected."""
        if self._closed or self._calls is None:
            return
        with self._lock:
            pending = dict(self._pending)
        for topic, partitions in pending.items():
            if self._closed:
                return
            if not self.client.connected:
                self._registrar.wake(RETRY_S)   # and at once when the session is connected again
                return
            try:
                self._register_topic_node(topic, partitions, self._bounded_call)
                log.info("registered topic %s (%d partitions) of broker %d", topic, partitions, self.broker_id)
            except CoordinationUnavailableError as exc:
                self._errors.warning("topics", "no answer", "cannot register topic %s in ZooKeeper now (%s); "
                                     "retrying every %.0f s", topic, exc, RETRY_S)
                self._registrar.wake(RETRY_S)
                return
            except KazooException as exc:
                # a later re-registration (after reconnect) covers it; never fail a produce for this
                if not self._closed:
                    log.warning("could not register topic %s in ZooKeeper: %s", topic, exc)
            with self._lock:
                if self._pending.get(topic) == partitions:
                    del self._pending[topic]

    def _bounded_call(self, op: str, *args, **kwargs):
        """``client.<op>_async(*args, **kwargs)``'s answer within :data:`CALL_S` (the registrar's calls)."""
        return self._calls.call(time.monotonic() + CALL_S, getattr(self.client, f"{op}_async"), *args,
                                what=f"{op} {args[0]}", **kwargs)

    def _retried_call(self, op: str, *args, **kwargs):
        """``client.<op>(*args, **kwargs)`` through ``client.retry`` (start-up and re-registration)."""
        return self.client.retry(getattr(self.client, op), *args, **kwargs)

    def _register_topic_node(self, topic: str, partitions: int, call=None) -> None:
        call = call or self._retried_call
        path = znodes.topic_path(topic, self.broker_id)
        data = znodes.partition_count_value(partitions)
        call("ensure_path", znodes.topic_dir(topic))
        try:
            if znodes.parse_assignment(call("get", znodes.topic_dir(topic))[0]) is not None:
                log.warning("topic %s is replicated; not registering a Kafka 0.7 partition count for it", topic)
                return
        except ValueError:
            pass
        try:
            call("create", path, data, ephemeral=True)
        except NodeExistsError:
            if self._owned_by_us(path, call):
                call("set", path, data)
            else:
                log.warning("%s is held by another session; leaving it", path)

    # --- broker node ------------------------------------------------------------------------

    def _owned_by_us(self, path: str, call=None) -> bool:
        try:
            _, stat = (call or self._retried_call)("get", path)
        except NoNodeError:
            return False
        return stat.ephemeralOwner == self.client.client_id[0]

    def _register_broker(self, *, initial: bool) -> None:
        path = znodes.broker_path(self.broker_id)
        # Kafka 0.7's creator:host:port, with a new creator (host-epoch ms) per registration as in 0.7
        data = znodes.broker_value(self.host, self.port)
        self.client.retry(self.client.ensure_path, znodes.BROKER_IDS)
        deadline = time.monotonic() + self.session_timeout_s * 2 + 2
        while True:
            try:
                self.client.retry(self.client.create, path, data, ephemeral=True)
                self.registrations += 1
                self._register_endpoints()
                return
            except NodeExistsError:
                pass
            try:
                existing, stat = self.client.retry(self.client.get, path)
            except NoNodeError:
                continue  # vanished between create and get: try again
            if stat.ephemeralOwner == self.client.client_id[0]:
                self.registrations += 1
                self._register_endpoints()
                return  # our own create landed before a connection loss
            holder = existing.decode(errors="replace")
            if self._names_us(existing) and time.monotonic() < deadline:
                # we bound this very port, so that registrant is a dead predecessor
                log.info("broker id %d is still registered by the expiring session 0x%x of a previous "
                         "process at %s; waiting for it to expire", self.broker_id, stat.ephemeralOwner, holder)
                gone = threading.Event()
                if self.client.retry(self.client.exists, path, watch=lambda _event: gone.set()) is not None:
                    gone.wait(min(1.0, max(0.0, deadline - time.monotonic())))
                continue
            raise BrokerIdTakenError(
                f"broker id {self.broker_id} is already registered in ZooKeeper "
                f"({self.zk_connect}{path} -> {holder!r}, session 0x{stat.ephemeralOwner:x}); "
                f"another live broker uses brokerid={self.broker_id}: give this broker a unique "
                "brokerid or stop the other one")

    def _register_endpoints(self) -> None:
        """``/brokers/endpoints/[id]``, once this session holds ``/brokers/ids/[id]`` (so a node left by
        another session is a dead predecessor's: replaced)."""
        if self.endpoints is None:
            return
        path = znodes.broker_endpoints_path(self.broker_id)
        self.client.retry(self.client.ensure_path, znodes.BROKER_ENDPOINTS)
        while True:
            try:
                self.client.retry(self.client.create, path, self.endpoints, ephemeral=True)
                return
            except NodeExistsError:
                if self._owned_by_us(path):
                    return
                try:
                    self.client.retry(self.client.delete, path)
                except NoNodeError:
                    pass

    def _names_us(self, value: bytes) -> bool:
        """Whether a broker node's value (any form readers accept) names our host and port."""
        try:
            return znodes.parse_broker_value(value) == (self.host, self.port)
        except (ValueError, KeyError):
            return False

    # --- session loss ------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        # runs on kazoo's event thread: never block here
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session of broker %d lost; will re-register when reconnected", self.broker_id)
        elif state == KazooState.CONNECTED and self._session_lost and not self._closed:
            self._session_lost = False
            threading.Thread(target=self._reregister, name="zk-reregister", daemon=True).start()

    def _reregister(self) -> None:
        attempt = 0
        while not self._closed:
            attempt += 1
            try:
                self._register_broker(initial=False)
                with self._lock:
                    current = dict(self._topics)
                for topic, count in current.items():
                    self._register_topic_node(topic, count)
                log.info("re-registered broker %d and %d topic(s) after session loss",
                         self.broker_id, len(current))
                return
            except BrokerIdTakenError as exc:
                log.error("cannot re-register after session loss: %s", exc)
                return
            except KazooException as exc:
                log.warning("re-registration attempt %d failed: %s; retrying", attempt, exc)
                time.sleep(min(2.0, 0.1 * attempt))
