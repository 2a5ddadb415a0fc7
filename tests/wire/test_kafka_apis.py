"""The Kafka APIs the listener serves, declared once for every version: each request and response, with
every field set to something other than its default, reads back as written, and where kafka-python 3
has the version (its classes are generated from Kafka's JSON specs) it reads our bytes and writes the
very same bytes back; a Fetch response's records may be a file region, kept as a piece of its own."""
from __future__ import annotations

import pytest

from ingest.errors import MalformedRequestError
from ingest.wire.kafka import alter_configs as ac
from ingest.wire.kafka import create_partitions as cp
from ingest.wire.kafka import create_topics as ct
from ingest.wire.kafka import delete_topics as dt
from ingest.wire.kafka import describe_cluster as dc
from ingest.wire.kafka import describe_configs as dcf
from ingest.wire.kafka import fetch as f
from ingest.wire.kafka import find_coordinator as fc
from ingest.wire.kafka import incremental_alter_configs as iac
from ingest.wire.kafka import init_producer_id as ip
from ingest.wire.kafka import list_offsets as lo
from ingest.wire.kafka import message as m
from ingest.wire.kafka import metadata as md
from ingest.wire.kafka import offset_for_leader_epoch as oe
from ingest.wire.kafka import produce as pr

kafka_consumer = pytest.importorskip("kafka.protocol.consumer")   # kafka-python >= 3.0 (the test extra)
from kafka.protocol.consumer import (FetchRequest as KFetchRequest, FetchResponse as KFetchResponse,  # noqa: E402
                                     ListOffsetsRequest as KListOffsetsRequest,
                                     ListOffsetsResponse as KListOffsetsResponse,
                                     OffsetForLeaderEpochRequest as KOffsetForLeaderEpochRequest,
                                     OffsetForLeaderEpochResponse as KOffsetForLeaderEpochResponse)
from kafka.protocol.metadata import (FindCoordinatorRequest as KFindCoordinatorRequest,  # noqa: E402
                                     FindCoordinatorResponse as KFindCoordinatorResponse,
                                     MetadataRequest as KMetadataRequest, MetadataResponse as KMetadataResponse)
from kafka.protocol.producer import (InitProducerIdRequest as KInitProducerIdRequest,  # noqa: E402
                                     InitProducerIdResponse as KInitProducerIdResponse,
                                     ProduceRequest as KProduceRequest, ProduceResponse as KProduceResponse)
from kafka.protocol.admin import (AlterConfigsRequest as KAlterConfigsRequest,  # noqa: E402
                                  AlterConfigsResponse as KAlterConfigsResponse,
                                  CreatePartitionsRequest as KCreatePartitionsRequest,
                                  CreatePartitionsResponse as KCreatePartitionsResponse,
                                  CreateTopicsRequest as KCreateTopicsRequest,
                                  CreateTopicsResponse as KCreateTopicsResponse,
                                  DeleteTopicsRequest as KDeleteTopicsRequest,
                                  DeleteTopicsResponse as KDeleteTopicsResponse,
                                  DescribeClusterRequest as KDescribeClusterRequest,
                                  DescribeClusterResponse as KDescribeClusterResponse,
                                  DescribeConfigsRequest as KDescribeConfigsRequest,
                                  DescribeConfigsResponse as KDescribeConfigsResponse,
                                  IncrementalAlterConfigsRequest as KIncrementalAlterConfigsRequest,
                                  IncrementalAlterConfigsResponse as KIncrementalAlterConfigsResponse)

BATCH = bytes(range(70))


def _produce_request(v):
    return pr.ProduceRequest("txn-1" if v >= 3 else None, -1, 1500, (
        pr.TopicProduceData("clicks", (pr.PartitionProduceData(0, BATCH), pr.PartitionProduceData(3, None))),
        pr.TopicProduceData("views", ())))


