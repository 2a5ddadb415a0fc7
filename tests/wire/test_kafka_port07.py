"""The 0.7 broker-only requests carried by private Kafka api keys: the request holds the 0.7 body, the
response's bytes after the Kafka header are exactly the 0.7 response frame, and only the three broker-only
types are carried."""
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
                                  10003: p.RequestType.DELETED_SEGMENTS}
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
