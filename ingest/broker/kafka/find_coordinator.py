"""FindCoordinator (10): the broker that coordinates a consumer group (the leader of its offsets partition).

Kafka's rule: a group lives in partition ``abs(hashCode(group id)) % partitions`` of ``__consumer_offsets``
and its coordinator is that partition's leader. The topic is created at the first request (with
ZooKeeper on the coordination thread: its assignment is written, the controller elects its leaders)
and answered COORDINATOR_NOT_AVAILABLE (15) until its partition has a leader with an endpoint on this
listener; clients retry. A transactional id (key type 1) is answered COORDINATOR_NOT_AVAILABLE: there
is no transaction coordinator.
"""
from __future__ import annotations

from ingest.broker.groups.offsets_topic import OFFSETS_TOPIC, partition_for
from ingest.broker.kafka import authorization
from ingest.errors import IngestError, NeedsZooKeeperError
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.find_coordinator import GROUP, FindCoordinatorRequest, FindCoordinatorResponse

NO_TRANSACTIONS = "this broker has no transaction coordinator"


def handle(apis, req: FindCoordinatorRequest, ctx) -> FindCoordinatorResponse:
    if req.key_type != GROUP:
        return FindCoordinatorResponse(0, KafkaErrorCode.COORDINATOR_NOT_AVAILABLE, NO_TRANSACTIONS)
    if not req.key:
        return FindCoordinatorResponse(0, KafkaErrorCode.INVALID_GROUP_ID, "the group id is empty")
    if not authorization.group(apis, ctx, authorization.DESCRIBE, req.key):
        return FindCoordinatorResponse(0, KafkaErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    try:
        n = apis.groups.offsets.ensure_topic()
    except NeedsZooKeeperError:
        raise                    # created on the coordination thread, which answers
    except IngestError as exc:   # e.g. too few live brokers: Kafka answers so while the topic cannot exist
        return _unavailable(f"{OFFSETS_TOPIC} cannot be created now: {exc}")
    if n is None:
        return _unavailable(f"{OFFSETS_TOPIC} is being created")
    p = partition_for(req.key, n)
    views = apis.cluster.describe(OFFSETS_TOPIC) or ()
    leader = views[p].leader if p < len(views) else -1
    if leader < 0:
        return _unavailable(f"{OFFSETS_TOPIC}-{p} has no leader now")
    node = next((b for b in apis.cluster.brokers(ctx.listener) if b.node_id == leader), None)
    if node is None:
        return _unavailable(f"broker {leader} (leader of {OFFSETS_TOPIC}-{p}) has no {ctx.listener} endpoint")
    return FindCoordinatorResponse(0, 0, None, node.node_id, node.host, node.port)


def _unavailable(why: str) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(0, KafkaErrorCode.COORDINATOR_NOT_AVAILABLE, why)


def error(req: FindCoordinatorRequest, code: int, ctx) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(0, code, None)


