"""``ingest mirror`` configuration and command-line errors: one line naming the bad key/value, exit 2."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest import config_docs
from ingest.errors import ConfigError, MirrorConfigError
from ingest.mirror.config import MIRROR_CONFIG, SourceSpec, load_mirror_config, mirror_id, parse_mirror_config, source_specs
from ingest.mirror.discovery import TopicFilter

ROOT = Path(__file__).resolve().parents[2]

GOOD = {
    "sources": "dc1,dc2",
    "source.dc1.zk.connect": "127.0.0.1:2181/dc1",
    "source.dc2.broker.list": "0:127.0.0.1:9092,1:127.0.0.1:9093",
    "target.zk.connect": "127.0.0.1:2181/offline",
}


def test_the_example_config_parses_and_names_both_kinds_of_source():
    config = load_mirror_config(ROOT / "conf" / "mirror.properties")
    assert source_specs(config) == [
        SourceSpec("dc1", zk_connect="zk-dc1.example:2181/ingest"),
        SourceSpec("dc2", broker_list="0:broker1.dc2.example:9092,1:broker2.dc2.example:9092")]
    assert config["mirror.group"] == "mirror" and config["target.acks"] == -1
    assert config["target.replication.factor"] == 2 and config["blacklist"] == "test-.*|tmp-.*"
    assert config["target.partitions.reserve"] == -1


def test_defaults_of_the_brief():
    c = parse_mirror_config(GOOD)
    assert [c[k] for k in ("mirror.group", "whitelist", "blacklist", "target.acks", "target.replication.factor",
                           "fetch.size", "checkpoint.interval.ms", "topic.refresh.ms", "monitoring.topic",
                           "lost.topic", "monitoring.window.ms", "monitoring.interval.ms",
                           "status.log.interval.ms")] == [
        "mirror", ".*", "", -1, 1, 1048576, 1000, 5000, "audit-mirror", "audit-mirror-lost", 600000, 60000, 30000]
    assert mirror_id(c) == f"{os.uname().nodename}-{os.getpid()}"
    assert mirror_id(parse_mirror_config({**GOOD, "mirror.id": "m-a"})) == "m-a"
    assert all(k.doc for k in MIRROR_CONFIG.keys)


BAD = [
    ({"sources": ""}, MirrorConfigError, ["sources is empty"]),
    ({"sources": "dc1,dc1"}, MirrorConfigError, ["names 'dc1' twice"]),
    ({"sources": "dc1,dc2,dc3"}, MirrorConfigError, ["source 'dc3' has no source.dc3.zk.connect",
                                                     "source.dc3.broker.list"]),
    ({"source.dc9.zk.connect": "x:1"}, MirrorConfigError, ["source.dc9.zk.connect", "'dc9' is not in sources (dc1,dc2)"]),
    ({"source.dc1.fetch.size": "5"}, MirrorConfigError, ["source.dc1.fetch.size", "unknown source setting",
                                                         "source.<name>.zk.connect, source.<name>.broker.list"]),
    ({"source.dc1.broker.list": "0:h:1"}, MirrorConfigError, ["sets both source.dc1.zk.connect",
                                                              "source.dc1.broker.list"]),
    ({"source.dc2.broker.list": "0:h"}, MirrorConfigError, ["source.dc2.broker.list", "'0:h'", "id:host:port"]),
    ({"whitelist": "clicks["}, ConfigError, ["'clicks['", "'whitelist'", "regular expression"]),
    ({"target.acks": "0"}, MirrorConfigError, ["target.acks 0 is not allowed", "-1", "1 (the leader)"]),
    ({"target.acks": "2"}, ConfigError, ["'2'", "'target.acks'", "[-1, 1]"]),
    ({"lost.topic": "audit-mirror"}, MirrorConfigError, ["monitoring.topic and lost.topic", "'audit-mirror'"]),
    ({"mirror.group": "a/b"}, ConfigError, ["'a/b'", "'mirror.group'"]),
    ({"whitelsit": "x"}, ConfigError, ["unknown mirror config key 'whitelsit'", "whitelist"]),
]


@pytest.mark.parametrize("change,cls,words", BAD)
def test_a_bad_config_names_the_key_the_value_and_what_is_allowed(change, cls, words):
    with pytest.raises(cls) as err:
        parse_mirror_config({**GOOD, **change})
    assert all(w in str(err.value) for w in words), str(err.value)


def test_missing_target_is_named():
    raw = {k: v for k, v in GOOD.items() if k != "target.zk.connect"}
    with pytest.raises(ConfigError, match="missing required mirror config key 'target.zk.connect'"):
        parse_mirror_config(raw)


def test_topic_filter_is_whole_name_and_never_takes_the_mirrors_own_topics():
    f = TopicFilter("clicks.*|views", "clicks-test", excluded={"audit-mirror", "audit-mirror-lost"})
    assert [t for t in ["clicks", "clicks-2", "clicks-test", "views", "views-2", "xclicks"] if f.accepts(t)] == [
        "clicks", "clicks-2", "views"]
    everything = TopicFilter.from_config(parse_mirror_config(GOOD))
    assert [t for t in ["audit", "audit-mirror", "audit-mirror-lost", "x"] if everything.accepts(t)] == ["audit", "x"]
    with pytest.raises(MirrorConfigError, match=r"blacklist '\(' is not a valid regular expression"):
        TopicFilter(".*", "(")


def _cli(*args: str, tmp_path: Path, props: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = list(args)
    if props is not None:
        path = tmp_path / "mirror.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        argv += ["--config", str(path)]
    return subprocess.run([sys.executable, "-m", "ingest.cli", *argv], capture_output=True, text=True,
                          env=env, cwd=str(ROOT), timeout=60)


CLI_ERRORS = [
    ({**GOOD, "whitelist": "a(b"}, ["ingest mirror: error:", "'a(b'", "whitelist", "regular expression"]),
    ({**GOOD, "source.dc7.broker.list": "0:h:1"}, ["ingest mirror: error:", "source 'dc7' is not in sources"]),
    ({k: v for k, v in GOOD.items() if k != "target.zk.connect"},
     ["ingest mirror: error:", "missing required mirror config key 'target.zk.connect'"]),
]


@pytest.mark.processes
@pytest.mark.parametrize("props,words", CLI_ERRORS)
@pytest.mark.parametrize("command", [("mirror",), ("mirror", "status")])
def test_cli_errors_are_one_line_and_exit_2(props, words, command, tmp_path):
    r = _cli(*command, tmp_path=tmp_path, props=props)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr)
    assert all(w in lines[0] for w in words), lines[0]
    assert r.stdout == ""


@pytest.mark.processes
def test_cli_usage_errors_exit_2(tmp_path):
    r = _cli("mirror", tmp_path=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == \
        "ingest mirror: error: the following arguments are required: --config"
    r = _cli("mirror", "--config", str(tmp_path / "missing.properties"), tmp_path=tmp_path)
    assert r.returncode == 2 and "cannot read config file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.processes
def test_unreachable_target_zookeeper_is_one_line_exit_2(tmp_path):
    from tests.harness.net import free_port

    port = free_port()
    r = _cli("mirror", tmp_path=tmp_path, props={**GOOD, "target.zk.connect": f"127.0.0.1:{port}",
                                                  "zk.connectiontimeout.ms": "500"})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert lines[-1].startswith("ingest mirror: error: cannot connect to ZooKeeper at") and f"{port}" in lines[-1]


def test_the_config_table_in_docs_is_generated_from_the_code():
    text = (ROOT / "docs" / "mirroring.md").read_text(encoding="utf-8")
    assert config_docs.stale(ROOT / "docs" / "mirroring.md") == []
    assert config_docs.render("mirror") in text and MIRROR_CONFIG.markdown_table() in text
