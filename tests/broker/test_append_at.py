"""APPEND_AT (request 15) against real broker processes: conditional append, the query form,
byte-identical storage (compressed wrappers included), replicated leaders and followers, and two
writers racing for the same offset."""
from __future__ import annotations

import threading

import pytest

from ingest.wire import protocol as p
from ingest.records.message import CODEC_GZIP
from ingest.records.message_set import encode_message_set
from ingest.records.message_batch import iter_messages
from ingest.client.append_at import append_at, log_end
from ingest.errors import (InvalidMessageError, InvalidRequiredAcksError, MalformedRequestError,
                           NotLeaderForPartitionError, OffsetMismatchError)
from ingest.wire.connection import BrokerConnection
from tests.harness.brokers import RawClient, broker_factory  # noqa: F401  (pytest fixture)
from tests.harness.replication_topics import create_replicated_topic, metadata_of, wait_for_leaders

PLAIN = encode_message_set([b"alpha", b"beta", b"gamma"])
GZIP = encode_message_set([b"z" * 300, b"y" * 40, b"x"], codec=CODEC_GZIP)


MIRROR_REQUESTS = [p.AppendAtRequest("t", 3, 1 << 40, -1, 10_000, PLAIN), p.AppendAtRequest("t", 0, -1, 1, 0, b""),
                   p.DeletedSegmentsRequest("t-é", 7, 0, 1 << 62)]


@pytest.mark.parametrize("req", MIRROR_REQUESTS, ids=lambda r: type(r).__name__)
def test_requests_15_and_16_round_trip_and_every_truncation_is_malformed(req):
    frame = req.encode()
    assert p.REQUEST_HEADER.unpack_from(frame) == (len(frame) - 4, req.TYPE)
    assert int(req.TYPE) in (15, 16)
    assert p.decode_request(frame) == req
    body = frame[p.REQUEST_HEADER.size:]
    for cut in range(len(body)):
        with pytest.raises(MalformedRequestError):
            type(req).decode(body[:cut])
    with pytest.raises(MalformedRequestError, match="trailing"):
        type(req).decode(body + b"\0")


def test_responses_15_and_16_round_trip_and_accept_an_empty_error_body():
    for resp in (p.ProduceAckResponse(0, 77), p.ProduceAckResponse(28, 1234),
                 p.DeletedSegmentsResponse(0, (p.DeletionRecord(0, 367, 11, 367, 5), p.DeletionRecord(367, 688, -1, 321, 6))),
                 p.DeletedSegmentsResponse(0, ())):
        assert type(resp).decode(resp.encode()[4:]) == resp
    assert p.ProduceAckResponse.decode(p.ErrorResponse(14).encode()[4:]) == p.ProduceAckResponse(14, -1)
    assert p.DeletedSegmentsResponse.decode(p.ErrorResponse(11).encode()[4:]) == p.DeletedSegmentsResponse(11)
    assert p.RESPONSE_CLASSES[p.RequestType.APPEND_AT] is p.ProduceAckResponse


def _fetch_bytes(b, topic: str, partition: int, start: int, end: int) -> bytes:
    """The raw bytes of ``[start, end)`` as the broker serves them (FETCH, segment by segment)."""
    out = b""
    with RawClient(b.host, b.port) as c:
        while start + len(out) < end:
            resp = p.FetchResponse.decode(c.request(p.FetchRequest(topic, partition, start + len(out), 1 << 20)))
            assert resp.error == 0 and resp.message_set, resp
            out += resp.message_set
    return out


def _conn(b) -> BrokerConnection:
    return BrokerConnection(b.host, b.port, timeout_s=15, broker_id=b.broker_id)


def test_append_at_appends_at_the_log_end_refuses_elsewhere_and_stores_the_bytes_verbatim(broker_factory):
    (b,) = broker_factory(n=1, num_partitions=2)
    conn = _conn(b)
    try:
        assert log_end(conn, "m", 1) == 0                       # query of a partition without data
        assert append_at(conn, "m", 1, 0, PLAIN) == len(PLAIN)   # auto-creates, as PRODUCE does
        end = append_at(conn, "m", 1, len(PLAIN), GZIP, acks=1)
        assert end == len(PLAIN) + len(GZIP)
        for wrong in (0, len(PLAIN), end + 1, end - 1, -5):
            with pytest.raises(OffsetMismatchError) as exc:
                append_at(conn, "m", 1, wrong, PLAIN)
            assert exc.value.log_end == end
        # nothing of the refused appends reached the log
        assert log_end(conn, "m", 1) == end
        stored = _fetch_bytes(b, "m", 1, 0, end)
        assert stored == PLAIN + GZIP                           # the gzip wrapper kept byte for byte
        assert [m.payload for m in iter_messages(stored)] == [b"alpha", b"beta", b"gamma", b"z" * 300,
                                                               b"y" * 40, b"x"]
        # an empty set at the log end appends nothing and succeeds
        assert append_at(conn, "m", 1, end, b"") == end
        # the other partition is untouched
        assert log_end(conn, "m", 0) == 0
    finally:
        conn.close()