def _produce_response(v):
    part = pr.PartitionProduceResponse(
        2, 6 if v >= 10 else 0, 123456789, 1700000000000 if v >= 2 else -1, 17 if v >= 5 else -1,
        (pr.BatchIndexAndErrorMessage(0, "bad"), pr.BatchIndexAndErrorMessage(1, None)) if v >= 8 else (),
        "not the leader" if v >= 8 else None, pr.LeaderIdAndEpoch(4, 9) if v >= 10 else None)
    return pr.ProduceResponse((pr.TopicProduceResponse("clicks", (part,)),), 250 if v >= 1 else 0,
                              (pr.NodeEndpoint(4, "b4", 29094, "r1"),) if v >= 10 else ())


def _fetch_request(v):
    part = f.FetchPartition(1, 5 if v >= 9 else -1, 4242, 3 if v >= 12 else -1, 7 if v >= 5 else -1, 65536)
    return f.FetchRequest("cluster-x" if v >= 12 else None, -1, 500, 1, 52428800 if v >= 3 else f.INT32_MAX,
                          1 if v >= 4 else 0, 12 if v >= 7 else 0, 3 if v >= 7 else -1,
                          (f.FetchTopic("clicks", (part,)),),
                          (f.ForgottenTopic("old", (1, 2)),) if v >= 7 else (), "rack-a" if v >= 11 else "")


def _fetch_response(v, records=BATCH):
    tags = v >= 12
    part = f.PartitionData(
        0, 0, 100, 99 if v >= 4 else -1, 5 if v >= 5 else -1,
        f.EpochEndOffset(2, 90) if tags else None, pr.LeaderIdAndEpoch(1, 3) if tags else None,
        f.SnapshotId(80, 1) if tags else None,
        (f.AbortedTransaction(77, 12),) if v >= 4 else None, 2 if v >= 11 else -1, records)
    return f.FetchResponse(10 if v >= 1 else 0, 0, 31 if v >= 7 else 0,
                           (f.FetchableTopicResponse("clicks", (part, f.PartitionData(1, 1, -1))),))


def _list_offsets_request(v):
    return lo.ListOffsetsRequest(-1, 1 if v >= 2 else 0, (lo.ListOffsetsTopic("clicks", (
        lo.ListOffsetsPartition(0, 4 if v >= 4 else -1, lo.MAX_TIMESTAMP if v >= 7 else lo.EARLIEST,
                                5 if v == 0 else 1),)),))


def _list_offsets_response(v):
    part = lo.ListOffsetsPartitionResponse(0, 0, (9, 4, 0) if v == 0 else (), 1700 if v >= 1 else -1,
                                           42 if v >= 1 else -1, 3 if v >= 4 else -1)
    return lo.ListOffsetsResponse(5 if v >= 2 else 0, (lo.ListOffsetsTopicResponse("clicks", (part,)),))


def _metadata_request(v):
    return md.MetadataRequest(None if v >= 1 else (), False if v >= 4 else True, v >= 8, v >= 8) if v % 2 else \
        md.MetadataRequest((md.MetadataRequestTopic("clicks"), md.MetadataRequestTopic("views")),
                           False if v >= 4 else True, v >= 8, v >= 8)


def _metadata_response(v):
    part = md.MetadataResponsePartition(5, 1, 2, 7 if v >= 7 else -1, (2, 3, 1), (2, 3), (1,) if v >= 5 else ())
    topic = md.MetadataResponseTopic(0, "clicks", v >= 1, (part,), 8 if v >= 8 else md.NO_OPERATIONS)
    return md.MetadataResponse(
        40 if v >= 3 else 0, (md.MetadataResponseBroker(2, "127.0.0.1", 29092, "rack-1" if v >= 1 else None),
                              md.MetadataResponseBroker(3, "b3", 29093, None)),
        "cluster-x" if v >= 2 else None, 2 if v >= 1 else -1, (topic,), 16 if v >= 8 else md.NO_OPERATIONS)


def _find_coordinator_request(v):
    return fc.FindCoordinatorRequest("group-1", fc.TRANSACTION if v >= 1 else fc.GROUP)


def _find_coordinator_response(v):
    return fc.FindCoordinatorResponse(3 if v >= 1 else 0, 15, "no coordinator" if v >= 1 else None, 2, "b2", 29092)


def _init_producer_id_request(v):
    return ip.InitProducerIdRequest("t-1" if v % 2 else None, 60000, 1000 if v >= 3 else -1, 3 if v >= 3 else -1)


