"""The Kafka APIs this product declares: api key -> request and response classes, and their versions.

One table (Kafka's ``ApiKeys``), read by the broker's Kafka listener to decode requests and to
answer ApiVersions, and by clients and tests. Keys from 10000 are this product's private APIs
(AppendAt, the 0.7 port's broker-only requests): declared here like the others, never advertised. A version range here is what is declared; what the
broker advertises is its own table of what it implements (ingest/broker/kafka/).
"""
from __future__ import annotations

from typing import NamedTuple

from ingest.wire.kafka.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from ingest.wire.kafka.api_versions import ApiVersionsRequest, ApiVersionsResponse
from ingest.wire.kafka.append_at import AppendAtRequest, AppendAtResponse
from ingest.wire.kafka.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from ingest.wire.kafka.create_topics import CreateTopicsRequest, CreateTopicsResponse
from ingest.wire.kafka.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from ingest.wire.kafka.acls import (CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
                                    DescribeAclsRequest, DescribeAclsResponse)
from ingest.wire.kafka.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from ingest.wire.kafka.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from ingest.wire.kafka.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from ingest.wire.kafka.fetch import FetchRequest, FetchResponse
from ingest.wire.kafka.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from ingest.wire.kafka.heartbeat import HeartbeatRequest, HeartbeatResponse
from ingest.wire.kafka.incremental_alter_configs import (IncrementalAlterConfigsRequest,
                                                        IncrementalAlterConfigsResponse)
from ingest.wire.kafka.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from ingest.wire.kafka.join_group import JoinGroupRequest, JoinGroupResponse
from ingest.wire.kafka.leave_group import LeaveGroupRequest, LeaveGroupResponse
from ingest.wire.kafka.list_groups import ListGroupsRequest, ListGroupsResponse
from ingest.wire.kafka.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from ingest.wire.kafka.message import KafkaRequest, KafkaResponse
from ingest.wire.kafka.metadata import MetadataRequest, MetadataResponse
from ingest.wire.kafka.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from ingest.wire.kafka.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from ingest.wire.kafka.port07 import (AppendAt07Request, AppendAt07Response, DeletedSegments07Request,
                                      DeletedSegments07Response, ReplicaFetch07Request, ReplicaFetch07Response,
                                      ReplicaFetches07Request, ReplicaFetches07Response)
from ingest.wire.kafka.offset_for_leader_epoch import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from ingest.wire.kafka.produce import ProduceRequest, ProduceResponse
from ingest.wire.kafka.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from ingest.wire.kafka.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from ingest.wire.kafka.sync_group import SyncGroupRequest, SyncGroupResponse


class Api(NamedTuple):
    """One API: its key, name, request and response classes, and the versions declared (inclusive)."""

    key: int
    name: str
    request: type[KafkaRequest]
    response: type[KafkaResponse]
    min_version: int
    max_version: int


def _api(name: str, request: type[KafkaRequest], response: type[KafkaResponse]) -> Api:
    valid = request.SCHEMA.valid
    return Api(request.API_KEY, name, request, response, valid.lo, valid.hi)


APIS: dict[int, Api] = {a.key: a for a in (
    _api("Produce", ProduceRequest, ProduceResponse),
    _api("Fetch", FetchRequest, FetchResponse),
    _api("ListOffsets", ListOffsetsRequest, ListOffsetsResponse),
    _api("Metadata", MetadataRequest, MetadataResponse),
    _api("OffsetCommit", OffsetCommitRequest, OffsetCommitResponse),
    _api("OffsetFetch", OffsetFetchRequest, OffsetFetchResponse),
    _api("FindCoordinator", FindCoordinatorRequest, FindCoordinatorResponse),
    _api("JoinGroup", JoinGroupRequest, JoinGroupResponse),
    _api("Heartbeat", HeartbeatRequest, HeartbeatResponse),
    _api("LeaveGroup", LeaveGroupRequest, LeaveGroupResponse),
    _api("SyncGroup", SyncGroupRequest, SyncGroupResponse),
    _api("DescribeGroups", DescribeGroupsRequest, DescribeGroupsResponse),
    _api("ListGroups", ListGroupsRequest, ListGroupsResponse),
    _api("SaslHandshake", SaslHandshakeRequest, SaslHandshakeResponse),
    _api("ApiVersions", ApiVersionsRequest, ApiVersionsResponse),
    _api("InitProducerId", InitProducerIdRequest, InitProducerIdResponse),
    _api("OffsetForLeaderEpoch", OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    _api("AppendAt", AppendAtRequest, AppendAtResponse),
    _api("ReplicaFetch07", ReplicaFetch07Request, ReplicaFetch07Response),
    _api("AppendAt07", AppendAt07Request, AppendAt07Response),
    _api("DeletedSegments07", DeletedSegments07Request, DeletedSegments07Response),
    _api("ReplicaFetches07", ReplicaFetches07Request, ReplicaFetches07Response),
    _api("CreateTopics", CreateTopicsRequest, CreateTopicsResponse),
    _api("DeleteTopics", DeleteTopicsRequest, DeleteTopicsResponse),
    _api("DescribeConfigs", DescribeConfigsRequest, DescribeConfigsResponse),
    _api("AlterConfigs", AlterConfigsRequest, AlterConfigsResponse),
    _api("SaslAuthenticate", SaslAuthenticateRequest, SaslAuthenticateResponse),
    _api("CreatePartitions", CreatePartitionsRequest, CreatePartitionsResponse),
    _api("IncrementalAlterConfigs", IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    _api("DescribeCluster", DescribeClusterRequest, DescribeClusterResponse),
    _api("DescribeAcls", DescribeAclsRequest, DescribeAclsResponse),
    _api("CreateAcls", CreateAclsRequest, CreateAclsResponse),
    _api("DeleteAcls", DeleteAclsRequest, DeleteAclsResponse),
)}
"""Every declared API by key."""


def api_name(key: int) -> str:
    """``Produce`` for 0; ``api key 99`` for a key not declared here."""
    api = APIS.get(key)
    return api.name if api is not None else f"api key {key}"
