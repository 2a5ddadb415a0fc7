"""In-process loads on the shared local[2] SparkSession against real brokers and registry."""
from __future__ import annotations

import collections

import pytest

from ingest.loader.job import run_load
from ingest.loader.state import LoaderState, run_records
from ingest.storage import open_storage
from tests.loader.helpers import committed_ids, loader_config, produce


def test_incremental_runs_load_only_new_data_exactly_once(spark, brokers, registry_url, tmp_path):
    topic = "pageviews-inc"
    first = produce(brokers, registry_url, topic, 300)
    cfg = loader_config(tmp_path / "out", brokers, registry_url, topics="pageviews-inc")
    r1 = run_load(cfg, spark)
    assert r1.status == "committed"
    ids = committed_ids(tmp_path / "out", topic)
    assert set(ids) == set(first) and max(ids.values()) == 1
    second = produce(brokers, registry_url, topic, 200, seed=2)
    r2 = run_load(cfg, spark)
    ids = committed_ids(tmp_path / "out", topic)
    assert set(ids) == set(first) | set(second) and max(ids.values()) == 1
    assert r2.record["totals"]["messages"] == 200
    r3 = run_load(cfg, spark)
    assert r3.status == "nothing-to-do"
    state = LoaderState.load(open_storage(str(tmp_path / "out")))
    assert sum(f.rows for f in state.files(topic)) == 500
    assert [r["status"] for r in run_records(state.storage)] == ["committed", "committed", "nothing-to-do"]


HOUR_1 = int(__import__("datetime").datetime(2026, 11, 22, 1, tzinfo=__import__("datetime").timezone.utc).timestamp() * 1000)
HOUR_2 = HOUR_1 + 3600_000


def test_parquet_is_readable_by_spark_with_nested_header_and_dt_hour_columns(spark, brokers, registry_url, tmp_path):
    topic = "pv-parquet"
    ids = produce(brokers, registry_url, topic, 60, time_ms=HOUR_1 + 5_000)
    ids += produce(brokers, registry_url, topic, 40, time_ms=HOUR_2 + 7_000, seed=5)
    dest = tmp_path / "out"
    run_load(loader_config(dest, brokers, registry_url, topics=topic, format="parquet"), spark)
    st = open_storage(str(dest))
    df = spark.read.parquet(st.spark_path(st.join(topic)))
    fields = {f.name: f.dataType for f in df.schema.fields}
    assert {"header", "dt", "hour"} <= set(fields)
    assert [f.name for f in fields["header"].fields] == ["time", "server", "service", "session", "seq"]
    assert fields["header"]["time"].dataType.typeName() == "long"
    rows = df.selectExpr("header.session", "header.seq", "header.time", "hour", "cast(dt as string) dt").collect()
    assert sorted((r.session, r.seq) for r in rows) == sorted(ids)
    assert {(r.dt, r.hour) for r in rows} == {("2026-11-22", 1), ("2026-11-22", 2)}
    assert all((r.time - HOUR_1) // 3600_000 + 1 == r.hour for r in rows)  # bucketed by header.time (UTC)


def test_avro_files_carry_the_writer_schema(spark, brokers, registry_url, tmp_path):
    import fastavro

    from ingest.events.registry_client import RegistryClient

    topic = "pv-avro"
    ids = produce(brokers, registry_url, topic, 50)
    dest = tmp_path / "out"
    run_load(loader_config(dest, brokers, registry_url, topics=topic, format="avro"), spark)
    state = LoaderState.load(open_storage(str(dest)))
    registry = RegistryClient(registry_url)
    seen = []
    for rec in state.files(topic):
        assert rec.path.startswith(f"{topic}/dt=") and rec.path.endswith(".avro")
        with open(state.full_path(rec), "rb") as f:
            reader = fastavro.reader(f)
            names = [fl["name"] for fl in reader.writer_schema["fields"]]
            assert names == [fl["name"] for fl in registry.get_schema(rec.schema_id)["fields"]]
            seen.extend((r["header"]["session"], r["header"]["seq"]) for r in reader)
    assert sorted(seen) == sorted(ids)


def _flip_payload_byte(broker, topic, message_index):
    """Corrupt one payload byte of the n-th message on disk (the CRC no longer matches)."""
    import struct

    for seg in sorted(broker.log_dir.glob(f"{topic}-*/*.kafka")):
        data = bytearray(seg.read_bytes())
        pos, i = 0, 0
        while pos + 4 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos)
            if i == message_index:
                data[pos + 4 + 1 + 1 + 4 + 8] ^= 0xFF
                with open(seg, "r+b") as f:  # in place: the running broker serves the bad bytes
                    f.seek(pos + 18)
                    f.write(bytes([data[pos + 18]]))
                return pos + int(seg.stem)
            pos += 4 + length
            i += 1
    raise AssertionError(f"no message {message_index} of {topic} on broker {broker.broker_id}")