def _init_producer_id_response(v):
    return ip.InitProducerIdResponse(1, 0, 4294967296007, 2)


def _offset_for_leader_epoch_request(v):
    return oe.OffsetForLeaderEpochRequest(1 if v >= 3 else oe.DEBUGGING, (oe.OffsetForLeaderTopic("clicks", (
        oe.OffsetForLeaderPartition(0, 6 if v >= 2 else -1, 5),)),))


def _offset_for_leader_epoch_response(v):
    return oe.OffsetForLeaderEpochResponse(2 if v >= 2 else 0, (oe.OffsetForLeaderTopicResult("clicks", (
        oe.EpochEndOffsetResult(0, 0, 5 if v >= 1 else -1, 1234),)),))


# (our class, sample builder, our versions, kafka-python's class, the versions kafka-python has)
CASES = [
    (pr.ProduceRequest, _produce_request, range(0, 11), KProduceRequest, range(3, 11)),
    (pr.ProduceResponse, _produce_response, range(0, 11), KProduceResponse, range(3, 11)),
    (f.FetchRequest, _fetch_request, range(0, 13), KFetchRequest, range(4, 13)),
    (f.FetchResponse, _fetch_response, range(0, 13), KFetchResponse, range(4, 13)),
    (lo.ListOffsetsRequest, _list_offsets_request, range(0, 8), KListOffsetsRequest, range(1, 8)),
    (lo.ListOffsetsResponse, _list_offsets_response, range(0, 8), KListOffsetsResponse, range(1, 8)),
    (md.MetadataRequest, _metadata_request, range(0, 10), KMetadataRequest, range(0, 10)),
    (md.MetadataResponse, _metadata_response, range(0, 10), KMetadataResponse, range(0, 10)),
    (fc.FindCoordinatorRequest, _find_coordinator_request, range(0, 3), KFindCoordinatorRequest, range(0, 3)),
    (fc.FindCoordinatorResponse, _find_coordinator_response, range(0, 3), KFindCoordinatorResponse, range(0, 3)),
    (ip.InitProducerIdRequest, _init_producer_id_request, range(0, 5), KInitProducerIdRequest, range(0, 5)),
    (ip.InitProducerIdResponse, _init_producer_id_response, range(0, 5), KInitProducerIdResponse, range(0, 5)),
    (oe.OffsetForLeaderEpochRequest, _offset_for_leader_epoch_request, range(0, 5), KOffsetForLeaderEpochRequest,
     range(2, 5)),
    (oe.OffsetForLeaderEpochResponse, _offset_for_leader_epoch_response, range(0, 5), KOffsetForLeaderEpochResponse,
     range(2, 5)),
]


# --- the admin API

def _create_topics_request(v):
    return ct.CreateTopicsRequest((
        ct.CreatableTopic("clicks", 3, 2, (), (ct.CreatableTopicConfig("retention.ms", "1000"),
                                              ct.CreatableTopicConfig("segment.bytes", None))),
        ct.CreatableTopic("views", -1, -1, (ct.CreatableReplicaAssignment(0, (1, 2)),
                                            ct.CreatableReplicaAssignment(1, (2, 0))), ())),
        30000, v >= 1)


def _create_topics_response(v):
    flex = v >= 5
    configs = (ct.CreatableTopicConfigs("retention.ms", "1000", False, 1, False),
               ct.CreatableTopicConfigs("cleanup.policy", None, True, 5, True)) if flex else None
    return ct.CreateTopicsResponse(20 if v >= 2 else 0, (
        ct.CreatableTopicResult("clicks", 0, None, 40 if flex else 0, 3 if flex else -1, 2 if flex else -1, configs),
        ct.CreatableTopicResult("views", 36, "exists" if v >= 1 else None)))


def _delete_topics_request(v):
    return dt.DeleteTopicsRequest(("clicks", "views"), 15000)


def _delete_topics_response(v):
    return dt.DeleteTopicsResponse(9 if v >= 1 else 0, (dt.DeletableTopicResult("clicks", 0),
                                                        dt.DeletableTopicResult("views", 3, "unknown" if v >= 5 else None)))


