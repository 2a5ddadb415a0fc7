"""The Kafka API handlers' questions to the authorizer (:mod:`ingest.broker.authorizer`).

Every function answers True when no authorizer is configured (``apis.authorizer`` None): the default
broker authorizes nothing, as today. The operation each request needs is Kafka's ``KafkaApis`` table
(docs/security.md, "Authorization"). A replica's fetch (:func:`replica`) needs ClusterAction on the
cluster, and the connection's principal must be the one the broker with that id registered in
ZooKeeper (``/brokers/endpoints/[id]``, field ``principal``): a client allowed ClusterAction still
cannot speak for a broker it is not.
"""
from __future__ import annotations

from ingest.broker.authorizer.acl import CLUSTER_NAME, Operation, ResourceType
from ingest.wire.kafka.apis import api_name

READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                                                Operation.ALTER, Operation.DESCRIBE)
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE)


def enabled(apis) -> bool:
    return apis.authorizer is not None


def allowed(apis, ctx, op: Operation, rtype: ResourceType, name: str, audit: bool = True) -> bool:
    a = apis.authorizer
    return a is None or a.authorize(ctx.principal, ctx.host, op, rtype, name, api_name(ctx.api_key), audit)


def topic(apis, ctx, op: Operation, name: str, audit: bool = True) -> bool:
    return allowed(apis, ctx, op, ResourceType.TOPIC, name, audit)


def group(apis, ctx, op: Operation, name: str, audit: bool = True) -> bool:
    return allowed(apis, ctx, op, ResourceType.GROUP, name, audit)


def cluster(apis, ctx, op: Operation, audit: bool = True) -> bool:
    return allowed(apis, ctx, op, ResourceType.CLUSTER, CLUSTER_NAME, audit)


def transactional_id(apis, ctx, op: Operation, name: str) -> bool:
    return allowed(apis, ctx, op, ResourceType.TRANSACTIONAL_ID, name)


def create_topic(apis, ctx, name: str) -> bool:
    """Create on the cluster, or on the topic (Kafka checks both; the cluster's is not logged)."""
    return cluster(apis, ctx, CREATE, audit=False) or topic(apis, ctx, CREATE, name)


def any_topic(apis, ctx, op: Operation) -> bool:
    """``op`` allowed on some topic (Kafka's ``authorizeByResourceType``)."""
    a = apis.authorizer
    return a is None or a.authorize_any(ctx.principal, ctx.host, op, ResourceType.TOPIC)


def replica(apis, ctx, replica_id: int) -> bool:
    """May this connection fetch as broker ``replica_id``: ClusterAction, and that broker's own principal."""
    a = apis.authorizer
    if a is None:
        return True
    if not cluster(apis, ctx, CLUSTER_ACTION):
        return False
    registered = apis.registered_principal(replica_id)
    if registered == ctx.principal:
        return True
    a.refused_identity(ctx.principal, ctx.host, replica_id, registered, api_name(ctx.api_key))
    return False