def test_corrupt_and_undecodable_messages_are_quarantined_with_offsets(spark, brokers, registry_url, tmp_path):
    from ingest.client.producer import Producer
    from ingest.errors import QuarantineLimitError
    from ingest.loader.quarantine import read_quarantine
    from tests.harness.brokers import broker_list

    topic = "pv-quarantine"
    ids = produce(brokers, registry_url, topic, 40, chunk=1, key_prefix="same")  # hmm: keys vary per chunk
    with Producer({"broker.list": broker_list(brokers)}) as p:
        p.send(topic, [b"not an avro event", b"\x00\x00\x00\x7f\xffgarbage"], key="garbage")
    holder = next(b for b in brokers if list(b.log_dir.glob(f"{topic}-*/*.kafka")) and any(
        s.stat().st_size > 2000 for s in b.log_dir.glob(f"{topic}-*/*.kafka")))
    bad_offset = _flip_payload_byte(holder, topic, 2)
    dest = tmp_path / "out"
    with pytest.raises(QuarantineLimitError, match="max.quarantine.ratio"):
        run_load(loader_config(dest, brokers, registry_url, topics=topic), spark)
    assert LoaderState.load(open_storage(str(dest))).seq == 0
    run_load(loader_config(dest, brokers, registry_url, topics=topic, max_quarantine_ratio="0.2"), spark)
    state = LoaderState.load(open_storage(str(dest)))
    q = list(read_quarantine(state, topic))
    assert len(q) == 3
    assert bad_offset in {x.offset for x in q}
    assert any("CRC" in x.reason for x in q) and sum("CRC" not in x.reason and ("schema id" in x.reason or "magic" in x.reason) for x in q) == 2
    assert {x.payload for x in q} >= {b"not an avro event", b"\x00\x00\x00\x7f\xffgarbage"}
    loaded = committed_ids(dest, topic)
    assert len(loaded) == len(ids) - 1 and max(loaded.values()) == 1


def test_replay_from_earliest_replaces_instead_of_duplicating(spark, brokers, registry_url, tmp_path):
    topic = "pv-replay"
    ids = produce(brokers, registry_url, topic, 120)
    dest = tmp_path / "out"
    cfg = loader_config(dest, brokers, registry_url, topics=topic)
    first = run_load(cfg, spark)
    before_files = LoaderState.load(open_storage(str(dest))).files(topic)
    before = {f.path: f.run_id for f in before_files}
    again = run_load(cfg, spark, reset_spec="earliest", reset_topics=[topic])
    assert again.status == "committed"
    after = LoaderState.load(open_storage(str(dest)))
    ranges = lambda files: sorted((f.broker_id, f.partition, f.start_offset, f.end_offset, f.hour) for f in files)
    assert ranges(after.files(topic)) == ranges(before_files)  # the same ranges, reloaded
    assert not set(before) & {f.path for f in after.files(topic)}  # replacements get a disambiguating .<n>
    assert len(after.files(topic)) == len(before)
    assert {f.run_id for f in after.files(topic)} == {again.run_id} != {first.run_id}
    loaded = committed_ids(dest, topic)
    assert set(loaded) == set(ids) and max(loaded.values()) == 1
    st = open_storage(str(dest))
    on_disk = sorted(f.path[len(st.root) + 1:] for f in st.walk_files(st.join(topic)))
    assert on_disk == sorted(f.path for f in after.files(topic))


def test_status_shows_offsets_lag_and_retention(spark, brokers, registry_url, tmp_path, capsys):
    from ingest.cli import main

    topic = "pv-status"
    produce(brokers, registry_url, topic, 30)
    dest = tmp_path / "out"
    cfg = loader_config(dest, brokers, registry_url, topics=topic)
    run_load(cfg, spark)
    produce(brokers, registry_url, topic, 20, seed=9)
    conf = tmp_path / "l.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in cfg.as_properties().items()))
    assert main(["loader", "status", "--config", str(conf), "--json"]) == 0
    rows = __import__("json").loads(capsys.readouterr().out)
    lagging = [r for r in rows if r["lag_bytes"]]
    assert lagging and sum(r["lag_messages"] for r in lagging) == pytest.approx(20, abs=4)
    assert all(0 < r["deleted_in_s"] <= 168 * 3600 for r in lagging)
    assert main(["loader", "status", "--config", str(conf)]) == 0
    assert "oldest unloaded data deleted in" in capsys.readouterr().out


def test_webhdfs_destination_through_the_real_hdfs_client(spark, brokers, registry_url, tmp_path):
    from tests.harness.webhdfs import WebHdfsServer

    topic = "pv-hdfs"
    ids = produce(brokers, registry_url, topic, 80)
    with WebHdfsServer(tmp_path / "namenode") as server:
        uri = server.uri("/warehouse/events")
        result = run_load(loader_config(uri, brokers, registry_url, topics=topic, format="parquet"), spark)
        assert result.status == "committed"
        loaded = committed_ids(uri, topic)
        assert set(loaded) == set(ids) and max(loaded.values()) == 1
        state = LoaderState.load(open_storage(uri))
        on_disk = sorted(str(p.relative_to(server.root / "warehouse" / "events"))
                         for p in (server.root / "warehouse" / "events" / topic).rglob("*.parquet"))
        assert on_disk == sorted(f.path for f in state.files(topic))
        assert not list((server.root / "warehouse" / "events" / "_ingest" / "staging").glob("*/*"))


def test_reset_offsets_command_rewinds_and_the_next_load_restores_exactly_once(spark, brokers, registry_url, tmp_path,
                                                                               capsys):
    from ingest.cli import main

    topic = "pv-reset"
    ids = produce(brokers, registry_url, topic, 60, chunk=10)
    dest = tmp_path / "out"
    cfg = loader_config(dest, brokers, registry_url, topics=topic)
    run_load(cfg, spark)
    conf = tmp_path / "l.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in cfg.as_properties().items()))
    assert main(["loader", "reset-offsets", "--config", str(conf), "--to", "earliest", "--topic", topic]) == 0
    assert "files withdrawn" in capsys.readouterr().out
    state = LoaderState.load(open_storage(str(dest)))
    assert state.files(topic) == [] and all(o.offset == 0 for k, o in state.offsets.items() if k[0] == topic)
    assert main(["loader", "reset-offsets", "--config", str(conf), "--to", "earliest", "--topic", "no-such"]) == 2
    run_load(cfg, spark)
    loaded = committed_ids(dest, topic)
    assert set(loaded) == set(ids) and max(loaded.values()) == 1