def _create_partitions_request(v):
    return cp.CreatePartitionsRequest((cp.CreatePartitionsTopic("clicks", 6, None),
                                       cp.CreatePartitionsTopic("views", 3, (cp.CreatePartitionsAssignment((1, 2)),))),
                                      5000, v % 2 == 1)


def _create_partitions_response(v):
    return cp.CreatePartitionsResponse(3, (cp.CreatePartitionsTopicResult("clicks", 0, None),
                                           cp.CreatePartitionsTopicResult("views", 37, "fewer")))


def _describe_configs_request(v):
    return dcf.DescribeConfigsRequest((dcf.DescribeConfigsResource(dcf.TOPIC, "clicks", None),
                                       dcf.DescribeConfigsResource(dcf.TOPIC, "views", ("retention.ms",))),
                                      v >= 1, v >= 3)


def _describe_configs_response(v):
    entry = dcf.DescribeConfigsResourceResult(
        "retention.ms", "1000", False, v == 0, 1 if v >= 1 else -1, False,
        (dcf.DescribeConfigsSynonym("retention.ms", "1000", 1),
         dcf.DescribeConfigsSynonym("log.retention.hours", "168", 4)) if v >= 1 else (),
        dcf.TYPE_LONG if v >= 3 else 0, "how long" if v >= 3 else None)
    return dcf.DescribeConfigsResponse(4, (dcf.DescribeConfigsResult(0, None, dcf.TOPIC, "clicks", (entry,)),
                                           dcf.DescribeConfigsResult(3, "unknown topic", dcf.TOPIC, "views", ())))


def _alter_configs_request(v):
    return ac.AlterConfigsRequest((ac.AlterConfigsResource(dcf.TOPIC, "clicks", (
        ac.AlterableConfig("retention.ms", "1000"), ac.AlterableConfig("segment.bytes", None))),), True)


def _alter_configs_response(v):
    return ac.AlterConfigsResponse(1, (ac.AlterConfigsResourceResponse(40, "bad", dcf.TOPIC, "clicks"),))


def _incremental_alter_configs_request(v):
    return iac.IncrementalAlterConfigsRequest((iac.IncrementalAlterConfigsResource(dcf.TOPIC, "clicks", (
        iac.IncrementalAlterableConfig("retention.ms", iac.SET, "1000"),
        iac.IncrementalAlterableConfig("segment.bytes", iac.DELETE, None))),), False)


def _incremental_alter_configs_response(v):
    return iac.IncrementalAlterConfigsResponse(2, (ac.AlterConfigsResourceResponse(0, None, dcf.TOPIC, "clicks"),))


def _describe_cluster_request(v):
    return dc.DescribeClusterRequest(True, dc.BROKERS, v >= 2)


def _describe_cluster_response(v):
    return dc.DescribeClusterResponse(0, 0, None, dc.BROKERS, "cluster-x", 2, (
        dc.DescribeClusterBroker(1, "127.0.0.1", 29092, None), dc.DescribeClusterBroker(2, "b2", 29093, "r1")),
        md.NO_OPERATIONS)


ADMIN_CASES = [
    (ct.CreateTopicsRequest, _create_topics_request, range(0, 7), KCreateTopicsRequest, range(2, 7)),
    (ct.CreateTopicsResponse, _create_topics_response, range(0, 7), KCreateTopicsResponse, range(2, 7)),
    # kafka-python's DeleteTopicsRequest cannot encode a decoded instance (its encode override reads a
    # header it never set): compared the other way round below
    (dt.DeleteTopicsRequest, _delete_topics_request, range(0, 6), KDeleteTopicsRequest, range(0)),
    (dt.DeleteTopicsResponse, _delete_topics_response, range(0, 6), KDeleteTopicsResponse, range(1, 6)),
    (cp.CreatePartitionsRequest, _create_partitions_request, range(0, 4), KCreatePartitionsRequest, range(0, 4)),
    (cp.CreatePartitionsResponse, _create_partitions_response, range(0, 4), KCreatePartitionsResponse, range(0, 4)),
    (dcf.DescribeConfigsRequest, _describe_configs_request, range(0, 5), KDescribeConfigsRequest, range(1, 5)),
    (dcf.DescribeConfigsResponse, _describe_configs_response, range(0, 5), KDescribeConfigsResponse, range(1, 5)),
    (ac.AlterConfigsRequest, _alter_configs_request, range(0, 3), KAlterConfigsRequest, range(0, 3)),
    (ac.AlterConfigsResponse, _alter_configs_response, range(0, 3), KAlterConfigsResponse, range(0, 3)),
    (iac.IncrementalAlterConfigsRequest, _incremental_alter_configs_request, range(0, 2),
     KIncrementalAlterConfigsRequest, range(0, 2)),
    (iac.IncrementalAlterConfigsResponse, _incremental_alter_configs_response, range(0, 2),
     KIncrementalAlterConfigsResponse, range(0, 2)),
    (dc.DescribeClusterRequest, _describe_cluster_request, range(0, 3), KDescribeClusterRequest, range(0, 3)),
    (dc.DescribeClusterResponse, _describe_cluster_response, range(0, 3), KDescribeClusterResponse, range(0, 3)),
]
CASES.extend(ADMIN_CASES)


