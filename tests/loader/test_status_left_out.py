"""``ingest loader status`` lists what it cannot reach, in its table and in ``--json``, as a run record does.

Two real broker processes each hold partition 0 of a topic; a real load commits both partitions'
offsets; then one broker is SIGKILLed. ``loader status`` used to log a WARNING and print only the
partitions of the broker that answered, so the table (and the monitoring that reads ``--json``) lost
the dead broker's partitions without a word. Now each committed partition that cannot be reached is a
row with its committed offset and the reason (``left_out``), its broker and partition named: with a
static ``brokers`` list, and with ZooKeeper both while the dead broker is still registered and after
its session ended (it is then no longer listed anywhere).
"""
from __future__ import annotations

import json

from ingest import znodes
from ingest.cli import main
from ingest.loader.job import run_load
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_cluster, stop_all
from tests.harness.wait import wait_until
from tests.loader.helpers import loader_config, produce

TOPIC = "pv-status-down"


def _status_json(conf, capsys) -> dict:
    assert main(["loader", "status", "--config", str(conf), "--json"]) == 0
    return {(r["topic"], r["broker_id"], r["partition"]): r for r in json.loads(capsys.readouterr().out)}


def test_status_lists_the_partitions_of_a_broker_that_does_not_answer(spark, registry_url, tmp_path_factory,
                                                                       tmp_path, capsys):
    brokers = broker_cluster(tmp_path_factory, n=2, num_partitions=1)
    try:
        produce(brokers, registry_url, TOPIC, 40, chunk=5)
        cfg = loader_config(tmp_path / "out", brokers, registry_url, topics=TOPIC)
        assert run_load(cfg, spark).status == "committed"
        committed = {k: o.offset for k, o in LoaderState.load(open_storage(str(tmp_path / "out"))).offsets.items()}
        assert {k[1] for k in committed} == {0, 1}, committed   # both brokers hold some of the topic
        conf = tmp_path / "l.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in cfg.as_properties().items()))
        dead, alive = brokers[1], brokers[0]
        dead.kill()

        by_key = _status_json(conf, capsys)
        up, down = by_key[(TOPIC, alive.broker_id, 0)], by_key[(TOPIC, dead.broker_id, 0)]
        assert up["left_out"] is None and up["latest"] is not None
        assert down["committed"] == committed[(TOPIC, dead.broker_id, 0)]
        assert "did not answer METADATA" in down["left_out"] and f"127.0.0.1:{dead.port}" in down["broker"], down
        assert (down["latest"], down["lag_bytes"], down["at_risk"]) == (None, None, False), down

        assert main(["loader", "status", "--config", str(conf)]) == 0
        text = capsys.readouterr().out
        line = next(ln for ln in text.splitlines() if ln.startswith(TOPIC) and "LEFT OUT" in ln)
        assert line.split()[1:3] == [str(dead.broker_id), "0"], text
        assert "did not answer METADATA" in line, text
    finally:
        stop_all(brokers)


def test_with_zookeeper_before_and_after_the_dead_brokers_session_ends(spark, registry_url, zk_connect, zk,
                                                                       tmp_path_factory, tmp_path, capsys):
    brokers = broker_cluster(tmp_path_factory, n=2, zk_connect=zk_connect, num_partitions=1,
                             overrides={"zk.sessiontimeout.ms": 10_000})
    try:
        produce(brokers, registry_url, TOPIC, 40, chunk=5)
        cfg = loader_config(tmp_path / "out", [], registry_url, topics=TOPIC, zk_connect=zk_connect)  # ZooKeeper only
        assert run_load(cfg, spark).status == "committed"
        committed = LoaderState.load(open_storage(str(tmp_path / "out"))).offsets
        conf = tmp_path / "l.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in cfg.as_properties().items()))
        dead = brokers[1]
        key = (TOPIC, dead.broker_id, 0)
        assert key in committed
        dead.kill()

        down = _status_json(conf, capsys)[key]            # still registered: it does not answer
        assert "did not answer METADATA" in down["left_out"] and down["committed"] == committed[key].offset, down
        wait_until(lambda: zk.retry(zk.exists, znodes.broker_path(dead.broker_id)) is None, 60,
                   "the dead broker's registration to expire")
        gone = _status_json(conf, capsys)[key]            # no longer registered: still listed
        assert gone["left_out"] == "no broker that answered serves it" and gone["committed"] == committed[key].offset
    finally:
        stop_all(brokers)
