"""A cause that repeats on the broker's request path writes one log line plus a count, not a line per request.

- A real broker with ZooKeeper auto-creates a replicated topic on the first produce to it
(``default.replication.factor`` 2). ZooKeeper refuses the creation (an ACL on ``/brokers/topics``
without CREATE: the write is not allowed), so every produce to that topic is answered
  LEADER_NOT_AVAILABLE and used to log its own WARNING: a client retrying for an hour wrote a line per
  retry.
- A FETCH inside a damaged range (a byte flipped in a sealed segment while the broker was stopped) is
  answered CORRUPT_RANGE each time; a consumer that keeps asking there wrote a WARNING per fetch (that
  line was rate-limited since, but its count was lost when the broker stopped within the interval).

Now the first is logged, the repeats are counted, and the count reaches the log as one summary line, at
the latest when the broker stops (a clean stop writes every pending count).
"""
from __future__ import annotations

import re

import pytest
from kazoo.security import make_acl

from ingest import znodes
from ingest.wire import protocol as p
from ingest.broker.segment import segment_name
from ingest.wire.errors import ErrorCode
from ingest.records.message_set import encode_message_set
from tests.harness.brokers import BrokerProcess, RawClient, broker_factory  # noqa: F401  (fixture)

TOPIC = "never-created"
REQUESTS = 200


def test_a_refused_auto_creation_is_logged_once_then_counted(broker_factory, zk_connect, zk):  # noqa: F811
    (b,) = broker_factory(n=1, zk_connect=zk_connect, overrides={"default.replication.factor": 2})
    zk.retry(zk.set_acls, znodes.BROKER_TOPICS, [make_acl("world", "anyone", read=True, write=True, delete=True,
                                                            admin=True)])   # no CREATE: topics cannot be made
    with RawClient(b.host, b.port) as c:
        for i in range(REQUESTS):
            resp = p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest(TOPIC, 0, encode_message_set([b"x"]))))
            assert resp.error == ErrorCode.LEADER_NOT_AVAILABLE, (i, resp)
    assert zk.retry(zk.exists, znodes.topic_dir(TOPIC)) is None
    b.stop()
    out = b.output().splitlines()
    said = [line for line in out if "cannot auto-create replicated topic" in line and "more '" not in line]
    assert len(said) == 1, f"{len(said)} lines for {REQUESTS} refused creations: {said[:3]}"
    assert TOPIC in said[0] and "NoAuth" in said[0], said[0]
    counted = [line for line in out if re.search(rf"{REQUESTS - 1} more '[^']+' from {TOPIC} in the last .* \(last: "
                                                 rf"cannot auto-create replicated topic {TOPIC}", line)]
    assert len(counted) == 1, [line for line in out if "more '" in line]


@pytest.mark.processes
def test_fetches_in_a_damaged_range_are_logged_once_then_counted(tmp_path):
    size, per_segment = 100, 20
    b = BrokerProcess(0, tmp_path / "broker", overrides={"num.partitions": 1, "log.file.size": size * per_segment,
                                                          "log.flush.interval": 1})
    b.start()
    try:
        with RawClient(b.host, b.port) as c:
            for i in range(30):
                msg = encode_message_set([b"m%05d-" % i + b"x" * (size - 17)])
                assert p.ProduceAckResponse.decode(c.request(p.ProduceAckRequest("t", 0, msg))).error == 0
        b.stop()
        seg = b.log_dir / "t-0" / segment_name(0)
        data = bytearray(seg.read_bytes())
        data[12 * size + 60] ^= 0x5A                     # message 12's payload, in the sealed first segment
        seg.write_bytes(bytes(data))
        b.start()
        with RawClient(b.host, b.port) as c:
            for _ in range(REQUESTS):
                resp = p.FetchResponse.decode(c.request(p.FetchRequest("t", 0, 12 * size, 1000)))
                assert resp.error == ErrorCode.CORRUPT_RANGE
        b.stop()
    finally:
        b.kill()
    out = b.output().splitlines()
    said = [line for line in out if "answered CORRUPT_RANGE" in line and "more '" not in line]
    assert len(said) == 1, f"{len(said)} lines for {REQUESTS} fetches: {said[:3]}"
    counted = [line for line in out if re.search(rf"{REQUESTS - 1} more 'FETCH CORRUPT_RANGE' from 127.0.0.1 ", line)]
    assert len(counted) == 1, [line for line in out if "more '" in line]
