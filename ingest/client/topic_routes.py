"""Which path a producer's topic takes: the Kafka protocol (a Kafka-format topic) or the 0.7 protocol.

The broker never converts between the two kinds of topic (docs/kafka-protocol.md D2, D5), so the
producer decides once per topic which sender serves it:

1. No Kafka listener known (neither ``bootstrap.servers`` nor, with ZooKeeper, a broker registered
   under ``/brokers/endpoints`` a listener whose protocol is the producer's ``security.protocol``): every topic is a 0.7 topic, as before Kafka-format topics existed.
2. Metadata from a Kafka listener, without creating anything: the topic is listed -> a Kafka topic;
   INVALID_TOPIC_EXCEPTION (the cluster knows the name as a 0.7 topic, D2) -> a 0.7 topic;
   unknown ->
3. a 0.7 broker lists it (METADATA, or TOPIC_METADATA of a replicated 0.7 topic) -> a 0.7 topic;
   known to neither -> a new topic of the kind ``topic.format.default`` names (created by its first
   message, on the chosen side).

The decision is kept for the producer's life, except when the broker answers that the topic is of
the other kind (it was deleted and created again as the other kind, or it was created by someone
else between the look-up and the first message): it is decided afresh for the next batch. A
Kafka listener that does not answer decides nothing: the batch fails with that error and the next
one asks again.

Concurrency: :meth:`TopicRoutes.sender` may be called from any thread (one lock serialises the
look-ups and the Kafka metadata client they use).
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

from ingest.broker.topics import validate_topic
from ingest.client.cluster import ClusterView
from ingest.client.discovery import Discovery
from ingest.client.kafka.cluster import KafkaCluster
from ingest.client.kafka.config import KAFKA_CONSUMER_CONFIG
from ingest.client.kafka.security import SECURITY_KEY_NAMES
from ingest.client.kafka_sender import KafkaSender
from ingest.client.send_batch import BatchSender
from ingest.clock import Clock
from ingest.config import Config
from ingest.errors import (BrokerUnavailableError, InvalidTopicError, LeaderNotAvailableError, MalformedResponseError,
                           UnknownTopicError, WrongTopicKindError)

log = logging.getLogger(__name__)

KAFKA, V07 = "kafka", "0.7"

Sender = BatchSender | KafkaSender


class TopicRoutes:
    """The sender of each topic of one producer (module docstring).

    Args:
        config: the producer's Config (``bootstrap.servers``, ``topic.format.default``, timeouts).
        discovery: the producer's 0.7 discovery (also the source of ``/brokers/endpoints``).
        cluster: the producer's 0.7 cluster view (what the 0.7 brokers know).
        v07: the 0.7 sender.
        make_kafka: builds the Kafka sender from the listeners, once, when a first Kafka topic needs it.
    """

    def __init__(self, config: Config, discovery: Discovery, cluster: ClusterView, v07: BatchSender,
                 make_kafka: Callable[[Sequence[tuple[str, int]]], KafkaSender], *, clock: Clock) -> None:
        self.config = config
        self.discovery = discovery
        self.cluster = cluster
        self.v07 = v07
        self.kafka: KafkaSender | None = None
        self._make_kafka = make_kafka
        self.clock = clock
        self.default = config["topic.format.default"]
        # a producer reaches 0.7 brokers unless bootstrap.servers is all it was given (a discovery passed in,
        # as the mirror's producers to their target are, brings 0.7 brokers without either key)
        self._has_v07 = bool(config["zk.connect"] or config["broker.list"] or not config["bootstrap.servers"])
        self._kinds: dict[str, str] = {}
        self._metadata: KafkaCluster | None = None
        self._lock = threading.Lock()
        self._said_no_listener = False

    def kind(self, topic: str) -> str | None:
        """The kind decided for ``topic`` so far (None: not yet asked)."""
        return self._kinds.get(topic)

    def sender(self, topic: str) -> Sender:
        """The sender of ``topic``, deciding its kind the first time (module docstring).

        Raises:
            InvalidTopicError: not a valid topic name.
            WrongTopicKindError: a 0.7 topic, and this producer knows no 0.7 broker (only bootstrap.servers).
            BrokerUnavailableError: no Kafka listener answered Metadata within ``delivery.timeout.ms``.
        """
        kind = self._kinds.get(topic)
        if kind is None:
            with self._lock:
                kind = self._kinds.get(topic) or self._decide(topic)
                self._kinds[topic] = kind
        if kind == KAFKA:
            return self.kafka
        if not self._has_v07:
            self._kinds.pop(topic, None)
            raise WrongTopicKindError(
                f"topic {topic!r} is a 0.7 topic, served by the brokers' 0.7 port, and this producer knows only "
                "Kafka listeners (bootstrap.servers): set broker.list or zk.connect to publish to it")
        return self.v07

    def forget(self, topic: str, error: BaseException | None) -> None:
        """A batch of ``topic`` failed with ``error``: after a wrong-kind answer, decide its kind again."""
        cause = getattr(error, "__cause__", None)
        if any(isinstance(e, (WrongTopicKindError, InvalidTopicError)) for e in (error, cause)) \
                and self._kinds.pop(topic, None):
            log.info("topic %r: the broker answered it is of the other kind (%s); deciding its kind again",
                     topic, error)

    def close(self) -> None:
        with self._lock:
            if self._metadata is not None:
                self._metadata.close()
            if self.kafka is not None:
                self.kafka.close()

    # --- deciding -----------------------------------------------------------------------------

    def _decide(self, topic: str) -> str:
        validate_topic(topic)   # a bad name is refused as such, not taken for a 0.7 topic
        servers = self._kafka_servers()
        if not servers:
            if self.default == KAFKA and not self._said_no_listener:
                self._said_no_listener = True
                log.info("topics are sent as 0.7 topics (first: %r): no Kafka listener is known (set "
                         "bootstrap.servers, or zk.connect with brokers that register /brokers/endpoints)", topic)
            return V07
        if self._metadata is None:
            self._metadata = KafkaCluster(self._metadata_config(servers), self.clock, allow_auto_create=False)
        kind = self._ask_kafka(topic)
        if kind is None:
            kind = V07 if self._v07_knows(topic) else self.default
            if kind == KAFKA:
                log.info("topic %r is new: it is created as a Kafka-format topic (topic.format.default)", topic)
        if kind == KAFKA and self.kafka is None:
            self.kafka = self._make_kafka(servers)
        log.debug("topic %r is a %s topic", topic, kind)
        return kind

    def _ask_kafka(self, topic: str) -> str | None:
        """The kind the Kafka listeners answer for ``topic`` (None: unknown to them), asking again with
        back-off while none answers, until ``delivery.timeout.ms`` (or the producer's close timeout)."""
        deadline = self.clock.monotonic() + self.config["delivery.timeout.ms"] / 1000.0
        if self.v07.give_up_at is not None:
            deadline = min(deadline, self.v07.give_up_at)
        attempt = 0
        while True:
            try:
                self._metadata.partitions(topic, self.clock.monotonic())
                return KAFKA
            except LeaderNotAvailableError:   # it exists; a leader is being elected
                return KAFKA
            except InvalidTopicError:         # the cluster holds it as a 0.7 topic (the name was checked)
                return V07
            except UnknownTopicError:
                return None
            except (BrokerUnavailableError, MalformedResponseError):
                now = self.clock.monotonic()
                if now >= deadline:
                    raise
                attempt += 1
                self.clock.sleep(min(self._metadata.backoff.delay_s(attempt), deadline - now))

    def _kafka_servers(self) -> tuple[tuple[str, int], ...]:
        return self.config["bootstrap.servers"] or self.discovery.kafka_servers(
            self.config.get("security.protocol", "PLAINTEXT"))

    def _v07_knows(self, topic: str) -> bool:
        if not self._has_v07:
            return False
        if self.cluster.replicated(topic) is not None:
            return True
        return self.cluster.knows(topic)

    def _metadata_config(self, servers) -> Config:
        timeout_ms = max(self.config["socket.timeout.ms"], 1)
        return KAFKA_CONSUMER_CONFIG.parse({
            **{k: self.config[k] for k in SECURITY_KEY_NAMES if k in self.config},
            "bootstrap.servers": tuple(servers), "client.id": "ingest-producer", "request.timeout.ms": timeout_ms,
            "retry.backoff.ms": self.config["retry.backoff.ms"],
            "retry.backoff.max.ms": self.config["retry.backoff.max.ms"]}, source="producer topic routes")
