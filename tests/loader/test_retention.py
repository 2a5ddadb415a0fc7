"""Retention loss: the broker deleted segments before they were loaded (both fail.on.data.loss modes)."""
from __future__ import annotations

import pytest

from ingest.broker.log_config import LOG_CONFIG
from ingest.broker.log_manager import LogManager
from ingest.errors import DataLossError
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState, run_records
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, stop_all
from tests.loader.helpers import committed_ids, loader_config, produce


def _delete_oldest_segments(broker, topic, keep):
    """Retention on the stopped broker: its own ``Log.delete_segments`` (recorded in ``deleted-segments``, as
    its retention thread does) deletes all but the newest ``keep`` segments; returns the new log start."""
    lm = LogManager(LOG_CONFIG.parse({"log.dir": str(broker.log_dir), "log.file.size": 4096}))
    lm.startup()
    try:
        lg = lm.get_log(topic, 0)
        assert len(lg.segment_bases()) > keep, f"{topic}: only {len(lg.segment_bases())} segments"
        cut = lg.segment_bases()[-keep]
        lg.delete_segments(lambda seg: seg.base_offset < cut)
        return cut
    finally:
        lm.shutdown()


@pytest.mark.slow
def test_retention_loss_fails_by_default_and_is_recorded_when_allowed(spark, registry_url, tmp_path_factory, tmp_path):
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=1, log_file_size=4096)
    try:
        dest = tmp_path / "out"
        loaded = produce(brokers, registry_url, "ret-a", 60, chunk=10)
        cfg = loader_config(dest, brokers, registry_url, topics="ret-.*")
        assert run_load(cfg, spark).status == "committed"
        committed = LoaderState.load(open_storage(str(dest))).offset("ret-a", 0, 0)
        later = produce(brokers, registry_url, "ret-a", 120, chunk=10, seed=3)
        fresh = produce(brokers, registry_url, "ret-b", 80, chunk=10, seed=4)  # never loaded before
        brokers[0].stop()
        earliest_a = _delete_oldest_segments(brokers[0], "ret-a", keep=2)
        earliest_b = _delete_oldest_segments(brokers[0], "ret-b", keep=2)
        brokers[0].start()

        with pytest.raises(DataLossError) as err:
            run_load(cfg, spark)
        msg = str(err.value)
        assert f"ret-a broker 0 partition 0: offsets [{committed}, {earliest_a})" in msg and "(retention)" in msg
        assert f"ret-b broker 0 partition 0: offsets [0, {earliest_b})" in msg
        assert "fail.on.data.loss=false" in msg
        st = LoaderState.load(open_storage(str(dest)))
        assert st.seq == 1 and st.offset("ret-a", 0, 0) == committed  # nothing moved
        failed = run_records(st.storage)[-1]
        assert failed["status"] == "failed" and len(failed["lost_ranges"]) == 2

        result = run_load(loader_config(dest, brokers, registry_url, topics="ret-.*", fail_on_data_loss="false"), spark)
        assert result.status == "committed"
        st = LoaderState.load(open_storage(str(dest)))
        lost = {r.topic: r for r in st.lost_ranges()}
        a = lost["ret-a"]
        assert (a.start_offset, a.end_offset, a.bytes) == (committed, earliest_a, earliest_a - committed)
        assert a.after_time_ms is not None and a.before_time_ms is not None and a.after_time_ms <= a.before_time_ms
        assert (lost["ret-b"].start_offset, lost["ret-b"].end_offset) == (0, earliest_b)
        assert lost["ret-b"].after_time_ms is None
        ids = committed_ids(dest)
        assert max(ids.values()) == 1
        survived_a = [i for i in later if i in ids]
        assert set(loaded) <= set(ids) and 0 < len(survived_a) < len(later)
        missing_a = len(later) - len(survived_a)
        assert (a.cause, a.estimated_messages, a.messages_exact) == ("retention", missing_a, True)  # recorded
        survived_b = [i for i in fresh if i in ids]
        assert 0 < len(survived_b) < len(fresh)
        b = lost["ret-b"]
        assert (b.cause, b.estimated_messages, b.messages_exact) == ("retention", len(fresh) - len(survived_b), True)
        assert {r["topic"] for r in run_records(st.storage)[-1]["lost_ranges"]} == {"ret-a", "ret-b"}
    finally:
        stop_all(brokers)


def test_skewed_partition_is_split_at_segment_boundaries_into_many_tasks(spark, registry_url, tmp_path_factory,
                                                                         tmp_path):
    brokers = broker_cluster(tmp_path_factory, n=1, num_partitions=2, log_file_size=4096)
    try:
        hot = produce(brokers, registry_url, "skewed", 200, chunk=20, key_prefix="same-key-")  # keys vary per chunk
        dest = tmp_path / "out"
        result = run_load(loader_config(dest, brokers, registry_url, topics="skewed", max_bytes_per_task=12_000), spark)
        sizes = {p.key: [(t.start, t.end) for t in p.tasks] for p in result.plan.partitions}
        biggest = max(sizes.values(), key=len)
        assert len(biggest) >= 3 and all(e - s <= 12_000 for s, e in biggest)
        assert all(a[1] == b[0] for a, b in zip(biggest, biggest[1:]))  # contiguous at segment starts
        segment_starts = {int(p.stem) for p in brokers[0].log_dir.glob("skewed-*/*.kafka")}
        assert all(s in segment_starts or s == 0 for s, _ in biggest)
        ids = committed_ids(dest, "skewed")
        assert set(ids) == set(hot) and max(ids.values()) == 1
    finally:
        stop_all(brokers)
