"""The 0.7 broker-only requests carried by private Kafka api keys: the request holds the 0.7 body, the
response's bytes after the Kafka header are exactly the 0.7 response frame, and only the broker-only types
(and DELETED_SEGMENTS) are carried."""
from __future__ import annotations

import pytest

from ingest.wire import protocol as p
from ingest.wire.frames import SIZE
from ingest.wire.kafka import port07
from ingest.wire.kafka.apis import APIS
from ingest.wire.kafka.message import decode_request, encode_request, response_parts
from ingest.wire.kafka.port07_connection import Port07OverKafka
from ingest.broker.kafka import versions


def test_each_key_carries_its_type_and_is_served_but_never_advertised():
    assert port07.TYPE_OF_KEY == {10001: p.RequestType.REPLICA_FETCH, 10002: p.RequestType.APPEND_AT,
                                  10003: p.RequestType.DELETED_SEGMENTS, 10004: p.RequestType.REPLICA_FETCHES}
    for key in port07.TYPE_OF_KEY:
        assert APIS[key].name.endswith("07") and key in versions.PRIVATE and key not in versions.ADVERTISED


def test_the_request_holds_the_07_body_and_the_response_is_the_07_frame():
    req07 = p.ReplicaFetchRequest(2, 7, 100, p.FetchRequest("orders", 0, 1234, 1 << 20))
    body = req07.encode()[6:]          # after size:int32 type:int16
    frame = encode_request(port07.ReplicaFetch07Request(body), 0, 42, "replica-2")
    header, decoded = decode_request(port07.ReplicaFetch07Request, memoryview(frame)[SIZE.size:])
    assert (header.request_api_key, header.correlation_id, header.client_id) == (10001, 42, "replica-2")
    assert p.ReplicaFetchRequest.decode(decoded.body) == req07
    resp07 = p.ReplicaFetchResponse(0, 10, 0, 20, b"messages")
    frame07 = resp07.encode()
    parts = response_parts(port07.ReplicaFetch07Response(frame07[SIZE.size:]), 0, 42)
    whole = b"".join(parts)
    assert whole[2 * SIZE.size:] == frame07          # size, correlation id, then the 0.7 frame as it is
    assert p.ReplicaFetchResponse.decode(whole[3 * SIZE.size:]) == resp07


def test_a_type_that_is_not_broker_only_is_not_carried():
    conn = Port07OverKafka("127.0.0.1", 9, client_id="t")
    with pytest.raises(ValueError, match="0.7 request type 1 has no Kafka api key"):
        conn.request(p.FetchRequest("orders", 0, 0, 1024).encode(), p.FetchResponse)


class _Region:
    """Stands for a file region: a piece with a length that is not bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


def test_a_many_partition_replica_fetch_is_carried_with_its_file_regions_in_place():
    """REPLICA_FETCHES on key 10004: the 0.7 answer built part by part (each file region its own piece, the
    byte strings around them joined) is the same frame ``encode`` makes, behind the Kafka header."""
    req07 = p.ReplicaFetchesRequest(2, 500, 1, 1 << 20, (p.ReplicaPartitionFetch("orders", 0, 7, 1234, 4096),
                                                        p.ReplicaPartitionFetch("orders", 1, 7, 0, 4096)))
    frame = encode_request(port07.ReplicaFetches07Request(req07.encode()[6:]), 0, 43, "replica-2")
    header, decoded = decode_request(port07.ReplicaFetches07Request, memoryview(frame)[SIZE.size:])
    assert header.request_api_key == 10004 and p.ReplicaFetchesRequest.decode(decoded.body) == req07
    resp07 = p.ReplicaFetchesResponse(0, (p.ReplicaPartitionData("orders", 0, 0, 10, 0, 20, b"messages"),
                                          p.ReplicaPartitionData("orders", 1, 1, 10, 0, 20, b"")))
    region = _Region(b"messages")
    pieces = p.ReplicaFetchesResponse.parts(0, [(p.ReplicaPartitionData("orders", 0, 0, 10, 0, 20, b""), region),
                                                (p.ReplicaPartitionData("orders", 1, 1, 10, 0, 20, b""), b"")])
    assert len(pieces) == 3 and pieces[1] is region   # one write before the region, one after
    frame07 = b"".join(x.data if x is region else x for x in pieces)
    assert frame07 == resp07.encode()
    whole = b"".join(response_parts(port07.ReplicaFetches07Response(frame07[SIZE.size:]), 0, 43))
    assert p.ReplicaFetchesResponse.decode(whole[3 * SIZE.size:]) == resp07
