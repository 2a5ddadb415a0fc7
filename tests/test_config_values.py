"""Config values that cannot work are refused when they are given, not met at run time.

- Numbers are written with ASCII digits: Python's ``int()`` and ``float()`` also read other
  scripts' digits (``num.partitions=４``, a full-width four, was read as 4), ``_`` separators and
  ``nan``/``inf``. Every integer and number key of every component is checked here, through its
  ``ConfigDef``, and one through a real ``ingest broker start``.
- ``min.insync.replicas`` above the replication factor makes every acks=-1 write fail: a broker
  refuses to start with it above ``default.replication.factor`` (> 1), refuses to auto-create a
  replicated topic whose replication factor (capped by the live brokers) is below it, and
  ``ingest topics create --config`` refuses such a topic before writing anything.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest import znodes
from ingest.client.producer import Producer
from ingest.config import Float, Int, IntMap
from ingest.config_docs import discover
from ingest.errors import ConfigError, TopicCreationRefusedError
from tests.harness.brokers import BrokerProcess, BrokerStartError, broker_factory  # noqa: F401 (fixture)
from tests.harness.wait import wait_until

REPO = Path(__file__).resolve().parents[1]

FULL_WIDTH = str.maketrans("0123456789.-+", "０１２３４５６７８９．－＋")
ARABIC_INDIC = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")


def _run(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "ingest.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _numeric_keys():
    for _, definition in discover():
        for key in definition.keys:
            if isinstance(key.type, (Int, IntMap, Float)):
                yield pytest.param(definition, key, id=f"{definition.name}:{key.name}")


def _valid_text(kind) -> str:
    """A value inside the key's range, written in ASCII."""
    lo = kind.lo if kind.lo is not None else 0
    if isinstance(kind, Float):
        return repr(float(lo))
    return str(max(lo, min(10, kind.hi if kind.hi is not None else 10)))


def _valid_required_text(key) -> str:
    """A value a required non-numeric key takes: a name, or a host:port list (``bootstrap.servers``)."""
    for text in ("x", "127.0.0.1:9092"):
        try:
            key.type.parse(text)
            return text
        except (ConfigError, ValueError):  # a key type raises ValueError; its ConfigDef names the key
            continue
    raise AssertionError(f"no sample value for the required key {key.name}")


@pytest.mark.parametrize("definition,key", list(_numeric_keys()))
def test_every_numeric_key_takes_ascii_digits_only(definition, key):
    base = {k.name: _valid_required_text(k) for k in definition.keys
            if k.required and not isinstance(k.type, (Int, IntMap, Float))}
    base.update({k.name: _valid_text(k.type if not isinstance(k.type, IntMap) else Int())
                 for k in definition.keys if k.required and isinstance(k.type, (Int, Float))})
    kind = key.type
    text = _valid_text(Int(kind.lo, kind.hi) if isinstance(kind, IntMap) else kind)
    wrap = (lambda v: f"t:{v}") if isinstance(kind, IntMap) else (lambda v: v)
    definition.parse({**base, key.name: wrap(text)})                       # the ASCII spelling is taken
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    bad = [text.translate(FULL_WIDTH), text.translate(ARABIC_INDIC), f"{sign}0_{digits}"]
    if isinstance(kind, Float):
        bad += ["nan", "inf"]
    for value in bad:
        with pytest.raises(ConfigError) as err:
            definition.parse({**base, key.name: wrap(value)})
        message = str(err.value)
        assert key.name in message and repr(wrap(value)) in message and "allowed is" in message, message


def test_the_error_names_the_non_ascii_character():
    from ingest.broker.server_config import SERVER_CONFIG

    with pytest.raises(ConfigError) as err:
        SERVER_CONFIG.parse({"brokerid": "0", "num.partitions": "４"})
    assert "U+FF14 FULLWIDTH DIGIT FOUR" in str(err.value) and "ASCII digits" in str(err.value), str(err.value)


def _start_refused(tmp_path: Path, **overrides) -> str:
    """Start a real broker with these keys; it must exit 2 during start-up. Returns its one error line."""
    broker = BrokerProcess(0, tmp_path / "b", overrides=overrides)
    try:
        with pytest.raises(BrokerStartError):
            broker.start(timeout=30)
        assert broker.proc.returncode == 2, broker.output()
        lines = [line for line in broker.output().splitlines() if "error" in line.lower()]
        assert len(lines) == 1, broker.output()
        return lines[0]
    finally:
        broker.kill()


