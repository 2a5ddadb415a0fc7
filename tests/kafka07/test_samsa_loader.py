"""What a real Kafka 0.7 client (samsa 0.3.11) writes, this project's loader loads exactly once.

Real events are encoded by this project's EventProducer (into a scratch topic, to get their
exact bytes), then samsa publishes those bytes to the loaded topic in every 0.7 form: magic 0,
magic 1 and a gzip set of magic-1 messages, one partition each. One load on the session
SparkSession commits every event exactly once and records each partition's end offset.
"""
from __future__ import annotations

import collections

from ingest.client.simple_consumer import SimpleConsumer
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.kafka07.helpers import ok, raw_log, read_partition, samsa, topic
from tests.loader.helpers import committed_ids, loader_config, produce


def _event_bytes(cluster07, registry_url: str, scratch: str, n: int) -> tuple[list, list[bytes]]:
    """``n`` real page-view events: their (session, seq) ids and their exact payload bytes."""
    ids = produce(cluster07.brokers[:1], registry_url, scratch, n, chunk=n)
    payloads = []
    with SimpleConsumer(cluster07.brokers[0].host, cluster07.brokers[0].port) as c:
        for p in (0, 1):
            end = c.latest_offset(scratch, p)
            payloads += [m.payload for m in c.iter_range(scratch, p, 0, end)]
    assert len(payloads) == n
    return ids, payloads


def test_the_loader_commits_what_samsa_wrote_in_every_0_7_form_exactly_once(py27, cluster07, registry_url,
                                                                            spark, tmp_path):
    t = topic("s-load")
    ids, payloads = _event_bytes(cluster07, registry_url, topic("scratch"), 30)
    parts = {"magic0": payloads[:10], "magic1": payloads[10:20], "gzip": payloads[20:]}
    hp0, hp1 = cluster07.hp(0), cluster07.hp(1)
    results = samsa(
        py27,
        {"op": "produce", "topic": t, "partition": 0, "payloads": parts["magic0"], "magic": 0, **hp0},
        {"op": "produce", "topic": t, "partition": 1, "payloads": parts["magic1"], "magic": 1, **hp0},
        {"op": "produce_gzip", "topic": t, "partition": 0, "payloads": parts["gzip"], **hp1},
    )
    assert [ok(r) for r in results] == [{"sent": 10}] * 3
    b0, b1 = cluster07.brokers
    # landed before the load runs (a 0.7 PRODUCE has no response: samsa returns before the append)
    assert [p for _, p in read_partition(b0, t, 0, count=10)] == parts["magic0"]
    assert [p for _, p in read_partition(b0, t, 1, count=10)] == parts["magic1"]
    assert [p for _, p in read_partition(b1, t, 0, count=10)] == parts["gzip"]
    dest = tmp_path / "out"
    result = run_load(loader_config(dest, cluster07.brokers, registry_url, topics=t), spark)
    assert result.status == "committed"
    assert committed_ids(dest, t) == collections.Counter(ids)             # every event once
    state = LoaderState.load(open_storage(str(dest)))
    assert sum(f.rows for f in state.files(t)) == 30
    # the committed offsets are the partitions' ends, counted in 0.7's header sizes (9 / 10 bytes)
    gzip_end = read_partition(b1, t, 0)[0][0] + len(raw_log(b1, t, 0))
    assert {(b, p): state.offset(t, b, p) for b, p in ((0, 0), (0, 1), (1, 0))} == {
        (0, 0): sum(9 + len(x) for x in parts["magic0"]),
        (0, 1): sum(10 + len(x) for x in parts["magic1"]),
        (1, 0): gzip_end}
    assert result.record["totals"]["messages"] == 30
