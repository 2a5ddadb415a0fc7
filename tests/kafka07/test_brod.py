"""brod 0.4.3 (a second real Kafka 0.7-era client, Python 2.7) against a real broker.

brod speaks magic 0 only: what it produces is stored byte for byte and read back exactly by
this project and by brod itself, and its OFFSETS requests agree. Its reader predates 0.7's
magic 1 (it reads the attributes byte and then a payload one byte too long): the documented
limitation, measured here on a topic this project wrote with ``message.format=0.7``
(docs/kafka07.md). samsa is the client for magic 1 and compressed sets.
"""
from __future__ import annotations

import pytest

from ingest.client.producer import Producer
from ingest.client.producer_config import PRODUCER_CONFIG
from ingest.errors import ConfigError
from tests.harness.py27 import b64, run_ops, unb64
from tests.kafka07.helpers import ok, raw_log, read_partition, topic, v07_message


def brod(py27, *ops):
    return run_ops(py27, "brod_ops.py", [{**op, "payloads": [b64(p) for p in op["payloads"]]}
                                         if "payloads" in op else op for op in ops])


def test_brod_produces_and_fetches_magic_0_and_this_project_reads_it(py27, cluster07):
    t = topic("brod")
    b0 = cluster07.brokers[0]
    hp = cluster07.hp(0)
    payloads = [b"brod-%d" % i + b"\x00\xff" * i for i in range(6)]
    ends = [sum(9 + len(p) for p in payloads[:i]) for i in range(len(payloads) + 1)]
    results = brod(py27,
                   {"op": "produce", "topic": t, "partition": 1, "payloads": payloads, **hp},
                   {"op": "fetch", "topic": t, "partition": 1, "offset": 0, **hp},
                   {"op": "offsets", "topic": t, "partition": 1, "time": -1, **hp},
                   {"op": "offsets", "topic": t, "partition": 1, "time": -2, **hp})
    assert ok(results[0]) == {"sent": 6}
    assert [(o, unb64(p)) for o, p in ok(results[1])] == list(zip(ends, payloads))
    assert results[2:] == [[ends[-1]], [0]]
    assert read_partition(b0, t, 1) == list(zip(ends, payloads))
    assert raw_log(b0, t, 1) == b"".join(v07_message(p, 0) for p in payloads)


def _produce(b0, t: str, fmt: str) -> int:
    where = []
    with Producer(PRODUCER_CONFIG.parse({"broker.list": b0.address, "message.format": fmt})) as producer:
        producer.send(t, [b"first", b"second"], callback=lambda r: where.append(r.partition))
    return where[0]


def test_brod_misreads_magic_1_and_magic_2_documented_limits_of_brod(py27, cluster07):
    b0 = cluster07.brokers[0]
    t1, t2 = topic("brod-m1"), topic("brod-m2")
    p1, p2 = _produce(b0, t1, "0.7"), _produce(b0, t2, "ingest")
    m1, m2 = brod(py27, {"op": "fetch", "topic": t1, "partition": p1, "offset": 0, **cluster07.hp(0)},
                  {"op": "fetch", "topic": t2, "partition": p2, "offset": 0, **cluster07.hp(0)})
    # magic 1: brod skips the attributes byte but still takes length-5 bytes of payload, so one byte
    # of the next message's length field (0x00) rides along and the rest of the set no longer parses
    assert [(o, unb64(p)) for o, p in ok(m1)] == [(0, b"first\x00")]
    # magic 2: brod does not skip the attributes byte, so each payload starts with the CRC's last
    # byte; brod only logs "Unexpected magic byte: 2" and returns the wrong bytes
    raw = raw_log(b0, t2, p2)          # [length 4][magic][attributes][crc 4][payload]: byte 9 ends the CRC
    assert [(o, unb64(p)) for o, p in ok(m2)] == [(0, raw[9:10] + b"first"), (15, raw[15 + 9:15 + 10] + b"second")]


def test_brod_reads_what_this_project_writes_with_message_format_0_6(py27, cluster07):
    b0 = cluster07.brokers[0]
    t = topic("brod-m0")
    p = _produce(b0, t, "0.6")
    assert raw_log(b0, t, p) == v07_message(b"first", 0) + v07_message(b"second", 0)
    (m0,) = brod(py27, {"op": "fetch", "topic": t, "partition": p, "offset": 0, **cluster07.hp(0)})
    assert [(o, unb64(x)) for o, x in ok(m0)] == [(0, b"first"), (14, b"second")]


def test_message_format_0_6_refuses_compression_naming_both_keys():
    with pytest.raises(ConfigError, match=r"message.format=0.6 .*compression.codec=gzip"):
        Producer(PRODUCER_CONFIG.parse({"broker.list": "0:127.0.0.1:1", "message.format": "0.6",
                                        "compression.codec": "gzip"}))
