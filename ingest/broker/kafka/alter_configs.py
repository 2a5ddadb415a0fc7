"""AlterConfigs (33): a Kafka topic's configs replaced by exactly those the request names.

Served on the coordination thread (:mod:`ingest.broker.kafka.zk_admin`): ``/config/topics/[topic]`` is
rewritten and every broker holding the topic applies it. Configs left out go back to the broker's
setting (AlterConfigs replaces the whole set, as in Kafka). INVALID_CONFIG for an unknown name or a
value out of range, UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist, POLICY_VIOLATION for a
``min.insync.replicas`` above the topic's replication factor. A BROKER resource sets this broker's dynamic
configs, the replication throttle's rates (:mod:`ingest.broker.kafka.broker_configs`: INVALID_REQUEST for
another broker, INVALID_CONFIG for any other name); other resource types are INVALID_REQUEST.
"""
from __future__ import annotations

from ingest.broker.kafka import admin_outcome as ao
from ingest.broker.kafka import authorization, broker_configs
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.alter_configs import AlterConfigsRequest, AlterConfigsResourceResponse, AlterConfigsResponse
from ingest.broker.kafka.describe_configs import denied_code
from ingest.wire.kafka.describe_configs import BROKER, TOPIC

NOT_A_TOPIC = ("only topic configs (resource type 2) and a broker's dynamic configs (resource type 4: the "
               "replication throttle's rates) can be changed")


def resource_results(admin, resources, change, apis=None, ctx=None,
                     change_broker=None) -> tuple[AlterConfigsResourceResponse, ...]:
    """Each resource answered alone; ``change(resource)`` does a topic's write, ``change_broker(resource)`` this
    broker's (AlterConfigs and IncrementalAlterConfigs share this); each needs AlterConfigs on the topic or the
    cluster."""
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
        elif r.resource_type == BROKER and change_broker is not None:
            wrong = broker_configs.wrong_broker(admin, r.resource_name)
            code, message, _ = (KafkaErrorCode.INVALID_REQUEST, wrong, None) if wrong else \
                ao.outcome(lambda: change_broker(r))
            out.append(AlterConfigsResourceResponse(code, message, r.resource_type, r.resource_name))
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
        r.resource_name, {c.name: c.value for c in r.configs}, req.validate_only), apis, ctx,
        lambda r: broker_configs.alter(admin, int(r.resource_name), {c.name: c.value for c in r.configs},
                                       req.validate_only)))


def error(req: AlterConfigsRequest, code: int, ctx, message: str | None = None) -> AlterConfigsResponse:
    return AlterConfigsResponse(0, tuple(AlterConfigsResourceResponse(code, message, r.resource_type, r.resource_name)
                                         for r in req.resources))
