"""The foundation: typed config, the error tree, the clock, the CLI, the real ZooKeeper harness."""
from __future__ import annotations

import pytest

from ingest.cli import main
from ingest.clock import FakeClock
from ingest.config import Bool, Choice, ConfigDef, Int, IntMap, Key, parse_overrides, parse_properties
from ingest.errors import ConfigError, IngestError, OffsetOutOfRangeError
from ingest.wire.errors import ErrorCode, code_for

DEF = ConfigDef("test", (
    Key("log.retention.hours", Int(1, 24 * 365), 168, "hours"),
    Key("enable.zookeeper", Bool(), False, "zk"),
    Key("format", Choice(("avro", "parquet")), "avro", "output format"),
    Key("topic.partition.count.map", IntMap(1, 1024), {}, "per-topic partitions"),
    Key("log.dir", Int(), doc="required"),
))


def test_config_parses_typed_values_and_applies_defaults():
    cfg = DEF.parse({"log.dir": "5", "enable.zookeeper": "true", "topic.partition.count.map": "a:2, b.c:4"})
    assert cfg["log.retention.hours"] == 168
    assert cfg["enable.zookeeper"] is True
    assert cfg["topic.partition.count.map"] == {"a": 2, "b.c": 4}
    assert cfg.is_set("enable.zookeeper") and not cfg.is_set("format")


@pytest.mark.parametrize("key,value,expect", [
    ("log.retention.hours", "0", "allowed is an integer in [1, 8760]"),
    ("log.retention.hours", "ten", "'ten'"),
    ("format", "csv", "one of avro, parquet"),
    ("enable.zookeeper", "maybe", "true or false"),
    ("topic.partition.count.map", "a:0", "ints in [1, 1024]"),
])
def test_invalid_value_names_key_value_and_allowed_range(key, value, expect):
    with pytest.raises(ConfigError) as err:
        DEF.parse({"log.dir": "1", key: value})
    assert key in str(err.value) and expect in str(err.value)


def test_unknown_key_suggests_the_close_one_and_missing_required_fails():
    with pytest.raises(ConfigError, match="did you mean log.retention.hours"):
        DEF.parse({"log.dir": "1", "log.retention.hour": "3"})
    with pytest.raises(ConfigError, match="missing required .* 'log.dir'"):
        DEF.parse({})


def test_config_is_frozen_and_overrides_make_a_copy():
    cfg = DEF.parse({"log.dir": "1"})
    with pytest.raises(AttributeError):
        cfg.x = 1
    other = cfg.with_overrides({"format": "parquet"})
    assert other["format"] == "parquet" and cfg["format"] == "avro" and other["log.dir"] == 1


def test_properties_grammar_and_overrides():
    props = parse_properties("# c\n! c\n a = 1 \nb:two\n\nc=x=y\n")
    assert props == {"a": "1", "b": "two", "c": "x=y"}
    with pytest.raises(ConfigError, match="line|expected key=value"):
        parse_properties("just words here")
    assert parse_overrides(["a=1", "b = x"]) == {"a": "1", "b": "x"}
    with pytest.raises(ConfigError, match="'nope'"):
        parse_overrides(["nope"])


def test_error_tree_errors_go_out_with_their_wire_codes():
    err = OffsetOutOfRangeError("offset 7 not in [0, 5]")
    assert isinstance(err, IngestError) and code_for(err) == ErrorCode.OFFSET_OUT_OF_RANGE == 1


def test_fake_clock_moves_only_when_told():
    clock = FakeClock(1000)
    clock.sleep(2.5)
    assert clock.time_ms() == 3500
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_cli_help_lists_and_exits(capsys):
    with pytest.raises(SystemExit) as ex:
        main(["--help"])
    assert ex.value.code == 0
    assert "COMMAND" in capsys.readouterr().out


def test_real_zookeeper_serves_and_expires_sessions(zk_connect):
    from kazoo.client import KazooClient, KazooState
    from tests.harness.zookeeper import expire_session

    states = []
    c = KazooClient(hosts=zk_connect, timeout=4.0)
    c.add_listener(states.append)
    c.start(timeout=15)
    c.create("/alive", b"1", ephemeral=True)
    expire_session(c, zk_connect)
    c.retry(c.ensure_path, "/after")  # kazoo reconnects with a new session
    assert KazooState.LOST in states
    assert not c.exists("/alive"), "an ephemeral node must vanish with its expired session"
    c.stop(); c.close()
