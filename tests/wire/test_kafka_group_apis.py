"""The consumer-group APIs, declared once for every version: each request and response, with every field
set to something other than its default, reads back as written, and where kafka-python 3 has the version
(its classes are generated from Kafka's JSON specs) it reads our bytes and writes the very same bytes back."""
from __future__ import annotations

import pytest

from ingest.wire.kafka import describe_groups as dg
from ingest.wire.kafka import heartbeat as hb
from ingest.wire.kafka import join_group as jg
from ingest.wire.kafka import leave_group as lg
from ingest.wire.kafka import list_groups as ls
from ingest.wire.kafka import offset_commit as oc
from ingest.wire.kafka import offset_fetch as of
from ingest.wire.kafka import sync_group as sg

pytest.importorskip("kafka.protocol.consumer")   # kafka-python >= 3.0 (the test extra)
from kafka.protocol import admin as kadmin  # noqa: E402
from kafka.protocol.consumer import group as kgroup  # noqa: E402


def _join_request(v):
    return jg.JoinGroupRequest("g1", 45000, 300000 if v >= 1 else -1, "m-1", "static-1" if v >= 5 else None,
                               "consumer", (jg.JoinGroupRequestProtocol("range", b"\x00\x01meta"),
                                            jg.JoinGroupRequestProtocol("roundrobin", b"")),
                               "rejoin" if v >= 8 else None)


def _join_response(v):
    return jg.JoinGroupResponse(7 if v >= 2 else 0, 0, 3, "consumer" if v >= 7 else None, "range", "m-1",
                                v >= 9, "m-2", (jg.JoinGroupResponseMember("m-1", "s-1" if v >= 5 else None, b"x"),
                                                jg.JoinGroupResponseMember("m-2", None, b"")))


def _sync_request(v):
    return sg.SyncGroupRequest("g1", 3, "m-1", "s-1" if v >= 3 else None, "consumer" if v >= 5 else None,
                               "range" if v >= 5 else None, (sg.SyncGroupRequestAssignment("m-1", b"\x00a"),
                                                             sg.SyncGroupRequestAssignment("m-2", b"")))


def _sync_response(v):
    return sg.SyncGroupResponse(4 if v >= 1 else 0, 27, "consumer" if v >= 5 else None,
                                "range" if v >= 5 else None, b"\x00\x01assigned")


def _heartbeat_request(v):
    return hb.HeartbeatRequest("g1", 3, "m-1", "s-1" if v >= 3 else None)


def _heartbeat_response(v):
    return hb.HeartbeatResponse(2 if v >= 1 else 0, 27)


def _leave_request(v):
    if v < 3:
        return lg.LeaveGroupRequest("g1", "m-1")
    return lg.LeaveGroupRequest("g1", "", (lg.MemberIdentity("m-1", "s-1", "bye" if v >= 5 else None),
                                           lg.MemberIdentity("m-2", None, None)))


def _leave_response(v):
    members = (lg.MemberResponse("m-1", "s-1", 25), lg.MemberResponse("m-2", None, 0)) if v >= 3 else ()
    return lg.LeaveGroupResponse(1 if v >= 1 else 0, 0, members)


def _commit_request(v):
    part = oc.OffsetCommitRequestPartition(2, 1234, 5 if v >= 6 else -1, 1700 if v == 1 else -1,
                                           "meta" if v % 2 else None)
    return oc.OffsetCommitRequest("g1", 3 if v >= 1 else -1, "m-1" if v >= 1 else "", "s-1" if v >= 7 else None,
                                  86400000 if 2 <= v <= 4 else -1, (oc.OffsetCommitRequestTopic("clicks", (part,)),))


def _commit_response(v):
    return oc.OffsetCommitResponse(9 if v >= 3 else 0, (oc.OffsetCommitResponseTopic(
        "clicks", (oc.OffsetCommitResponsePartition(2, 0), oc.OffsetCommitResponsePartition(3, 22))),))


def _fetch_request(v):
    topics = (of.OffsetFetchRequestTopic("clicks", (0, 1, 2)),)
    if v >= 8:
        return of.OffsetFetchRequest("", (), (of.OffsetFetchRequestGroup("g1", "m-1" if v >= 9 else None,
                                                                         4 if v >= 9 else -1, topics),
                                              of.OffsetFetchRequestGroup("g2", None, -1, None)), v >= 7)
    return of.OffsetFetchRequest("g1", None if v >= 2 and v % 2 else topics, (), v >= 7)


def _fetch_response(v):
    parts = (of.OffsetFetchResponsePartition(0, 1234, 5 if v >= 5 else -1, "meta", 0),
             of.OffsetFetchResponsePartition(1, -1, -1, None if v >= 1 else "", 0))
    topics = (of.OffsetFetchResponseTopic("clicks", parts),)
    if v >= 8:
        return of.OffsetFetchResponse(3, (), 0, (of.OffsetFetchResponseGroup("g1", topics, 0),
                                                 of.OffsetFetchResponseGroup("g2", (), 16)))
    return of.OffsetFetchResponse(3 if v >= 3 else 0, topics, 14 if v >= 2 else 0)