def _each():
    for ours, build, versions, theirs, their_versions in CASES:
        for v in versions:
            yield pytest.param(ours, build, v, theirs if v in their_versions else None, id=f"{ours.__name__}-v{v}")


@pytest.mark.parametrize(("cls", "build", "version", "theirs"), list(_each()))
def test_every_version_reads_back_and_matches_kafka_pythons_bytes(cls, build, version, theirs):
    value = build(version)
    body = value.encode(version)
    assert cls.decode(body, version) == value
    assert b"".join(value.parts(version)) == body
    if theirs is not None:
        assert theirs.decode(body, version=version).encode() == body


@pytest.mark.parametrize(("cls", "build", "version", "theirs"), list(_each()))
def test_a_cut_off_body_is_malformed_naming_the_field(cls, build, version, theirs):
    body = build(version).encode(version)
    for cut in (1, len(body) // 2, len(body) - 1):
        with pytest.raises(Exception) as info:
            cls.decode(body[:cut], version)
        assert type(info.value).__name__ in ("MalformedRequestError", "MalformedResponseError")
        assert cls.__name__ in str(info.value)


def test_versions_outside_the_declared_range_are_refused():
    with pytest.raises(ValueError, match="no version 11"):
        pr.ProduceRequest.codec(11)
    with pytest.raises(ValueError, match="no version 13"):
        f.FetchRequest.codec(13)
    with pytest.raises(ValueError, match="no version 10"):
        md.MetadataRequest.codec(10)


class Region:
    """A stand-in for the broker's file region: sized, not bytes."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


@pytest.mark.parametrize("version", range(0, 13))
def test_a_fetch_response_with_a_file_region_keeps_it_as_its_own_piece_and_the_frame_adds_up(version):
    region = Region(len(BATCH))
    parts = m.response_parts(_fetch_response(version, region), version, 77)
    assert sum(1 for p in parts if p is region) == 1
    assert all(isinstance(p, bytes) for p in parts if p is not region)
    whole = b"".join(BATCH if p is region else p for p in parts)
    expected = m.encode_response(_fetch_response(version), version, 77)
    assert whole == expected
    assert int.from_bytes(whole[:4], "big") == len(whole) - 4


def test_a_request_frame_reads_back_with_its_header_in_every_version():
    for version in range(0, 11):
        frame = m.encode_request(_produce_request(version), version, 99, "client-é")
        header, body = m.decode_request(pr.ProduceRequest, frame[4:])
        assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == \
            (0, version, 99, "client-é")
        assert body == _produce_request(version)
    with pytest.raises(MalformedRequestError):
        m.decode_request(pr.ProduceRequest, m.encode_request(_produce_request(9), 9, 1, "c")[4:-1])



@pytest.mark.parametrize("version", range(1, 6))
def test_kafka_pythons_delete_topics_request_is_our_bytes(version):
    theirs = KDeleteTopicsRequest(topic_names=["clicks", "views"], timeout_ms=15000).encode(version=version)
    assert theirs == _delete_topics_request(version).encode(version)
    assert dt.DeleteTopicsRequest.decode(theirs, version) == _delete_topics_request(version)
