"""Consumer groups as an operator sees them: list, describe with lag, reset committed offsets.

The ``kafka-consumer-groups`` equivalents, over the Kafka protocol (no ZooKeeper needed):

- **list**: ListGroups asked of every broker (each lists the groups it coordinates);
- **describe**: FindCoordinator, then DescribeGroups (state, members, each member's assignment, decoded
  from the consumer protocol's layout) and OffsetFetch (committed offsets), and per partition the log end
  (ListOffsets latest): lag = log end - committed offset (no commit: lag unknown);
- **reset**: new committed offsets (earliest, latest, a given offset, or shifted by N) written with
  OffsetCommit as a non-member (generation -1), which the coordinator accepts only while the group has
  no members, as Kafka's tool requires.

The consumer protocol's assignment (Kafka's ``ConsumerProtocolAssignment``)::

    version:int16 topics:[topic:string partitions:[int32]] user_data:nullable bytes   (v1+: the same layout)
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from ingest.client.kafka.fetcher import KafkaFetcher
from ingest.errors import BrokerUnavailableError, IngestError
from ingest.wire.errors import KafkaErrorCode
from ingest.wire.kafka.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from ingest.wire.kafka.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from ingest.wire.kafka.list_groups import ListGroupsRequest, ListGroupsResponse
from ingest.wire.kafka.offset_commit import (OffsetCommitRequest, OffsetCommitRequestPartition,
                                             OffsetCommitRequestTopic, OffsetCommitResponse)
from ingest.wire.kafka.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from ingest.wire.schema import Field, Record, Schema, Struct, declare
from ingest.wire.types import BYTES, INT32, STRING, Array

_VERSION = struct.Struct(">h")


@declare
class _TopicPartitions(Record):
    SCHEMA = Schema(Field("topic", STRING), Field("partitions", Array(INT32)))


@declare
class _Assignment(Struct):
    SCHEMA = Schema(Field("topics", Array(_TopicPartitions)), Field("user_data", BYTES, nullable=True, default=None))


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a consumer-protocol assignment; [] for an empty or foreign one."""
    if len(data) < _VERSION.size + 4:
        return []
    try:
        a = _Assignment.decode_from(data, _VERSION.size, len(data))[0]
    except IngestError:
        return []
    return sorted((t.topic, p) for t in a.topics for p in t.partitions)


class PartitionLag(NamedTuple):
    topic: str
    partition: int
    committed: int | None
    log_end: int
    lag: int | None
    member: str | None


class GroupDescription(NamedTuple):
    group: str
    coordinator: int
    state: str
    protocol: str
    members: list[tuple[str, str, str, list[tuple[str, int]]]]   # member id, client id, host, assignment
    partitions: list[PartitionLag]