@pytest.mark.processes
def test_a_broker_refuses_full_width_digits_at_start(tmp_path):
    line = _start_refused(tmp_path, **{"num.partitions": "４"})
    assert "num.partitions" in line and "'４'" in line and "allowed is an integer in [1, 100000]" in line, line


@pytest.mark.processes
@pytest.mark.parametrize("overrides", [
    {"default.replication.factor": 3, "min.insync.replicas": 100},
    {"default.replication.factor": 2, "min.insync.replicas": 3},
])
def test_a_broker_refuses_min_insync_above_the_default_replication_factor(tmp_path, overrides):
    line = _start_refused(tmp_path, **{k: str(v) for k, v in overrides.items()})
    assert f"min.insync.replicas={overrides['min.insync.replicas']}" in line, line
    assert f"default.replication.factor={overrides['default.replication.factor']}" in line, line


@pytest.mark.processes
def test_min_insync_above_one_is_fine_while_auto_created_topics_are_unreplicated(tmp_path):
    """default.replication.factor=1 creates Kafka 0.7 topics (acks=-1 acts as acks=1 there), so a higher
    min.insync.replicas only governs topics created with more replicas: the broker starts."""
    broker = BrokerProcess(0, tmp_path / "b", overrides={"min.insync.replicas": "2"})
    try:
        broker.start(timeout=30)
    finally:
        broker.stop()


def test_auto_creation_refuses_a_replication_factor_below_min_insync(broker_factory, zk_connect, zk):
    """One live broker, default.replication.factor=2, min.insync.replicas=2: an auto-created topic would get
    replication factor 1 (capped by the live brokers) and could never take an acks=-1 write."""
    [broker] = broker_factory(n=1, zk_connect=zk_connect, overrides={"default.replication.factor": 2,
                                                                     "min.insync.replicas": 2})
    wait_until(lambda: zk.exists(znodes.broker_path(0)), what="the broker registered")
    with Producer({"zk.connect": zk_connect, "topic.format.default": "0.7", "request.required.acks": -1, "message.send.max.retries": 2,
                   "retry.backoff.ms": 50}) as producer:
        with pytest.raises(TopicCreationRefusedError):
            producer.send("never-writable", [b"x"])
    assert zk.exists(znodes.topic_dir("never-writable")) is None        # nothing was created
    said = [line for line in broker.output().splitlines() if "cannot auto-create topic 'never-writable'" in line]
    assert said and "replication factor 1" in said[0] and "min.insync.replicas=2" in said[0], broker.output()


def test_broker_list_and_replica_assignments_take_ascii_digits_only():
    from ingest.broker.assignment import parse_manual
    from ingest.client.discovery import parse_broker_list
    from ingest.errors import ReplicationConfigError

    assert parse_broker_list("0:127.0.0.1:9092")[0].port == 9092 and parse_manual("1:2,2:1") == {0: [1, 2], 1: [2, 1]}
    for text in ("０:127.0.0.1:9092", "0:127.0.0.1:９０９２", "0:127.0.0.1:9_092"):
        with pytest.raises(ConfigError, match="is not id:host:port"):
            parse_broker_list(text)
    with pytest.raises(ReplicationConfigError, match="is not broker ids"):
        parse_manual("１:2")


def test_topics_create_refuses_a_replication_factor_below_min_insync(broker_factory, zk_connect, zk, tmp_path):
    broker_factory(n=2, zk_connect=zk_connect)
    wait_until(lambda: len(zk.get_children(znodes.BROKER_IDS)) == 2, what="2 brokers registered")
    props = tmp_path / "server.properties"
    props.write_text(f"brokerid=0\nenable.zookeeper=true\nzk.connect={zk_connect}\nmin.insync.replicas=2\n")
    for args in (("--partitions", "2", "--replication-factor", "1"), ("--replica-assignment", "0,1")):
        r = _run("topics", "create", "--config", str(props), "--topic", "too-few", *args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr)
        assert "min.insync.replicas=2" in lines[0] and "replication factor 1" in lines[0], lines[0]
        assert zk.exists(znodes.topic_dir("too-few")) is None
    r = _run("topics", "create", "--config", str(props), "--topic", "enough", "--partitions", "1",
             "--replication-factor", "2")
    assert r.returncode == 0, r.stderr
