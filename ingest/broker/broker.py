"""One broker process's wiring: config, LogManager, handlers, socket server, ZooKeeper registry.

:class:`BrokerServer` owns the lifecycle (``start``/``stop``/``wait``); the
network layer it starts (:class:`~ingest.broker.server.SocketServer`) knows
nothing about storage, and the request logic lives in ``handlers.py``.

Concurrency: ``start`` once from one thread; ``stop`` is idempotent and may be
called from any thread (a second caller waits for the first to finish).
"""
from __future__ import annotations

import logging
import threading

from ingest.broker.authorizer.config import authorizer_enabled, inter_broker_principal, super_users
from ingest.broker.coordinated import CoordinatedRequests
from ingest.broker.delayed import DelayTimer, Purgatory
from ingest.broker.handlers import BrokerHandlers
from ingest.broker.kafka.apis import KafkaApis
from ingest.broker.kafka.cluster import LocalCluster
from ingest.broker.kafka.cluster_id import local_cluster_id
from ingest.broker.kafka.listener import KafkaListeners
from ingest.broker.kafka.sasl import SaslAuthenticator
from ingest.broker.kafka.sasl_config import check_sasl_keys, sasl_listeners
from ingest.broker.kafka.tier_counts import TierCounter
from ingest.broker.kafka.tier_counts_publisher import TierCheckpoint, TierCountsPublisher, recover
from ingest.broker.listeners import listeners_of, parse_protocol_map
from ingest.broker.port07_security import NO_PORT, check_port07, security_configured
from ingest.broker.tls_config import inter_broker_context
from ingest.broker.log_manager import LogManager
from ingest.broker.scheduler import KafkaScheduler
from ingest.broker.server import SocketServer
from ingest.broker.topic_kind import TopicKind
from ingest.broker.server_config import check_replication_keys
from ingest.clock import SYSTEM_CLOCK
from ingest.errors import ConfigError
from ingest.metrics.broker import BrokerCollector, BrokerMetrics, MeteredDispatcher, NoBrokerMetrics
from ingest.metrics.exporter import metrics_enabled, new_registry, start_exporter
from ingest.zk_security import ZkSecurity
from ingest.ratelimited_log import flush_all

log = logging.getLogger(__name__)