class GroupsAdmin:
    """Group operations against the cluster at ``bootstrap`` (``host:port,...``)."""

    def __init__(self, bootstrap: str) -> None:
        self.fetcher = KafkaFetcher({"bootstrap.servers": bootstrap})
        self.cluster = self.fetcher.cluster

    def close(self) -> None:
        self.fetcher.close()

    def __enter__(self) -> "GroupsAdmin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _brokers(self) -> list[int]:
        self.fetcher.cluster.topic_names(self.fetcher.clock.monotonic() + self.fetcher.timeout_s)
        return sorted(self.cluster.nodes)

    def _call(self, node: int, request, api_key: int, lo: int, hi: int):
        conn = self.cluster.connection(node)
        return conn.call(request, conn.version(api_key, lo, hi))

    def list(self) -> list[tuple[str, str, int]]:
        """Every group: ``(group id, state, coordinator)``, by group id."""
        out = []
        for node in self._brokers():
            resp: ListGroupsResponse = self._call(node, ListGroupsRequest(), 16, 0, 5)
            if resp.error_code:
                raise BrokerUnavailableError(f"broker {node} answered ListGroups with "
                                             f"{KafkaErrorCode(resp.error_code).name}")
            out.extend((g.group_id, g.group_state or "?", node) for g in resp.groups)
        return sorted(out)

    def coordinator(self, group: str) -> int:
        """The broker id coordinating ``group``.

        Raises:
            BrokerUnavailableError: no coordinator now (the error named).
        """
        for node in self._brokers():
            resp: FindCoordinatorResponse = self._call(node, FindCoordinatorRequest(group), 10, 0, 2)
            if resp.error_code == 0:
                return resp.node_id
            raise BrokerUnavailableError(f"no coordinator for group {group!r} now: "
                                         f"{KafkaErrorCode(resp.error_code).name}; retry")
        raise BrokerUnavailableError("the cluster's metadata names no broker")

    def committed(self, group: str, node: int | None = None) -> dict[tuple[str, int], int]:
        node = self.coordinator(group) if node is None else node
        resp: OffsetFetchResponse = self._call(node, OffsetFetchRequest(group, None), 9, 2, 7)
        if resp.error_code:
            raise BrokerUnavailableError(f"OffsetFetch of group {group!r}: {KafkaErrorCode(resp.error_code).name}")
        return {(t.name, p.partition_index): p.committed_offset for t in resp.topics for p in t.partitions
                if p.committed_offset >= 0}

    def describe(self, group: str) -> GroupDescription:
        """The group's state, members with their assignments, and per partition its committed offset and lag."""
        node = self.coordinator(group)
        resp: DescribeGroupsResponse = self._call(node, DescribeGroupsRequest((group,)), 15, 0, 5)
        g = resp.groups[0]
        if g.error_code:
            raise BrokerUnavailableError(f"DescribeGroups of {group!r}: {KafkaErrorCode(g.error_code).name}")
        members = [(m.member_id, m.client_id, m.client_host, decode_assignment(bytes(m.member_assignment)))
                   for m in g.members]
        owner = {tp: mid for mid, _c, _h, tps in members for tp in tps}
        committed = self.committed(group, node)
        rows = []
        for topic, partition in sorted(set(committed) | set(owner)):
            end = self.fetcher.latest(topic, partition)
            c = committed.get((topic, partition))
            rows.append(PartitionLag(topic, partition, c, end, None if c is None else max(0, end - c),
                                     owner.get((topic, partition))))
        return GroupDescription(group, node, g.group_state, g.protocol_data, members, rows)

    def reset(self, group: str, topic: str, *, to: str, value: int | None = None,
              execute: bool = False) -> list[tuple[int, int | None, int]]:
        """New committed offsets of every partition of ``topic``: ``to`` is ``earliest``, ``latest``,
        ``offset`` (``value``) or ``shift`` (current + ``value``), each clamped to the partition's range.
        Returns ``(partition, old, new)``; writes them only when ``execute``.

        Raises:
            IngestError: the group has members (stop them first), or the coordinator refused.
        """
        node = self.coordinator(group)
        committed = self.committed(group, node)
        plan = []
        for p in range(self.fetcher.partitions_for(topic)):
            lo, hi = self.fetcher.earliest(topic, p), self.fetcher.latest(topic, p)
            old = committed.get((topic, p))
            new = {"earliest": lo, "latest": hi, "offset": value,
                   "shift": (old if old is not None else lo) + (value or 0)}[to]
            plan.append((p, old, min(max(new, lo), hi)))
        if execute:
            req = OffsetCommitRequest(group, -1, "", None, -1, (OffsetCommitRequestTopic(
                topic, tuple(OffsetCommitRequestPartition(p, new, -1, -1, "") for p, _o, new in plan)),))
            resp: OffsetCommitResponse = self._call(node, req, 8, 2, 7)
            codes = {p.error_code for t in resp.topics for p in t.partitions}
            if codes - {0}:
                code = KafkaErrorCode(max(codes))
                hint = " (the group has members: stop them first)" if code in (
                    KafkaErrorCode.UNKNOWN_MEMBER_ID, KafkaErrorCode.ILLEGAL_GENERATION,
                    KafkaErrorCode.REBALANCE_IN_PROGRESS) else ""
                raise BrokerUnavailableError(f"reset of group {group!r} refused: {code.name}{hint}")
        return plan
