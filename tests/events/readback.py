"""Read a topic back from real brokers and decode it (test helper)."""
from __future__ import annotations

from ingest.client.simple_consumer import SimpleConsumer
from ingest.events.serde import EventDeserializer, decode_each


def read_topic(brokers, topic, registry):
    """Every decoded record of ``topic`` on every broker, plus decode failures."""
    sized, failures = read_topic_sized(brokers, topic, registry)
    return [r for r, _ in sized], failures


def read_topic_sized(brokers, topic, registry):
    """Like :func:`read_topic`, each record paired with its framed payload size in bytes."""
    de = EventDeserializer(registry)
    records, failures = [], []
    for b in brokers:
        with SimpleConsumer(b.host, b.port, timeout_s=10) as c:
            for info in c.metadata([topic]).topics.get(topic, []):
                msgs = list(c.iter_range(topic, info.partition, info.earliest, info.latest))
                sizes = {m.offset: len(m.payload) for m in msgs}
                for d in decode_each(msgs, de, topic):
                    if d.error is None:
                        records.append((d.record, sizes[d.offset]))
                    else:
                        failures.append(d)
    return records, failures


def latest_revisions(monitoring_records):
    latest = {}
    for r in monitoring_records:
        key = (r["producer_session_id"], r["topic"], r["window_start_ms"])
        if key not in latest or r["revision"] > latest[key]["revision"]:
            latest[key] = r
    return latest
