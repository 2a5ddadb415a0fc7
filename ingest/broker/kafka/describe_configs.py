"""DescribeConfigs (32): every config of a Kafka topic with its value and source, and this broker's defaults.

A topic's configs are the topic-level names of :mod:`ingest.broker.topic_config`: its own value from
``/config/topics`` (source DYNAMIC_TOPIC_CONFIG), else the broker's from ``server.properties``
(STATIC_BROKER_CONFIG), else the default (DEFAULT_CONFIG); with ``include_synonyms`` (v1+) each lists
those levels, most specific first. Read from the broker's watched view: served on the network thread.
A BROKER resource (this broker's id, or empty for the defaults) lists the broker-level synonyms,
read-only (they come from ``server.properties`` at start), and (its id only) the replication throttle's two
rates, which are dynamic: the value of ``/config/brokers/[id]`` as this broker applies it
(DYNAMIC_BROKER_CONFIG), else unlimited (DEFAULT_CONFIG, ``Long.MAX_VALUE`` as in Kafka). UNKNOWN_TOPIC_OR_PARTITION for a topic that
does not exist, INVALID_TOPIC_EXCEPTION for a 0.7 topic, INVALID_REQUEST for another resource type.
"""
from __future__ import annotations

from ingest.broker import replication_quota as rq
from ingest.broker import topic_config
from ingest.broker.kafka import admin_outcome as ao
from ingest.broker.kafka import authorization
from ingest.errors import UnknownTopicError
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka import describe_configs as dc
from ingest.wire.kafka.describe_configs import (DescribeConfigsRequest, DescribeConfigsResourceResult,
                                                DescribeConfigsResponse, DescribeConfigsResult, DescribeConfigsSynonym)

SOURCES = {"topic": dc.DYNAMIC_TOPIC_CONFIG, "broker": dc.STATIC_BROKER_CONFIG, "default": dc.DEFAULT_CONFIG,
           "dynamic_broker": dc.DYNAMIC_BROKER_CONFIG}
_THROTTLE_DOCS = {rq.LEADER_RATE: "bytes/s a leader sends of the throttled replicas' fetches (dynamic)",
                  rq.FOLLOWER_RATE: "bytes/s a follower copies of its throttled replicas (dynamic)"}
TYPES = {topic_config.LONG: dc.TYPE_LONG, topic_config.INT: dc.TYPE_INT, topic_config.STRING: dc.TYPE_STRING,
         topic_config.LIST: dc.TYPE_LIST}


def _topic(apis, name: str):
    if apis.cluster.describe(name) is None:
        raise UnknownTopicError(f"topic {name!r} does not exist")
    return topic_config.describe(apis.config, name, apis.cluster.topic_configs(name))


def _broker(apis, name: str) -> tuple[int, str | None, list | None]:
    if name not in ("", str(apis.cluster.broker_id)):
        return (KafkaErrorCode.INVALID_REQUEST, f"broker {name!r}: this is broker {apis.cluster.broker_id}; ask "
                f"broker {name} itself for its configs", None)
    rows = topic_config.describe(apis.config, "", {})
    return 0, None, [topic_config.Described(d.synonyms[-1][0], d.value, d.source, d.synonyms[-1:], d.type, d.doc)
                     for d in rows if d.synonyms] + _throttle_rows(apis, name)


def _throttle_rows(apis, name: str) -> list:
    """This broker's two throttle rates (none for the empty name of the defaults, or without ZooKeeper)."""
    throttles = getattr(getattr(apis.cluster, "replicas", None), "throttles", None)
    if throttles is None or name == "":
        return []
    out = []
    for key, quota in ((rq.FOLLOWER_RATE, throttles.follower), (rq.LEADER_RATE, throttles.leader)):
        value, source = str(quota.bound), "dynamic_broker" if quota.bound < rq.UNLIMITED else "default"
        out.append(topic_config.Described(key, value, source, ((key, value, source),), topic_config.LONG,
                                          _THROTTLE_DOCS[key]))
    return out


def handle(apis, req: DescribeConfigsRequest, ctx) -> DescribeConfigsResponse:
    results = []
    for r in req.resources:
        denied = denied_code(apis, ctx, r.resource_type, r.resource_name, authorization.DESCRIBE_CONFIGS)
        if denied:
            results.append(DescribeConfigsResult(denied, None, r.resource_type, r.resource_name, ()))
            continue
        if r.resource_type == dc.TOPIC:
            code, message, rows = ao.outcome(lambda: _topic(apis, r.resource_name))
            read_only = False
        elif r.resource_type == dc.BROKER:
            code, message, rows = _broker(apis, r.resource_name)
            read_only = True
        else:
            code, message, rows = (KafkaErrorCode.INVALID_REQUEST, f"resource type {r.resource_type} is not "
                                   f"described by this broker: only topics ({dc.TOPIC}) and brokers ({dc.BROKER})",
                                   None)
        if code:
            results.append(DescribeConfigsResult(code, message, r.resource_type, r.resource_name, ()))
            continue
        wanted = None if r.configuration_keys is None else set(r.configuration_keys)
        entries = tuple(_entry(d, read_only and d.name not in rq.RATES, req, ctx.version) for d in rows
                        if wanted is None or d.name in wanted)
        results.append(DescribeConfigsResult(0, None, r.resource_type, r.resource_name, entries))
    return DescribeConfigsResponse(0, tuple(results))


def denied_code(apis, ctx, resource_type: int, name: str, op) -> int:
    """0, or the authorization error of ``op`` (DescribeConfigs, AlterConfigs) on a topic or the cluster
    (a broker's configs are the cluster's, as Kafka's ``KafkaApis``)."""
    if resource_type == dc.TOPIC:
        return 0 if authorization.topic(apis, ctx, op, name) else KafkaErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type == dc.BROKER:
        return 0 if authorization.cluster(apis, ctx, op) else KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return 0


def _entry(d, read_only: bool, req: DescribeConfigsRequest, version: int) -> DescribeConfigsResourceResult:
    synonyms = tuple(DescribeConfigsSynonym(n, v, SOURCES[s]) for n, v, s in d.synonyms) \
        if req.include_synonyms else ()
    return DescribeConfigsResourceResult(d.name, d.value, read_only, d.source not in ("topic", "dynamic_broker"),
                                         SOURCES[d.source], False,
                                         synonyms, TYPES[d.type], d.doc if req.include_documentation else None)


def error(req: DescribeConfigsRequest, code: int, ctx) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(0, tuple(DescribeConfigsResult(code, None, r.resource_type, r.resource_name, ())
                                            for r in req.resources))
