"""FindCoordinator (10): this broker has no group or transaction coordinator yet.

Answered COORDINATOR_NOT_AVAILABLE (15), what Kafka answers while its offsets topic is not ready
(docs/kafka-protocol.md, "The group coordinator"). Advertised all the same: librdkafka enables LZ4
only when FindCoordinator is advertised. Consumers that ``assign`` partitions work regardless; a
librdkafka consumer that commits on close (``enable.auto.commit=true``, its default) retries for up to
its ``session.timeout.ms`` in ``close()``: set ``enable.auto.commit=false`` with ``assign``.
"""
from __future__ import annotations

from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

NO_COORDINATOR = "this broker has no group coordinator (consumer groups are not served yet): assign partitions"


def handle(apis, req: FindCoordinatorRequest, ctx) -> FindCoordinatorResponse:
    return error(req, KafkaErrorCode.COORDINATOR_NOT_AVAILABLE, ctx)


def error(req: FindCoordinatorRequest, code: int, ctx) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(0, code, NO_COORDINATOR if code == KafkaErrorCode.COORDINATOR_NOT_AVAILABLE
                                   else None)
