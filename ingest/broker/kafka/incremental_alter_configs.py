"""IncrementalAlterConfigs (44): some of a Kafka topic's configs set, deleted (back to the broker's), appended to
or subtracted from (list-valued configs only), the others kept (KIP-339).

Served on the coordination thread, as AlterConfigs (:mod:`ingest.broker.kafka.alter_configs`), with its
errors, and INVALID_CONFIG for APPEND/SUBTRACT on a config that is not a list, or a config named twice; a
BROKER resource sets or deletes this broker's replication throttle rates (:mod:`ingest.broker.kafka.broker_configs`).
"""
from __future__ import annotations

from ingest.broker.kafka import admin_outcome as ao
from ingest.broker.kafka import broker_configs
from ingest.broker.kafka.alter_configs import resource_results
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.alter_configs import AlterConfigsResourceResponse
from ingest.wire.kafka.incremental_alter_configs import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse


def handle(apis, req: IncrementalAlterConfigsRequest, ctx) -> IncrementalAlterConfigsResponse:
    admin = apis.cluster.admin
    if admin is None:
        return error(req, KafkaErrorCode.INVALID_REQUEST, ctx, ao.NO_ZOOKEEPER)
    admin.require_worker("IncrementalAlterConfigs")
    return IncrementalAlterConfigsResponse(0, resource_results(admin, req.resources, lambda r: (
        admin.incremental_alter_configs(r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs],
                                        req.validate_only)), apis, ctx,
        lambda r: broker_configs.incremental(admin, int(r.resource_name),
                                             [(c.name, c.config_operation, c.value) for c in r.configs],
                                             req.validate_only)))


def error(req: IncrementalAlterConfigsRequest, code: int, ctx,
          message: str | None = None) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(0, tuple(
        AlterConfigsResourceResponse(code, message, r.resource_type, r.resource_name) for r in req.resources))
