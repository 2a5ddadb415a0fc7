"""What every Kafka API handler shares: the cluster seam, the broker's config, metrics, purgatory, refusal log.

One :class:`KafkaApis` per broker, used by every Kafka listener's dispatcher. A handler module has
``handle(apis, request, ctx)`` and ``error(request, code, ctx)`` (the answer that gives every part of
the request ``code``); :data:`HANDLERS` maps each served api key to its module, so what is advertised
(:mod:`ingest.broker.kafka.versions`: a subset of what is served, the private APIs left out) and what
is served are checked against each other at start-up.
"""
from __future__ import annotations

import logging

from ingest.broker.groups.coordinator import GroupCoordinator
from ingest.broker.kafka import (alter_configs, api_versions, append_at, create_acls, create_partitions, create_topics,
                                 delete_acls, delete_topics, describe_acls, describe_cluster, describe_configs,
                                 describe_groups, fetch, find_coordinator, heartbeat, incremental_alter_configs,
                                 init_producer_id, join_group, leave_group, list_groups, list_offsets, metadata,
                                 offset_commit, offset_fetch, offset_for_leader_epoch, port07, produce,
                                 sasl_authenticate, sasl_handshake, sync_group, versions)
from ingest.broker.kafka.producer_ids import LocalProducerIds
from ingest.clock import SYSTEM_CLOCK
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

HANDLERS = {0: produce, 1: fetch, 2: list_offsets, 3: metadata, 8: offset_commit, 9: offset_fetch,
            10: find_coordinator, 11: join_group, 12: heartbeat, 13: leave_group, 14: sync_group, 15: describe_groups,
            16: list_groups, 17: sasl_handshake, 18: api_versions, 19: create_topics, 20: delete_topics,
            22: init_producer_id, 23: offset_for_leader_epoch, 32: describe_configs, 33: alter_configs,
            36: sasl_authenticate, 37: create_partitions, 29: describe_acls, 30: create_acls, 31: delete_acls,
            44: incremental_alter_configs, 60: describe_cluster, 10000: append_at, 10001: port07, 10002: port07,
            10003: port07, 10004: port07}
"""api key -> the module that serves it (the private ones, keys from 10000, are served, never advertised)."""

assert set(versions.ADVERTISED) <= set(HANDLERS), "every advertised API has a handler"
assert set(HANDLERS) == set(versions.SERVED), "every handled API is advertised or private, and only those"


class KafkaApis:
    """The handlers' shared state.

    Args:
        config: the broker's config (``auto.create.topics.enable``, ...).
        cluster: the :class:`~ingest.broker.kafka.cluster.KafkaCluster` seam.
        metrics: the broker's metrics (``produced``, ``fetched``).
        purgatory: where fetches wait for data, acks=-1 produces and offset commits for the in-sync
            replicas, and the group coordinator keeps its timers.
        clock: the group coordinator's clock (sessions, rebalance timeouts, commit timestamps).
    """

    def __init__(self, config, cluster, metrics, purgatory, clock=SYSTEM_CLOCK) -> None:
        self.config = config
        self.cluster = cluster
        self.metrics = metrics
        self.purgatory = purgatory
        self.producer_ids = LocalProducerIds(cluster.broker_id)
        """Replaced by ZooKeeper's blocks when the broker joins a cluster (:mod:`ingest.broker.kafka.producer_ids`)."""
        self.groups = GroupCoordinator(self, clock)
        self.refusals = RateLimitedLog(log, interval_s=30.0)
        self.tier_counts = None   # a TierCounter when audit.counts.enable (ingest.broker.kafka.tier_counts)
        self.sasl = None   # a SaslAuthenticator when a listener uses SASL (ingest.broker.kafka.sasl)
        self.authorizer = None    # an Authorizer when authorizer.class.name is set (ingest.broker.authorizer)
        self.port07 = None        # the 0.7 port's BrokerHandlers, serving its broker-only requests (port07)
        self.registered_principal = lambda broker_id: None
        """broker id -> the inter-broker principal that broker registered in ZooKeeper (None: unknown)."""

    def wake_fetches(self, topic: str, partition: int) -> None:
        """Something was appended to ``topic``/``partition``: waiting fetches look again."""
        self.purgatory.check(("fetch", topic, partition))

    def handlers(self) -> dict:
        """api key -> (handler, error answer), as :class:`~ingest.broker.kafka.dispatcher.KafkaDispatcher` takes."""
        out = {}
        for key, module in HANDLERS.items():
            out[key] = ((lambda m: lambda req, ctx: m.handle(self, req, ctx))(module), module.error)
        return out
