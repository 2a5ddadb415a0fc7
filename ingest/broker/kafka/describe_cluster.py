"""DescribeCluster (60): the cluster id, the controller and the live brokers at this listener (KIP-700).

What Metadata says of the cluster, without topics: the brokers that registered an endpoint for the
listener the request came in on. A ZooKeeper cluster has no KRaft controllers: endpoint type 2 is
answered UNSUPPORTED_ENDPOINT_TYPE (119), as Kafka answers a broker-only cluster; no broker is fenced.
"""
from __future__ import annotations

from ingest.broker.kafka import authorization
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.describe_cluster import (BROKERS, DescribeClusterBroker, DescribeClusterRequest,
                                                DescribeClusterResponse)


def handle(apis, req: DescribeClusterRequest, ctx) -> DescribeClusterResponse:
    cluster = apis.cluster
    if not authorization.cluster(apis, ctx, authorization.DESCRIBE):
        return error(req, KafkaErrorCode.CLUSTER_AUTHORIZATION_FAILED, ctx)
    if req.endpoint_type != BROKERS:
        return DescribeClusterResponse(0, KafkaErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                                       f"endpoint type {req.endpoint_type}: this cluster has brokers (1) only, no "
                                       "KRaft controllers", req.endpoint_type, cluster.cluster_id, -1, ())
    brokers = tuple(DescribeClusterBroker(b.node_id, b.host, b.port, b.rack) for b in cluster.brokers(ctx.listener))
    return DescribeClusterResponse(0, 0, None, BROKERS, cluster.cluster_id, cluster.controller_id(), brokers)


def error(req: DescribeClusterRequest, code: int, ctx) -> DescribeClusterResponse:
    return DescribeClusterResponse(0, code, None, req.endpoint_type, "", -1, ())