def test_append_at_validates_like_a_produce_and_appends_nothing_when_refused(broker_factory):
    (b,) = broker_factory(n=1, num_partitions=1)
    conn = _conn(b)
    try:
        assert append_at(conn, "v", 0, 0, PLAIN) == len(PLAIN)
        bad = bytearray(GZIP)
        bad[-1] ^= 0xFF                                          # CRC no longer matches
        with pytest.raises(InvalidMessageError):
            append_at(conn, "v", 0, len(PLAIN), bytes(bad))
        with pytest.raises(InvalidRequiredAcksError):
            append_at(conn, "v", 0, len(PLAIN), PLAIN, acks=0)
        with pytest.raises(MalformedRequestError):               # -1 is the query form: no data allowed
            append_at(conn, "v", 0, -1, PLAIN)
        assert log_end(conn, "v", 0) == len(PLAIN)
        # the raw response: OFFSET_MISMATCH (28) carries the log end in `offset`
        with RawClient(b.host, b.port) as c:
            resp = p.ProduceAckResponse.decode(c.request(p.AppendAtRequest("v", 0, 3, -1, 1000, PLAIN)))
        assert (resp.error, resp.offset) == (28, len(PLAIN))
    finally:
        conn.close()


def test_two_writers_with_the_same_expected_offset_exactly_one_wins_each_round(broker_factory):
    (b,) = broker_factory(n=1, num_partitions=1)
    sets = {w: encode_message_set([b"writer-%d-" % w + b"." * (10 * w)]) for w in (1, 2)}
    conns = {w: _conn(b) for w in (1, 2)}
    rounds = 25
    expected = 0
    winners: list[int] = []
    try:
        for _ in range(rounds):
            barrier = threading.Barrier(2)
            outcome: dict[int, object] = {}

            def write(w: int, at: int) -> None:
                barrier.wait()
                try:
                    outcome[w] = append_at(conns[w], "race", 0, at, sets[w])
                except OffsetMismatchError as exc:
                    outcome[w] = exc

            threads = [threading.Thread(target=write, args=(w, expected)) for w in (1, 2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            won = [w for w in (1, 2) if isinstance(outcome[w], int)]
            assert len(won) == 1, outcome
            (w,) = won
            lost = 3 - w
            assert outcome[w] == expected + len(sets[w])
            assert outcome[lost].log_end == expected + len(sets[w])    # the loser is told the new end
            winners.append(w)
            expected += len(sets[w])
        assert log_end(conns[1], "race", 0) == expected
        assert _fetch_bytes(b, "race", 0, 0, expected) == b"".join(sets[w] for w in winners)
    finally:
        for c in conns.values():
            c.close()


def test_replicated_partition_only_the_leader_appends_with_acks_all_and_one(broker_factory, zk_connect, zk):
    brokers = broker_factory(n=2, zk_connect=zk_connect,
                             overrides={"replica.lag.time.max.ms": 3000, "replica.fetch.wait.max.ms": 100})
    create_replicated_topic(zk, "rep", {0: [0, 1]})
    md = metadata_of(brokers)
    leader_id = wait_for_leaders(md, "rep", 1, isr=2)[0]
    leader = next(x for x in brokers if x.broker_id == leader_id)
    follower = next(x for x in brokers if x.broker_id != leader_id)
    lc, fc = _conn(leader), _conn(follower)
    try:
        assert log_end(lc, "rep", 0) == 0
        end = append_at(lc, "rep", 0, 0, PLAIN, acks=-1)
        assert end == len(PLAIN)
        end = append_at(lc, "rep", 0, end, GZIP, acks=1)
        assert end == len(PLAIN) + len(GZIP)
        with pytest.raises(OffsetMismatchError) as exc:
            append_at(lc, "rep", 0, 0, PLAIN, acks=-1)
        assert exc.value.log_end == end
        with pytest.raises(NotLeaderForPartitionError):
            append_at(fc, "rep", 0, end, PLAIN, acks=-1)
        with pytest.raises(NotLeaderForPartitionError):
            log_end(fc, "rep", 0)
        assert log_end(lc, "rep", 0) == end
        # acks -1 once more: answered only when the follower has it, so the high watermark covers all
        end = append_at(lc, "rep", 0, end, PLAIN, acks=-1)
        assert _fetch_bytes(leader, "rep", 0, 0, end) == PLAIN + GZIP + PLAIN
    finally:
        lc.close()
        fc.close()
