"""Events whose schema has a top-level field named like a column readers take from the path.

Every Hive-style reader (duckdb, polars, pyarrow, Spark) gives a table read from
``<topic>/dt=D/hour=H/`` the columns ``dt`` and ``hour`` from the directory
names, and replaces a data field of that name with the directory's value
without a word; the documented reads of the whole warehouse add ``_topic`` the
same way (docs/reading-the-warehouse.md). The loader refuses such a schema as it
refuses one Parquet cannot hold: the run fails, names the topic, the schema id
and the fields, and commits nothing; the events wait on the brokers. Leaving
the topic out (``topics.blacklist``) lets the rest load. Real brokers, the real
registry, the real loader on Spark.
"""
from __future__ import annotations

import pytest

from ingest.events.event_producer import EventProducer
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import PAGE_VIEW, load_schema
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_list
from tests.loader.helpers import committed_ids, loader_config, produce

T05 = 1_795_323_600_000  # 2026-11-22 05:00 UTC
REFUSED = {"views-with-hour": ["hour"], "views-with-dt-and-topic": ["_topic", "dt"]}
N_REFUSED = 20
CLEAN = "views-beside"


def _produce_refused(brokers, registry_url) -> None:
    with EventProducer({"broker.list": broker_list(brokers), "producer.type": "sync"}, RegistryClient(registry_url),
                       monitoring_enable=False, background=False) as ep:
        for topic, names in REFUSED.items():
            schema = load_schema(PAGE_VIEW)
            schema["fields"] += [{"name": n, "type": "string" if n != "hour" else "int"} for n in names]
            ep.register_topic(topic, schema)
            extra = {n: 17 if n == "hour" else f"{n}-value" for n in names}
            ep.send(topic, [{**v, **extra} for v in EventGenerator(seed=3).batch(N_REFUSED)], key=topic, time_ms=T05)
        ep.flush()


def test_a_schema_with_a_field_named_dt_hour_or__topic_fails_the_run_and_commits_nothing(
        spark, brokers, registry_url, tmp_path):
    _produce_refused(brokers, registry_url)
    ids = produce(brokers, registry_url, CLEAN, 200, time_ms=T05)
    dest = tmp_path / "out"
    for fmt in ("parquet", "avro"):
        with pytest.raises(Exception) as failed:  # noqa: PT011 - Spark's wrapper of the task's SchemaError
            run_load(loader_config(dest / fmt, brokers, registry_url, topics="|".join([CLEAN, *REFUSED]),
                                   format=fmt), spark)
        message = str(failed.value)  # the task's error, as Spark hands it to the driver
        assert "ingest.errors.SchemaError: topic views-with-" in message, message
        assert any(f"topic {topic}, schema id {_schema_id(registry_url, topic)}: top-level field(s) "
                   f"{', '.join(names)} " in message for topic, names in REFUSED.items()), message
        assert "(_topic, dt, hour)" in message and "topics.blacklist" in message, message
        assert not LoaderState.load(open_storage(str(dest / fmt))).files(kind=None)
        assert not any((dest / fmt / topic).exists() for topic in [CLEAN, *REFUSED])

    # Left out, the refused topics wait on the brokers and the rest loads.
    run_load(loader_config(dest / "parquet", brokers, registry_url, topics="|".join([CLEAN, *REFUSED]),
                           topics_blacklist="|".join(REFUSED), format="parquet"), spark)
    assert sorted(committed_ids(dest / "parquet", CLEAN)) == sorted(ids)
    state = LoaderState.load(open_storage(str(dest / "parquet")))
    assert not any(state.files(topic, kind=None) for topic in REFUSED)


def test_only_top_level_fields_count_and_the_example_schemas_have_none():
    from ingest.events.schemas import SCHEMA_DIR
    from ingest.loader.layout import path_columns_in

    nested = {"type": "record", "name": "R", "fields": [
        {"name": "when", "type": {"type": "record", "name": "When", "fields": [{"name": "hour", "type": "int"}]}},
        {"name": "topic", "type": "string"}, {"name": "Hour", "type": "int"}]}
    assert path_columns_in(nested) == []
    names = sorted(p.stem for p in SCHEMA_DIR.glob("*.avsc"))
    assert len(names) == 5 and {n: path_columns_in(load_schema(n)) for n in names} == {n: [] for n in names}


def _schema_id(registry_url: str, topic: str) -> int:
    return RegistryClient(registry_url).latest(f"{topic}-value")[0]