def _list_request(v):
    return ls.ListGroupsRequest(("Stable", "Empty") if v >= 4 else (), ("classic",) if v >= 5 else ())


def _list_response(v):
    return ls.ListGroupsResponse(1 if v >= 1 else 0, 0, (
        ls.ListedGroup("g1", "consumer", "Stable" if v >= 4 else "", "classic" if v >= 5 else ""),
        ls.ListedGroup("g2", "", "Empty" if v >= 4 else "", "classic" if v >= 5 else "")))


def _describe_request(v):
    return dg.DescribeGroupsRequest(("g1", "g2"), v >= 3)


def _describe_response(v):
    member = dg.DescribedGroupMember("m-1", "s-1" if v >= 4 else None, "rdkafka", "/127.0.0.1", b"\x00m", b"\x00a")
    return dg.DescribeGroupsResponse(6 if v >= 1 else 0, (
        dg.DescribedGroup(0, "fine" if v >= 6 else None, "g1", "Stable", "consumer", "range", (member,),
                          8 if v >= 3 else dg.NO_OPERATIONS),
        dg.DescribedGroup(16, None, "g2", "Dead", "", "", (), dg.NO_OPERATIONS)))


# (our class, sample builder, our versions, kafka-python's class)
CASES = [
    (jg.JoinGroupRequest, _join_request, range(0, 10), kgroup.JoinGroupRequest),
    (jg.JoinGroupResponse, _join_response, range(0, 10), kgroup.JoinGroupResponse),
    (sg.SyncGroupRequest, _sync_request, range(0, 6), kgroup.SyncGroupRequest),
    (sg.SyncGroupResponse, _sync_response, range(0, 6), kgroup.SyncGroupResponse),
    (hb.HeartbeatRequest, _heartbeat_request, range(0, 5), kgroup.HeartbeatRequest),
    (hb.HeartbeatResponse, _heartbeat_response, range(0, 5), kgroup.HeartbeatResponse),
    (lg.LeaveGroupRequest, _leave_request, range(0, 6), kgroup.LeaveGroupRequest),
    (lg.LeaveGroupResponse, _leave_response, range(0, 6), kgroup.LeaveGroupResponse),
    (oc.OffsetCommitRequest, _commit_request, range(0, 10), kgroup.OffsetCommitRequest),
    (oc.OffsetCommitResponse, _commit_response, range(0, 10), kgroup.OffsetCommitResponse),
    (of.OffsetFetchRequest, _fetch_request, range(0, 10), kgroup.OffsetFetchRequest),
    (of.OffsetFetchResponse, _fetch_response, range(0, 10), kgroup.OffsetFetchResponse),
    (ls.ListGroupsRequest, _list_request, range(0, 6), kadmin.ListGroupsRequest),
    (ls.ListGroupsResponse, _list_response, range(0, 6), kadmin.ListGroupsResponse),
    (dg.DescribeGroupsRequest, _describe_request, range(0, 7), kadmin.DescribeGroupsRequest),
    (dg.DescribeGroupsResponse, _describe_response, range(0, 7), kadmin.DescribeGroupsResponse),
]


def _each():
    for ours, build, versions, theirs in CASES:
        lo, hi = theirs.min_version, theirs.max_version
        for v in versions:
            yield pytest.param(ours, build, v, theirs if lo <= v <= hi else None, id=f"{ours.__name__}-v{v}")


@pytest.mark.parametrize(("cls", "build", "version", "theirs"), list(_each()))
def test_every_version_reads_back_and_matches_kafka_pythons_bytes(cls, build, version, theirs):
    value = build(version)
    body = value.encode(version)
    assert cls.decode(body, version) == value
    if theirs is not None:
        assert theirs.decode(body, version=version).encode() == body


@pytest.mark.parametrize(("cls", "build", "version", "theirs"), list(_each()))
def test_a_cut_off_body_is_malformed_naming_the_message(cls, build, version, theirs):
    body = build(version).encode(version)
    if len(body) < 2:   # ListGroups v0-v4: an empty body, or only its tagged fields
        return
    for cut in (1, len(body) // 2, len(body) - 1):
        with pytest.raises(Exception) as info:
            cls.decode(body[:cut], version)
        assert type(info.value).__name__ in ("MalformedRequestError", "MalformedResponseError")
        assert cls.__name__ in str(info.value)


TOPIC_ID_VERSIONS = {oc.OffsetCommitRequest: {10}, oc.OffsetCommitResponse: {10}, of.OffsetFetchRequest: {10},
                     of.OffsetFetchResponse: {10}}
"""Versions that name topics by topic id (KIP-516): not declared before this product has topic ids."""


def test_every_version_kafka_python_has_is_declared_except_topic_ids():
    for ours, _build, versions, theirs in CASES:
        wanted = set(range(theirs.min_version, theirs.max_version + 1)) - TOPIC_ID_VERSIONS.get(ours, set())
        assert wanted <= set(versions), ours.__name__
