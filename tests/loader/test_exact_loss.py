"""Retention gaps counted exactly: real broker retention, the broker's deleted-segment records, the loader's tally.

One broker, three single-partition topics, two producer sessions writing to each
(interleaved), kept open across the first load so the same sessions sit on both
sides of the gap. Load, produce more, let the broker's own retention delete
segments, load again with fail.on.data.loss=false. Retention keeps 12 KB per
partition, checked every 200 ms; what is produced before the first load is
smaller, so nothing is deleted before it whatever the timing:

- after the first load, each partition's tally equals the broker's messages from the start of the
  segment holding the committed offset (an undecodable message in ``ex-plain``, quarantined, counts);
- ``ex-plain`` (uncompressed) and ``ex-gzip`` (gzip wrappers of 10 messages): the
  committed offset lies inside a deleted segment (the straddling case); the lost
  range's count equals the produced-but-never-loaded messages exactly,
  ``messages_exact`` is true, and the session bounds are the seqs next to the gap;
- ``ex-norec``: the broker's records file is removed before the second load: the
  broker no longer vouches that retention deleted the gap, so it is cause
  ``missing_segments``, counted by the size estimate, ``messages_exact`` false
  (bounds still exact).
"""
from __future__ import annotations

import collections
import time

import pytest

from ingest.client.simple_consumer import SimpleConsumer
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, broker_list, stop_all
from tests.loader.helpers import committed_ids, loader_config

TOPICS = {"ex-plain": "none", "ex-gzip": "gzip", "ex-norec": "none"}
# (messages per send, sends per session before the first load, after it): a send is one message set
# (one gzip wrapper), ~250 bytes a message; segments of 4 KB hold ~8 plain sets of 2 or ~3 wrappers of 10,
# so the committed offset lies inside a segment that retention deletes later
SENDS = {"ex-plain": (2, 7, 30), "ex-gzip": (10, 4, 20), "ex-norec": (2, 7, 30)}
SEGMENT = 4096
KEEP = 3 * SEGMENT


def _produce(producers, gens, topic, rounds, chunk):
    """``rounds`` sends of ``chunk`` events by each producer session, interleaved; their (session, seq) ids."""
    ids = []
    for r in range(rounds):
        for ep, gen in zip(producers[topic], gens):
            headers = ep.send(topic, gen.batch(chunk), key=f"k{r}")
            ids.extend((h["session"], h["seq"]) for h in headers)
    for ep in producers[topic]:
        ep.flush()
    return ids


def _messages_between(consumer, topic, start, end):
    return sum(1 for _ in consumer.iter_range(topic, 0, start, end))


def _segment_starts(broker, topic):
    return sorted(int(p.stem) for p in (broker.log_dir / f"{topic}-0").glob("*.kafka"))