class BrokerServer:
    """One broker: LogManager + handlers + network layer + (optional) ZooKeeper registry.

    In-process use (tests)::

        broker = BrokerServer(SERVER_CONFIG.parse({"brokerid": 0, "port": 0, "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": d})).start()
        ... connect to broker.host, broker.port ...
        broker.stop()

    ``start`` recovers the logs, binds the port, registers in ZooKeeper when
    ``enable.zookeeper`` is true (``BrokerIdTakenError`` if the id is taken),
    then serves. ``stop`` is the graceful shutdown of SIGTERM: a controlled shutdown
    first (``controlled.shutdown.enable``: the controller moves this broker's leaderships
    away, bounded), then stop accepting, finish in-flight requests, flush and close the
    logs, deregister. Both are
    idempotent and may be called from any thread.
    """

    def __init__(self, config, clock=None) -> None:
        self.config = config
        self.clock = clock or SYSTEM_CLOCK
        self.broker_id: int = config["brokerid"]
        self.host: str = config["hostname"]
        self.port: int = config["port"]
        self.log_manager = None
        self.handlers = None
        self.registry = None
        self.view = None
        self.replicas = None
        self.controller = None
        self.coordinated = None
        self.network: SocketServer | None = None
        self.kafka = None       # KafkaListeners (ingest.broker.kafka.listener) unless 'listeners' is empty
        self.kafka_apis = None
        self.kafka_purgatory: Purgatory | None = None
        self.scheduler: KafkaScheduler | None = None   # periodic and background tasks (background.threads)
        self.timer: DelayTimer | None = None   # the deadlines of both purgatories (0.7 port's and Kafka's)
        self.tier_counts = None  # TierCountsPublisher when audit.counts.enable (broker-tier audit counts)
        self.metrics = None     # BrokerMetrics when metrics.port is not -1
        self.exporter = None    # its endpoint (``exporter.url``)
        self._stopping = False
        self._stopped = threading.Event()
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        """``id:host:port``, one entry of a ``broker.list``."""
        return f"{self.broker_id}:{self.host}:{self.port}"

    def start(self) -> "BrokerServer":
        cfg = self.config
        if cfg["enable.zookeeper"] and not cfg["zk.connect"]:
            raise ConfigError("enable.zookeeper=true needs zk.connect (host:port[/chroot])")
        self.zk_security = ZkSecurity.from_config(cfg)   # a half-given identity fails here, before any port opens
        check_replication_keys(cfg)
        secured = authorizer_enabled(cfg)   # a bad authorizer config fails before anything starts
        super_users(cfg)
        listeners = listeners_of(cfg)
        port07_secured = security_configured(cfg)
        check_port07(cfg, port07_secured)
        self.scheduler = KafkaScheduler(cfg["background.threads"])
        self.log_manager = LogManager(cfg, self.clock, self.scheduler)   # a bad topic map fails before any thread
        self.scheduler.start()
        try:
            registry = self._start_metrics() if metrics_enabled(cfg) else None
        except BaseException:
            self.scheduler.shutdown()
            raise
        try:
            self.log_manager.startup()
        except BaseException:
            self._stop_metrics()
            self.scheduler.shutdown()
            raise
        self.timer = DelayTimer(f"purgatory-timer-{self.broker_id}")
        try:
            self.handlers = BrokerHandlers(self.log_manager, cfg, broker_id=self.broker_id,
                                           host=self.host, port=self.port)
            self.handlers.refuse_broker_only = port07_secured
            dispatcher = self.handlers
            if registry is not None:
                self.handlers.metrics = self.metrics
                dispatcher = MeteredDispatcher(self.handlers, self.metrics)
            if self.port != NO_PORT:
                self.network = SocketServer.from_config(cfg, dispatcher, self.host, self.port)
                self.port = self.handlers.port = self.network.port
            if listeners.bind:
                self._bind_kafka_listeners(listeners)
            if cfg["enable.zookeeper"]:
                self._start_zookeeper_parts(secured)
            if self.kafka is not None and cfg["audit.counts.enable"]:
                self._start_tier_counts()
            if self.network is not None:
                self.network.start()
            if self.kafka is not None:
                self.kafka.start()
        except BaseException:
            self._stop_metrics()
            if self.network is not None:
                self.network.stop()
            self._stop_kafka()
            self._stop_zookeeper_parts()
            self.log_manager.shutdown()
            self._stop_background()
            raise
        log.info("broker %d started on %s:%d (log.dir %s)", self.broker_id, self.host, self.port, cfg["log.dir"])
        return self

    def _bind_kafka_listeners(self, listeners) -> None:
        """The Kafka listeners bound (not yet serving), over a one-broker cluster of this broker's own
        Kafka-format logs; with ZooKeeper the cluster view is replaced by the cluster's
        (:class:`~ingest.broker.kafka.zk_cluster.ZkCluster`, in ``_start_zookeeper_parts``)."""
        cfg = self.config
        self.kafka_purgatory = Purgatory(f"kafka-purgatory-{self.broker_id}", self.timer)
        cluster = LocalCluster(self.log_manager, self.broker_id, listeners, local_cluster_id(cfg["log.dir"]))
        self.kafka_apis = KafkaApis(cfg, cluster, self.metrics or NoBrokerMetrics(), self.kafka_purgatory, self.clock)
        self.kafka_apis.port07 = self.handlers
        check_sasl_keys(cfg, listeners.inter_broker)
        if sasl_listeners(cfg):   # the users are read from ZooKeeper in _start_zookeeper_parts
            self.kafka_apis.sasl = SaslAuthenticator(
                cfg["sasl.enabled.mechanisms"], self.kafka_apis.metrics, purgatory=self.kafka_purgatory,
                failure_delay_ms=cfg["connection.failed.authentication.delay.ms"],
                max_receive_bytes=cfg["sasl.server.max.receive.size"])
        self.kafka = KafkaListeners(cfg, self.kafka_apis, listeners)
        cluster.listeners = self.kafka.bind()

    def _start_tier_counts(self) -> None:
        """Broker-tier audit counts: the checkpoint read, this broker's own unpublished appends recounted from
        its logs (before any producer is served), then the publishing thread."""
        cfg = self.config
        checkpoint = TierCheckpoint(cfg["log.dir"])
        counter = TierCounter(cfg["audit.counts.window.ms"], checkpoint.note_epoch,
                              excluded=frozenset({cfg["audit.counts.topic"]}))
        publisher = TierCountsPublisher(cfg, counter, checkpoint, self.kafka_apis, self.broker_id, self.host,
                                        self.clock)
        recover(checkpoint, counter, self.log_manager)
        self.kafka_apis.tier_counts = counter
        self.tier_counts = publisher.start()

    def _stop_kafka(self) -> None:
        if self.tier_counts is not None:   # the last counts published while the listeners still serve
            self.tier_counts.stop()
            self.tier_counts = None
        if self.kafka_purgatory is not None:   # waiting fetches and acks=-1 produces answered now
            self.kafka_purgatory.close()
        if self.kafka is not None:
            self.kafka.stop()

    def _start_metrics(self):
        """The registry, the counters (fsync times too) and the endpoint, before the logs are recovered,
        so that recovery's flushes are timed and a bad metrics.port fails before any slow work."""
        registry = new_registry()   # prometheus_client is imported from here on only
        self.metrics = BrokerMetrics()
        self.log_manager.on_flush = self.metrics.flushed
        registry.register(BrokerCollector(self))
        self.exporter = start_exporter(registry, self.config, f"broker {self.broker_id}")
        return registry

    def _stop_metrics(self) -> None:
        if self.exporter is not None:
            self.exporter.stop()

    def _start_zookeeper_parts(self, secured: bool = False) -> None:
        """Registry (with the Kafka endpoints and this broker's inter-broker principal), replication view,
        replica manager, the Kafka listener's cluster view and controller, and with ``secured`` the ACL
        authorizer (one ZooKeeper session)."""
        # deferred: kazoo is only needed (and imported) when ZooKeeper is enabled
        from ingest.broker.controller import Controller, Rebalance
        from ingest.broker.kafka.cluster_id import zookeeper_cluster_id
        from ingest.broker.kafka.producer_ids import ZkProducerIds
        from ingest.broker.kafka.scram_users import UserCache
        from ingest.broker.kafka.zk_cluster import ZkCluster, endpoints_value
        from ingest.broker.replica_manager import ReplicaManager
        from ingest.broker.replication_view import ReplicationView
        from ingest.broker.zk_registry import BrokerRegistry

        cfg = self.config
        kafka_listeners = self.kafka.listeners if self.kafka is not None else None
        inter = listeners_of(cfg).inter_broker
        protocol = parse_protocol_map(cfg["listener.security.protocol.map"]).get(inter or "", "PLAINTEXT")
        principal = inter_broker_principal(cfg, protocol) if kafka_listeners is not None else None
        self.registry = BrokerRegistry(
            cfg["zk.connect"], self.broker_id, self.host, self.port,
            session_timeout_ms=cfg["zk.sessiontimeout.ms"],
            connection_timeout_ms=cfg["zk.connectiontimeout.ms"], security=self.zk_security,
            scheduler=self.scheduler,
            endpoints=None if kafka_listeners is None else
            endpoints_value(kafka_listeners, cfg["listener.security.protocol.map"], principal,
                            port07_keys=self.handlers.refuse_broker_only or self.port == NO_PORT))
        self.registry.start({})
        client = self.registry.client
        self.view = ReplicationView(client).start()
        if secured and self.kafka_apis is not None:
            self._start_authorizer(client)
        for topic, count in self.log_manager.topics(TopicKind.V07).items():
            if not self.view.is_replicated(topic):   # replica logs are not Kafka 0.7 topics
                self.registry.register_topic(topic, count)
        # the inter-broker listener's name is the same on every broker (Kafka's rule): followers of Kafka
        # topics fetch from that listener of their leader
        self.replicas = ReplicaManager(cfg, self.broker_id, self.log_manager, client, self.view,
                                       kafka_purgatory=self.kafka_purgatory, inter_broker_listener=inter,
                                       inter_broker_ssl=inter_broker_context(cfg, inter),
                                       scheduler=self.scheduler, timer=self.timer).start()
        # requests that need ZooKeeper are served on a thread of their own, never a network thread
        self.coordinated = CoordinatedRequests(cfg["zk.connectiontimeout.ms"] / 1000.0,
                                               cfg["queued.max.request.bytes"],
                                               name=f"coordinated-requests-{self.broker_id}").start()
        self.handlers.attach_replicas(self.replicas, self.coordinated)
        if self.kafka is not None:
            self.kafka.attach_coordinated(self.coordinated)
            # with ZooKeeper, Kafka topics are cluster topics (docs/kafka-protocol.md, D2)
            self.kafka_apis.cluster = ZkCluster(cfg, self.broker_id, zookeeper_cluster_id(client), self.log_manager,
                                                self.replicas, self.coordinated)
            self.kafka_apis.producer_ids = ZkProducerIds(self.broker_id, self.replicas.zk, client, self.coordinated)
            if self.kafka_apis.sasl is not None:
                self.kafka_apis.sasl.users = UserCache(client).start()
        self.handlers.on_new_topic = self.registry.register_topic
        self.controller = Controller(self.broker_id, client, self.view,
                                     unclean=cfg["unclean.leader.election.enable"],
                                     rebalance=Rebalance.from_config(cfg),
                                     batch_partitions=cfg["controller.batch.partitions"]).start()

    def _start_authorizer(self, client) -> None:
        """The ACL cache (read now, then watched) and the authorizer every Kafka handler asks."""
        # deferred: kazoo is only needed (and imported) when ZooKeeper is enabled
        from ingest.broker.authorizer.authorizer import Authorizer
        from ingest.broker.authorizer.cache import AclCache

        cfg = self.config
        cache = AclCache(client).start()
        self.kafka_apis.authorizer = Authorizer(cache, super_users(cfg), cfg["allow.everyone.if.no.acl.found"])
        view = self.view
        self.kafka_apis.registered_principal = lambda broker_id: view.principals.get(broker_id)

    def _stop_zookeeper_parts(self) -> None:
        if self.kafka_apis is not None and self.kafka_apis.authorizer is not None:
            self.kafka_apis.authorizer.close()
        if self.coordinated is not None:
            self.coordinated.stop()
        if self.controller is not None:
            self.controller.close()
        if self.replicas is not None:
            self.replicas.stop()
        if self.view is not None:
            self.view.close()

    def stop(self) -> None:
        with self._lock:
            if self._stopping:
                self._stopped.wait()
                return
            self._stopping = True
        log.info("broker %d shutting down", self.broker_id)
        self._controlled_shutdown()
        if self.replicas is not None:   # answer waiting acks=-1 produces now, not at the drain deadline
            self.replicas.purgatory.close()
        if self.network is not None:
            self.network.stop()
        self._stop_kafka()
        self._stop_zookeeper_parts()
        if self.log_manager is not None:
            self.log_manager.shutdown()
        if self.registry is not None:
            self.registry.close()
        self._stop_background()
        self._stop_metrics()
        flush_all(final=True)   # the counts of repeated errors not yet written
        self._stopped.set()
        log.info("broker %d stopped", self.broker_id)

    def _stop_background(self) -> None:
        """The scheduler and the purgatories' timer, once everything that uses them has stopped."""
        if self.scheduler is not None:
            self.scheduler.shutdown()
        if self.timer is not None:
            self.timer.close()

    def _controlled_shutdown(self) -> None:
        """Before anything stops: the controller moves this broker's leaderships away (bounded; ingest.broker.
        controlled_shutdown). Nothing to do without ZooKeeper or with controlled.shutdown.enable=false."""
        # deferred: kazoo is only needed (and imported) when ZooKeeper is enabled
        from ingest.broker.controlled_shutdown import ControlledShutdownSettings, shut_down_controlled

        settings = ControlledShutdownSettings.from_config(self.config)
        if not settings.enable or self.view is None or self.replicas is None:
            return
        try:
            shut_down_controlled(self.replicas.zk, self.view, self.broker_id, settings)
        except Exception:  # noqa: BLE001 - the broker must stop even when the request fails
            log.exception("broker %d: controlled shutdown failed; stopping anyway", self.broker_id)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until ``stop`` has run (or timeout); True when stopped."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> "BrokerServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
