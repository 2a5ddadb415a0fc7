"""Topic names are validated before they reach a path; log config values are validated."""
from __future__ import annotations

import pytest

from ingest.broker.log_config import LOG_CONFIG
from ingest.broker.log_manager import LogManager
from ingest.broker.topics import parse_partition_dir, partition_dir_name, validate_topic
from ingest.errors import ConfigError, InvalidTopicError


@pytest.mark.parametrize("name", ["a", "page-views", "events.v2", "UPPER_lower-09", "..a", "x" * 249, "-", "a..b"])
def test_valid_topic_names(name):
    assert validate_topic(name) == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "x" * 250, "a/b", "../etc", "a b", "tab\t", "new\nline", "ünïcode", "a\x00b", "a:b", "a*", "٣"],
)
def test_invalid_topic_names_are_refused_with_a_clear_message(name, tmp_path, fake_clock):
    with pytest.raises(InvalidTopicError, match=r"allowed is 1-249 characters of \[A-Za-z0-9._-\]"):
        validate_topic(name)
    m = LogManager(LOG_CONFIG.parse({"log.dir": str(tmp_path)}), fake_clock)
    with pytest.raises(InvalidTopicError):
        m.get_or_create_log(name, 0)
    assert list(tmp_path.iterdir()) == []  # nothing was created


def test_non_string_topic_is_refused():
    with pytest.raises(InvalidTopicError, match="must be a string"):
        validate_topic(b"bytes")  # type: ignore[arg-type]


def test_partition_dir_names_round_trip():
    assert partition_dir_name("my-topic", 3) == "my-topic-3"
    assert parse_partition_dir("my-topic-3") == ("my-topic", 3)
    assert parse_partition_dir("my-topic") is None
    assert parse_partition_dir("..-0") is None
    assert parse_partition_dir("a/b-0") is None


@pytest.mark.parametrize(
    "key, value, allowed",
    [
        ("num.partitions", "0", r"an integer in \[1,"),
        ("log.file.size", "10", r"an integer in \[64,"),
        ("log.flush.interval", "-5", r"an integer in \[1,"),
        ("log.retention.hours", "a week", r"an integer"),
        ("log.retention.size", "-2", r"an integer in \[-1,"),
        ("max.message.size", "0", r"an integer in \[1,"),
        ("topic.partition.count.map", "t:0", r"comma-separated name:int pairs"),
        ("topic.flush.intervals.ms", "t", r"comma-separated name:int pairs"),
        ("log.dir", "", r"a non-empty string"),
    ],
)
def test_invalid_config_values_name_key_value_and_range(key, value, allowed):
    with pytest.raises(ConfigError, match=rf"invalid value '{value}' for '{key}': allowed is {allowed}"):
        LOG_CONFIG.parse({key: value})


def test_unknown_key_suggests_the_close_one():
    with pytest.raises(ConfigError, match="did you mean log.retention.hours"):
        LOG_CONFIG.parse({"log.retention.hour": "3"})