@pytest.mark.slow
def test_retention_gap_count_is_exact_with_session_bounds(spark, registry_url, tmp_path_factory, tmp_path):
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1, log_file_size=SEGMENT, log_retention_size=KEEP,
                             log_retention_check_interval_ms=200)
    broker = brokers[0]
    dest = tmp_path / "out"
    cfg = loader_config(dest, brokers, registry_url, topics="ex-.*", fail_on_data_loss="false",
                        max_quarantine_ratio="0.1")
    try:
        committed, first, later = _load_then_produce_more(spark, cfg, broker, brokers, registry_url)
        earliest = _wait_for_retention(broker, committed)
        (broker.log_dir / "ex-norec-0" / "deleted-segments").unlink()  # the broker forgets what it deleted
        with SimpleConsumer(broker.host, broker.port) as c:
            deleted = {t: c.deleted_segments(t, 0, 0, earliest[t]) for t in TOPICS}
        for t in ("ex-plain", "ex-gzip"):  # the committed offset lies inside a deleted segment
            assert any(d.start < committed[t].offset < d.end for d in deleted[t]), (t, committed[t], deleted[t])
        assert deleted["ex-norec"] == []

        assert run_load(cfg, spark).status == "committed"
        st = LoaderState.load(open_storage(str(dest)))
        lost = {r.topic: r for r in st.lost_ranges()}
        assert set(lost) == set(TOPICS)
        for t in TOPICS:
            r = lost[t]
            ids = committed_ids(dest, t)
            assert max(ids.values()) == 1 and set(first[t]) <= set(ids)
            assert len(st.files(t, kind="quarantine")) == (t == "ex-plain")
            produced = first[t] + later[t]
            missing = [i for i in produced if i not in ids]
            assert (r.start_offset, r.end_offset) == (committed[t].offset, earliest[t])
            survivors = [i for i in later[t] if i in ids]
            assert missing and survivors, t
            expected_bounds = tuple(sorted(
                (s, max(q for ss, q in first[t] if ss == s), min(q for ss, q in survivors if ss == s))
                for s in {s for s, _ in produced}))
            assert r.session_bounds == expected_bounds, t
            for s, after, before in r.session_bounds:  # every missing message lies strictly inside its bounds
                assert all(after < q < before for ss, q in missing if ss == s)
            if t == "ex-norec":
                assert (r.cause, r.messages_exact) == ("missing_segments", False)
                assert abs(r.estimated_messages - len(missing)) <= max(3, len(missing) // 4)  # sizes only
            else:
                assert (r.cause, r.estimated_messages, r.messages_exact) == ("retention", len(missing), True), t
        counts = collections.Counter(r.messages_exact for r in lost.values())
        assert counts == {True: 2, False: 1}
    finally:
        stop_all(brokers)


def _load_then_produce_more(spark, cfg, broker, brokers, registry_url):
    """Two producer sessions per topic: produce, load (checking the tally it committed), produce more.
    Returns (committed offset records, ids produced before the load, ids produced after)."""
    from ingest.events.event_producer import EventProducer
    from ingest.events.loadgen import EventGenerator
    from ingest.events.registry_client import RegistryClient

    gens = [EventGenerator(seed=11), EventGenerator(seed=12)]
    producers = {t: [] for t in TOPICS}
    try:
        for t, codec in TOPICS.items():
            for _ in gens:
                producers[t].append(EventProducer({"broker.list": broker_list(brokers), "compression.codec": codec},
                                                  RegistryClient(registry_url), monitoring_enable=False,
                                                  background=False))
        first = {t: _produce(producers, gens, t, SENDS[t][1], SENDS[t][0]) for t in TOPICS}
        from ingest.client.producer import Producer

        with Producer({"broker.list": broker_list(brokers)}) as raw:  # consumed, quarantined: in the tally
            raw.send("ex-plain", [b"not an event"])
        for t in TOPICS:
            assert sum(p.stat().st_size for p in (broker.log_dir / f"{t}-0").glob("*.kafka")) < KEEP
        assert run_load(cfg, spark).status == "committed"
        st = LoaderState.load(open_storage(cfg["destination"]))
        committed = {t: st.offsets[(t, 0, 0)] for t in TOPICS}
        with SimpleConsumer(broker.host, broker.port) as c:
            for t in TOPICS:  # the tally: the messages loaded from the segment holding the committed offset
                seg = max(s for s in _segment_starts(broker, t) if s <= committed[t].offset)
                assert committed[t].tally == (seg, _messages_between(c, t, seg, committed[t].offset)), t
        later = {t: _produce(producers, gens, t, SENDS[t][2], SENDS[t][0]) for t in TOPICS}
    finally:
        for eps in producers.values():
            for ep in eps:
                ep.close()
    return committed, first, later


def _wait_for_retention(broker, committed, timeout_s=240.0):
    """Earliest offset per topic once retention is done: every partition moved past its committed offset
    and no further pass would delete anything (the oldest segment is larger than the excess over KEEP)."""
    deadline = time.monotonic() + timeout_s
    with SimpleConsumer(broker.host, broker.port) as c:
        while True:
            earliest = {t: c.earliest_offset(t, 0) for t in committed}
            sizes = {t: [p.stat().st_size for p in sorted((broker.log_dir / f"{t}-0").glob("*.kafka"))]
                     for t in committed}
            done = all(sum(sizes[t]) - KEEP < sizes[t][0] for t in committed)
            if done and all(earliest[t] > committed[t].offset for t in committed):
                return earliest
            assert time.monotonic() < deadline, f"retention did not finish within {timeout_s} s: {earliest}"
            time.sleep(0.5)
