"""samsa 0.3.11 (a real Kafka 0.7 client, Python 2.7) against real brokers: both directions.

samsa writes (PRODUCE and MULTIPRODUCE, magic 0 and magic 1, a gzip set) and this project's
SimpleConsumer reads the payloads and offsets back exactly, stored byte for byte; this
project's producer writes with ``message.format=0.7`` (plain and gzip) and samsa reads it
(FETCH, MULTIFETCH, OFFSETS earliest/latest) with the same payloads and offsets. The
negative: a topic in this project's own format (magic 2) fails in samsa, clearly.
"""
from __future__ import annotations

from ingest.client.producer import Producer
from ingest.client.producer_config import PRODUCER_CONFIG
from tests.harness.py27 import unb64
from tests.harness.wait import wait_until
from tests.kafka07.helpers import ok, raw_log, read_partition, samsa, samsa_messages, topic, v07_message

LATEST, EARLIEST = -1, -2


def _offsets(payloads, header):
    """Offsets of consecutive messages with ``header`` bytes of overhead each, and the end."""
    out, pos = [], 0
    for p in payloads:
        out.append(pos)
        pos += header + len(p)
    return out, pos


def test_what_samsa_produces_is_stored_byte_for_byte_and_read_back(py27, cluster07):
    t, m = topic("s-prod"), topic("s-multi")
    b0 = cluster07.brokers[0]
    v0 = [b"magic-zero-%d" % i for i in range(5)]
    v1 = [b"magic-one-%02d" % i for i in range(4)] + [b""]
    multi = {(t, 0): [b"mp-a1", b"mp-a2"], (m, 0): [b"mp-b1"], (m, 1): [b"mp-c1", b"mp-c2", b"mp-c3"]}
    hp = cluster07.hp(0)
    results = samsa(
        py27,
        {"op": "produce", "topic": t, "partition": 1, "payloads": v0, "magic": 0, **hp},
        {"op": "produce", "topic": m, "partition": 0, "payloads": v1, "magic": 1, **hp},
        {"op": "multiproduce", "magic": 1, **hp,
         "requests": [{"topic": tp, "partition": p, "payloads": v} for (tp, p), v in multi.items()]},
        {"op": "offsets", "topic": t, "partition": 1, "time": LATEST, **hp},
        {"op": "offsets", "topic": t, "partition": 1, "time": EARLIEST, **hp},
        {"op": "fetch", "topic": t, "partition": 1, "offset": 0, **hp},
    )
    assert [ok(r) for r in results[:3]] == [{"sent": 5}, {"sent": 5}, {"sent": 6}]
    v0_offsets, v0_end = _offsets(v0, 9)
    assert results[3] == [v0_end] and results[4] == [0]
    assert samsa_messages(results[5]) == list(zip(v0_offsets, v0))

    # this project reads exactly what samsa wrote, at the same offsets, stored byte for byte
    assert read_partition(b0, t, 1) == list(zip(v0_offsets, v0))
    assert raw_log(b0, t, 1) == b"".join(v07_message(p, 0) for p in v0)
    v1_all = v1 + multi[(m, 0)]
    assert read_partition(b0, m, 0) == list(zip(_offsets(v1_all, 10)[0], v1_all))
    assert raw_log(b0, m, 0) == b"".join(v07_message(p, 1) for p in v1_all)
    assert [p for _, p in read_partition(b0, t, 0)] == multi[(t, 0)]
    assert [p for _, p in read_partition(b0, m, 1)] == multi[(m, 1)]


def test_a_gzip_set_written_the_0_7_way_is_read_by_this_project(py27, cluster07):
    t = topic("s-gzip")
    b0 = cluster07.brokers[0]
    payloads = [b"compressed-%03d" % i for i in range(20)]
    [sent, fetched] = samsa(py27, {"op": "produce_gzip", "topic": t, "partition": 0, "payloads": payloads,
                                   **cluster07.hp(0)},
                            {"op": "fetch", "topic": t, "partition": 0, "offset": 0, **cluster07.hp(0)})
    assert ok(sent) == {"sent": 20}
    [wrapper] = ok(fetched)
    assert (wrapper["magic"], wrapper["compression"], wrapper["valid"]) == (1, 1, True)
    assert [unb64(i["payload"]) for i in wrapper["inner"]] == payloads
    got = read_partition(b0, t, 0)
    # a compressed set is one message on the log: every inner message carries the wrapper's offset
    assert got == [(0, p) for p in payloads]


def _send(config: dict, t: str, batches: list[list[bytes]]) -> list[tuple[int, int]]:
    """Send each batch (one ``send`` call each, keyed so they spread); (broker, partition) of each."""
    where = []
    with Producer(PRODUCER_CONFIG.parse(config)) as producer:
        for i, batch in enumerate(batches):
            producer.send(t, batch, key=f"key-{i}", callback=lambda r: where.append((r.broker_id, r.partition)))
    assert len(where) == len(batches)
    return where


