"""AlterConfigs (33): a Kafka topic's configs replaced by exactly those the request names.

Served on the coordination thread (:mod:`ingest.broker.kafka.zk_admin`): ``/config/topics/[topic]`` is
rewritten and every broker holding the topic applies it. Configs left out go back to the broker's
setting (AlterConfigs replaces the whole set, as in Kafka). INVALID_CONFIG for an unknown name or a
value out of range, UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist, POLICY_VIOLATION for a
``min.insync.replicas`` above the topic's replication factor, INVALID_REQUEST for a broker resource
(the brokers' own settings come from ``server.properties``: there are no dynamic broker configs).
"""
from __future__ import annotations

from ingest.broker.kafka import admin_outcome as ao
from ingest.broker.kafka import authorization
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.alter_configs import AlterConfigsRequest, AlterConfigsResourceResponse, AlterConfigsResponse
from ingest.broker.kafka.describe_configs import denied_code
from ingest.wire.kafka.describe_configs import TOPIC

NOT_A_TOPIC = ("only topic configs (resource type 2) can be changed: a broker's settings come from its "
               "server.properties at start (there are no dynamic broker configs)")


def resource_results(admin, resources, change, apis=None, ctx=None) -> tuple[AlterConfigsResourceResponse, ...]:
    """Each resource answered alone; ``change(resource)`` does a topic's write (AlterConfigs and
    IncrementalAlterConfigs share this); each needs AlterConfigs on the topic or the cluster."""
    twice = ao.duplicates((r.resource_type, r.resource_name) for r in resources)
    out = []
    for r in resources:
        denied = 0 if apis is None else denied_code(apis, ctx, r.resource_type, r.resource_name,
                                                authorization.ALTER_CONFIGS)
        if denied:
            out.append(AlterConfigsResourceResponse(denied, None, r.resource_type, r.resource_name))
        elif (r.resource_type, r.resource_name) in twice:
            out.append(AlterConfigsResourceResponse(KafkaErrorCode.INVALID_REQUEST,
                                                    ao.duplicate_message(r.resource_name), r.resource_type,
                                                    r.resource_name))
        elif r.resource_type != TOPIC:
            out.append(AlterConfigsResourceResponse(KafkaErrorCode.INVALID_REQUEST, NOT_A_TOPIC, r.resource_type,
                                                    r.resource_name))
        else:
            code, message, _ = ao.outcome(lambda: change(r))
            out.append(AlterConfigsResourceResponse(code, message, r.resource_type, r.resource_name))
    return tuple(out)


def handle(apis, req: AlterConfigsRequest, ctx) -> AlterConfigsResponse:
    admin = apis.cluster.admin
    if admin is None:
        return error(req, KafkaErrorCode.INVALID_REQUEST, ctx, ao.NO_ZOOKEEPER)
    admin.require_worker("AlterConfigs")
    return AlterConfigsResponse(0, resource_results(admin, req.resources, lambda r: admin.alter_configs(
        r.resource_name, {c.name: c.value for c in r.configs}, req.validate_only), apis, ctx))


def error(req: AlterConfigsRequest, code: int, ctx, message: str | None = None) -> AlterConfigsResponse:
    return AlterConfigsResponse(0, tuple(AlterConfigsResourceResponse(code, message, r.resource_type, r.resource_name)
                                         for r in req.resources))
