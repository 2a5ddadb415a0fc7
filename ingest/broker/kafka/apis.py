"""What every Kafka API handler shares: the cluster seam, the broker's config, metrics, purgatory, refusal log.

One :class:`KafkaApis` per broker, used by every Kafka listener's dispatcher. A handler module has
``handle(apis, request, ctx)`` and ``error(request, code, ctx)`` (the answer that gives every part of
the request ``code``); :data:`HANDLERS` maps each advertised api key to its module, so what is
advertised (:mod:`ingest.broker.kafka.versions`) and what is served are checked against each other
at start-up.
"""
from __future__ import annotations

import logging

from ingest.broker.kafka import (api_versions, fetch, find_coordinator, init_producer_id, list_offsets, metadata,
                                 offset_for_leader_epoch, produce, versions)
from ingest.broker.kafka.producer_ids import LocalProducerIds
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

HANDLERS = {0: produce, 1: fetch, 2: list_offsets, 3: metadata, 10: find_coordinator, 18: api_versions,
            22: init_producer_id, 23: offset_for_leader_epoch}
"""api key -> the module that serves it."""

assert sorted(HANDLERS) == sorted(versions.ADVERTISED), "every advertised API has a handler, and only those"


class KafkaApis:
    """The handlers' shared state.

    Args:
        config: the broker's config (``auto.create.topics.enable``, ...).
        cluster: the :class:`~ingest.broker.kafka.cluster.KafkaCluster` seam.
        metrics: the broker's metrics (``produced``, ``fetched``).
        purgatory: where fetches wait for data and acks=-1 produces for the in-sync replicas.
    """

    def __init__(self, config, cluster, metrics, purgatory) -> None:
        self.config = config
        self.cluster = cluster
        self.metrics = metrics
        self.purgatory = purgatory
        self.producer_ids = LocalProducerIds(cluster.broker_id)
        """Replaced by ZooKeeper's blocks when the broker joins a cluster (:mod:`ingest.broker.kafka.producer_ids`)."""
        self.refusals = RateLimitedLog(log, interval_s=30.0)

    def wake_fetches(self, topic: str, partition: int) -> None:
        """Something was appended to ``topic``/``partition``: waiting fetches look again."""
        self.purgatory.check(("fetch", topic, partition))

    def handlers(self) -> dict:
        """api key -> (handler, error answer), as :class:`~ingest.broker.kafka.dispatcher.KafkaDispatcher` takes."""
        out = {}
        for key, module in HANDLERS.items():
            out[key] = ((lambda m: lambda req, ctx: m.handle(self, req, ctx))(module), module.error)
        return out