def test_samsa_fetches_and_multifetches_what_this_project_writes_in_0_7_format(py27, cluster07):
    t = topic("i-plain")
    b0 = cluster07.brokers[0]
    batches = [[b"plain-%d-%d" % (i, j) for j in range(3)] for i in range(6)]
    where = _send({"broker.list": f"{b0.address}", "message.format": "0.7"}, t, batches)
    expected = {p: [] for p in (0, 1)}
    for (_, partition), batch in zip(where, batches):
        expected[partition] += batch
    ours = {p: read_partition(b0, t, p) for p in (0, 1)}
    assert {p: [x for _, x in ours[p]] for p in (0, 1)} == expected
    assert raw_log(b0, t, 0) == b"".join(v07_message(p, 1) for p in expected[0])   # 0.7's magic 1, CRC of payload
    ends = {p: _offsets(expected[p], 10)[1] for p in (0, 1)}
    hp = cluster07.hp(0)
    results = samsa(
        py27,
        {"op": "fetch", "topic": t, "partition": 0, "offset": 0, **hp},
        {"op": "multifetch", **hp, "requests": [{"topic": t, "partition": 0, "offset": 0},
                                                {"topic": t, "partition": 1, "offset": 0}]},
        *({"op": "offsets", "topic": t, "partition": p, "time": when, **hp} for p in (0, 1) for when in (EARLIEST, LATEST)),
    )
    assert samsa_messages(results[0]) == ours[0]
    assert [samsa_messages(s) for s in ok(results[1])] == [ours[0], ours[1]]
    assert all(m["magic"] == 1 and m["valid"] for s in results[1] for m in s)
    assert results[2:] == [[0], [ends[0]], [0], [ends[1]]]


def test_samsa_reads_a_gzip_set_this_project_writes_in_0_7_format(py27, cluster07):
    t = topic("i-gzip")
    b0 = cluster07.brokers[0]
    batches = [[b"gz-%d-%02d" % (i, j) for j in range(10)] for i in range(3)]
    where = _send({"broker.list": b0.address, "message.format": "0.7", "compression.codec": "gzip"}, t, batches)
    partitions = sorted({p for _, p in where})
    hp = cluster07.hp(0)
    results = samsa(py27, *({"op": "fetch", "topic": t, "partition": p, "offset": 0, **hp} for p in partitions))
    seen = []
    for partition, result in zip(partitions, results):
        wrappers = ok(result)
        assert all((w["magic"], w["compression"], w["valid"]) == (1, 1, True) for w in wrappers)
        assert all((i["magic"], i["compression"], i["valid"]) == (1, 0, True) for w in wrappers for i in w["inner"])
        # samsa's wrappers sit at the offsets where this project reads the same inner payloads
        ours: dict[int, list[bytes]] = {}
        for offset, payload in read_partition(b0, t, partition):
            ours.setdefault(offset, []).append(payload)
        assert [(w["offset"], [unb64(i["payload"]) for i in w["inner"]]) for w in wrappers] == list(ours.items())
        seen += [[unb64(i["payload"]) for i in w["inner"]] for w in wrappers]
    assert sorted(seen) == sorted(batches)


def test_a_topic_in_this_projects_own_format_fails_clearly_in_samsa(py27, cluster07):
    # the documented negative (docs/kafka07.md): magic 2 is not a 0.7 format; samsa refuses it
    t = topic("i-v2")
    b0 = cluster07.brokers[0]
    where = _send({"broker.list": b0.address}, t, [[b"own-format"]])
    [result] = samsa(py27, {"op": "fetch", "topic": t, "partition": where[0][1], "offset": 0, **cluster07.hp(0)})
    assert result == {"error": "InvalidVersionError: 2 is not a valid version identifier"}


def test_a_refused_produce_does_not_lose_the_clients_next_request(py27, cluster07):
    # 0.7's PRODUCE has no response: the broker logs the refusal (client address, reason) and keeps
    # serving the connection, so samsa's next produce and fetch on it still work
    t = topic("s-refused")
    b0 = cluster07.brokers[0]
    hp = cluster07.hp(0)
    results = samsa(
        py27,
        {"op": "sockname", **hp},
        {"op": "produce_attributes", "topic": t, "partition": 0, "payloads": [b"bad-codec"], "attributes": 3, **hp},
        {"op": "produce", "topic": t, "partition": 0, "payloads": [b"after-refusal"], "magic": 1, **hp},
        {"op": "fetch", "topic": t, "partition": 0, "offset": 0, **hp},
        {"op": "sockname", **hp},
    )
    host, port = ok(results[0])
    assert results[4] == results[0]                       # one connection throughout
    assert samsa_messages(results[3]) == [(0, b"after-refusal")]
    assert read_partition(b0, t, 0) == [(0, b"after-refusal")]

    def lines():
        return [line for line in b0.output().splitlines() if f"client {host}:{port}:" in line]
    # the first refusal on the connection at WARNING, with the reason; a summary once samsa hung up
    wait_until(lambda: len(lines()) == 2, what="the refusal and the connection's summary in the broker log")
    first, summary = lines()
    assert " WARNING " in first and "PRODUCE refused (INVALID_MESSAGE)" in first and t in first
    assert "connection closed after 1 refused produce request(s) (PRODUCE INVALID_MESSAGE: 1)" in summary
