"""TierEventPublisher against a real broker and the real registry: what is published reads back,
decoded by EventDeserializer, field for field; a target that does not answer makes it raise."""
from __future__ import annotations

import pytest

from ingest.client.simple_consumer import SimpleConsumer
from ingest.clock import FakeClock
from ingest.errors import IngestError
from ingest.events.header_reader import HeaderReader
from ingest.events.loadgen import EventGenerator
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import CLICK, load_schema
from ingest.events.serde import EventDeserializer, EventSerializer
from ingest.lost_ranges import TIER_SOURCE, LostRange, parse_bounds
from ingest.mirror.tier_counts import PartitionCounter, unit_session
from ingest.mirror.tier_events import TierEventPublisher, lost_range_record
from ingest.records.message_set import encode_message_set
from tests.events.readback import read_topic
from tests.harness.brokers import broker_factory, broker_list  # noqa: F401  (pytest fixture)

W = 60_000
T0 = 1_700_000_000_000 - 1_700_000_000_000 % W


def producer_config(brokers, **kw):
    return {"broker.list": broker_list(brokers), "request.required.acks": -1, "socket.timeout.ms": 5000,
            "retry.backoff.ms": 10, **kw}


def test_counts_and_lost_range_read_back_exactly(broker_factory, registry_url):
    brokers = broker_factory(n=1, num_partitions=1)
    registry = RegistryClient(registry_url)
    ser = EventSerializer(registry, "clicks-value", load_schema(CLICK))
    gen = EventGenerator(CLICK, seed=5)
    clock = FakeClock(T0)
    counter = PartitionCounter(session=unit_session("g1", "dc2", "clicks", 4, 0), topic="clicks", source="dc2",
                               mirror_server="mirror-a", window_ms=W, interval_ms=10_000,
                               header_reader=HeaderReader(registry), clock=clock)
    payloads = [ser.serialize({**gen.make(), "header": {"time": t, "server": "web", "service": "fe",
                                                       "session": "s", "seq": i}})
                for i, t in enumerate([T0 + 1, T0 + 2, T0 + W + 3])]
    assert counter.count(encode_message_set(payloads)) == 3
    clock.set(T0 + 2 * W + 60_000)
    events = counter.due_events()
    assert [(e["window_start_ms"], e["count_acked"]) for e in events] == [(T0, 2), (T0 + W, 1)]
    gap = LostRange("clicks", 4, 0, 1000, 5000, 4000, 37, T0 - 5, None, detected_at_ms=T0 + 99, messages_exact=True,
                    session_bounds=parse_bounds([("s2", None, 9), {"session": "s1", "after_seq": 4}]),
                    tier=TIER_SOURCE, source_cluster="dc2")
    lost = lost_range_record(gap, group="g1", mirror_server="mirror-a", target_partition=2, target_offset=777)
    assert lost == {
        "header": {"time": T0 + 99, "server": "mirror-a", "service": "mirror:dc2",
                   "session": "mirror:g1:dc2:clicks:4-0", "seq": 1000},
        "event_id": lost["event_id"], "mirror_group": "g1", "source_cluster": "dc2", "topic": "clicks",
        "broker_id": 4, "partition": 0, "start_offset": 1000, "end_offset": 5000, "bytes": 4000, "messages": 37,
        "messages_exact": True, "cause": "retention", "after_time_ms": T0 - 5, "before_time_ms": None,
        "session_bounds": [{"session": "s1", "after_seq": 4, "before_seq": None},
                           {"session": "s2", "after_seq": None, "before_seq": 9}],
        "target_partition": 2, "target_offset": 777, "detected_at_ms": T0 + 99,
    }
    again = lost_range_record(LostRange("clicks", 4, 0, 1000, 5000, 4000, 37, None, None, detected_at_ms=T0 + 5000,
                                        messages_exact=True, tier=TIER_SOURCE, source_cluster="dc2"),
                              group="g1", mirror_server="mirror-b")
    assert again["event_id"] == lost["event_id"]  # the same gap, re-detected by another owner

    with TierEventPublisher(producer_config(brokers), registry, monitoring_topic="audit-mirror",
                            lost_topic="audit-mirror-lost") as pub:
        pub.publish_counts(events)
        pub.publish_counts(events[:1])            # a re-publish after a lost ack: same event twice
        pub.publish_lost_range(lost)
        assert pub.published == {"counts": 3, "lost_ranges": 1}
    mon, failures = read_topic(brokers, "audit-mirror", registry)
    assert failures == []
    assert mon == [events[0], events[1], events[0]]
    lost_back, failures = read_topic(brokers, "audit-mirror-lost", registry)
    assert (lost_back, failures) == ([lost], [])
    # the registry holds the producers' monitoring schema, unchanged, under audit-mirror-value
    de = EventDeserializer(registry)
    with SimpleConsumer(brokers[0].host, brokers[0].port, timeout_s=10) as c:
        (info,) = c.metadata(["audit-mirror"]).topics["audit-mirror"]
        first = next(iter(c.iter_range("audit-mirror", info.partition, info.earliest, info.latest)))
    _, schema = de.writer_schema(first.payload)
    assert schema == registry.latest("audit-mirror-value")[1] == RegistryClient(registry_url).latest("audit-mirror-value")[1]
    assert schema["name"] == "MonitoringEvent" and schema["namespace"] == "ingest.events.audit"


def test_a_target_that_does_not_answer_raises(broker_factory, registry_url):
    brokers = broker_factory(n=1, num_partitions=1)
    registry = RegistryClient(registry_url)
    pub = TierEventPublisher(producer_config(brokers, **{"message.send.max.retries": 0}), registry)
    record = lost_range_record(LostRange("t", 0, 0, 0, 10, 10, 1, None, None, detected_at_ms=1, tier=TIER_SOURCE,
                                         source_cluster="dc1"), group="g", mirror_server="m")
    brokers[0].stop()
    try:
        with pytest.raises(IngestError):
            pub.publish_lost_range(record)
        assert pub.published == {"counts": 0, "lost_ranges": 0}
    finally:
        pub.close()


def test_one_publisher_shared_by_copier_threads(broker_factory, registry_url):
    import threading
    brokers = broker_factory(n=1, num_partitions=2)
    registry = RegistryClient(registry_url)
    clock = FakeClock(T0)
    batches = []
    for unit in range(4):  # four units, each with 10 heartbeat events of its own session
        c = PartitionCounter(session=unit_session("g", "dc1", "t", 0, unit), topic="t", source="dc1",
                             mirror_server="m", window_ms=W, interval_ms=W, header_reader=HeaderReader(registry),
                             clock=clock)
        batches.append(c)
    clock.set(T0 + 10 * W + 60_000)
    events = [c.due_events() for c in batches]
    assert [len(e) for e in events] == [10, 10, 10, 10]
    errors = []
    with TierEventPublisher(producer_config(brokers), registry) as pub:
        def publish(evs):
            try:
                for e in evs:
                    pub.publish_counts([e])
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=publish, args=(e,)) for e in events]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and pub.published == {"counts": 40, "lost_ranges": 0}
    mon, failures = read_topic(brokers, "audit-mirror", registry)
    assert failures == []
    assert sorted(mon, key=lambda e: (e["producer_session_id"], e["report_seq"])) == [e for evs in events for e in evs]
