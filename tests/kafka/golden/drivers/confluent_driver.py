"""One step of confluent-kafka (librdkafka) for the frame capture: run by capture_clients.py as
``python confluent_driver.py SPEC_JSON``; prints one JSON result line.

Settings a new user would use: everything default except what the step names, the ``settings`` of the
spec (``api.version.request=false`` ...), and the ``group.id`` the Consumer refuses to start without.
"""
from __future__ import annotations

import json
import sys

import confluent_kafka
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition


def _common(spec: dict) -> dict:
    return {"bootstrap.servers": spec["bootstrap"], "client.id": spec["client_id"], **spec.get("settings", {})}


def metadata(spec: dict) -> dict:
    producer = Producer(_common(spec))
    md = producer.list_topics(timeout=20)
    topic = md.topics.get(spec["topic"])
    return {"topics": sorted(md.topics), "partitions": sorted(topic.partitions) if topic else [],
            "brokers": sorted(str(b) for b in md.brokers.values()), "controller": md.controller_id,
            "cluster_id": md.cluster_id}


def produce(spec: dict) -> dict:
    conf = _common(spec)
    if spec.get("acks") is not None:
        conf["acks"] = str(spec["acks"])
    if spec.get("codec"):
        conf["compression.type"] = spec["codec"]
    producer = Producer(conf)
    offsets, errors = [], []

    def done(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            offsets.append(msg.offset())

    for r in spec["records"]:
        producer.produce(spec["topic"], partition=0, key=r["key"].encode() if r["key"] else None,
                         value=r["value"].encode(), timestamp=r["timestamp"],
                         headers=[(k, v.encode()) for k, v in r["headers"]] or None, on_delivery=done)
    left = producer.flush(20)
    if errors or left:
        raise RuntimeError(f"delivery failed: {errors[:3]}, {left} not delivered")
    return {"offsets": offsets}


def consume(spec: dict) -> dict:
    consumer = Consumer({**_common(spec), "group.id": spec["client_id"]})
    try:
        if spec.get("timestamp") is None:
            start = TopicPartition(spec["topic"], 0, OFFSET_BEGINNING)
        else:
            (start,) = consumer.offsets_for_times([TopicPartition(spec["topic"], 0, spec["timestamp"])], timeout=20)
            if start.error:
                raise RuntimeError(f"offsets_for_times: {start.error}")
        consumer.assign([start])
        got = []
        for _ in range(40):
            for m in consumer.consume(num_messages=100, timeout=0.5):
                if m.error():
                    raise RuntimeError(str(m.error()))
                got.append({"offset": m.offset(), "timestamp": m.timestamp()[1],
                            "key": m.key().decode() if m.key() is not None else None, "value": m.value().decode(),
                            "headers": [[k, v.decode()] for k, v in (m.headers() or [])]})
            if len(got) >= spec["expect"]:
                break
        return {"records": got}
    finally:
        consumer.close()


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        result = {"ok": True, **{"metadata": metadata, "produce": produce, "consume": consume}[spec["kind"]](spec)}
    except Exception as exc:  # the capture records what the client says, whatever it is
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["client_version"] = f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
