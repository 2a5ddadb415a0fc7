"""A load that quarantines too many messages fails naming the first reasons: topic, partition, offset, why.

A real load (Spark, real brokers, the real registry) of a topic where a producer wrote undecodable
messages next to valid events. Above ``max.quarantine.ratio`` the run fails and commits nothing; its
error used to say only how many messages could not be decoded, although docs/loader.md promised the
first reasons, so an operator had to raise the ratio and load the bad messages to learn what they were.
The reasons it names now are the ones a load that accepts them commits to the quarantine files.
"""
from __future__ import annotations

import pytest

from ingest.client.producer import Producer
from ingest.errors import QuarantineLimitError
from ingest.loader.job import run_load
from ingest.loader.quarantine import read_quarantine
from ingest.loader.state import LoaderState
from ingest.storage import open_storage
from tests.harness.brokers import broker_list
from tests.loader.helpers import loader_config, produce

TOPIC = "pv-bad-producer"
GARBAGE = [b"not an avro event", b"\x00\x00\x00\x7f\xffgarbage", b"\x07", b"{\"json\": true}"]


def test_the_quarantine_limit_error_names_the_first_reasons(spark, brokers, registry_url, tmp_path):
    produce(brokers, registry_url, TOPIC, 30)
    sent = []
    with Producer({"broker.list": broker_list(brokers)}) as p:
        for i, payload in enumerate(GARBAGE):
            p.send(TOPIC, [payload], key=f"bad{i}", callback=sent.append)
    assert all(r.error is None for r in sent)
    dest = tmp_path / "out"

    with pytest.raises(QuarantineLimitError) as failed:
        run_load(loader_config(dest, brokers, registry_url, topics=TOPIC), spark)
    message = str(failed.value)
    assert LoaderState.load(open_storage(str(dest))).seq == 0       # nothing committed

    run_load(loader_config(dest, brokers, registry_url, topics=TOPIC, max_quarantine_ratio="1.0"), spark)
    quarantined = sorted(read_quarantine(LoaderState.load(open_storage(str(dest))), TOPIC),
                         key=lambda q: (q.broker_id, q.partition, q.offset))
    assert {(q.broker_id, q.partition, q.offset) for q in quarantined} == \
        {(r.broker_id, r.partition, r.first_offset) for r in sent}
    assert "; first reasons: " in message, message
    named = message.split("; first reasons: ", 1)[1]
    first = quarantined[:3]
    for q in first:
        assert f"{q.topic} b{q.broker_id} p{q.partition} offset {q.offset}: {q.reason}" in named, (q, message)
    assert named.count(f"{TOPIC} b") == 3, message                 # the first three, not all four
