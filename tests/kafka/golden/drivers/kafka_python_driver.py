"""One step of a kafka-python client (2.3 or 3.x) for the frame capture: run by capture_clients.py in the
client's own venv, as ``python kafka_python_driver.py SPEC_JSON``; prints one JSON result line.

Steps: metadata, produce (acks, codec, keys, headers as the spec says), consume from earliest, consume
from a timestamp. Settings a new user would use: everything default except what the step names and
``api_version`` when the spec fixes it.
"""
from __future__ import annotations

import json
import sys

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def _common(spec: dict) -> dict:
    conf = {"bootstrap_servers": spec["bootstrap"], "client_id": spec["client_id"]}
    if spec.get("api_version"):
        conf["api_version"] = tuple(spec["api_version"])
    return conf


def metadata(spec: dict) -> dict:
    consumer = KafkaConsumer(**_common(spec))
    try:
        topics = sorted(consumer.topics())
        parts = sorted(consumer.partitions_for_topic(spec["topic"]) or [])
        return {"topics": topics, "partitions": parts}
    finally:
        consumer.close()


def produce(spec: dict) -> dict:
    conf = _common(spec)
    if spec.get("acks") is not None:
        conf["acks"] = spec["acks"]
    if spec.get("codec"):
        conf["compression_type"] = spec["codec"]
    producer = KafkaProducer(**conf)
    try:
        futures = [producer.send(spec["topic"], partition=0, key=r["key"].encode() if r["key"] else None,
                                 value=r["value"].encode(), timestamp_ms=r["timestamp"],
                                 headers=[(k, v.encode()) for k, v in r["headers"]] if r["headers"] else None)
                   for r in spec["records"]]
        producer.flush(timeout=20)
        offsets = [f.get(timeout=20).offset for f in futures]
        return {"offsets": offsets}
    finally:
        producer.close(timeout=5)


def _read(consumer, tp, want: int) -> list:
    got = []
    for _ in range(40):
        for batch in consumer.poll(timeout_ms=500).values():
            got += [{"offset": r.offset, "timestamp": r.timestamp,
                     "key": r.key.decode() if r.key is not None else None, "value": r.value.decode(),
                     "headers": [[k, v.decode()] for k, v in (r.headers or [])]} for r in batch]
        if len(got) >= want:
            break
    return got


def consume(spec: dict) -> dict:
    consumer = KafkaConsumer(**_common(spec))  # no group: assign only, as the step says
    try:
        tp = TopicPartition(spec["topic"], 0)
        consumer.assign([tp])
        if spec.get("timestamp") is None:
            consumer.seek_to_beginning(tp)
        else:
            found = consumer.offsets_for_times({tp: spec["timestamp"]})[tp]
            if found is None:
                return {"records": [], "offsets_for_times": None}
            consumer.seek(tp, found.offset)
        return {"records": _read(consumer, tp, spec["expect"])}
    finally:
        consumer.close()


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        result = {"ok": True, **{"metadata": metadata, "produce": produce, "consume": consume}[spec["kind"]](spec)}
    except Exception as exc:  # the capture records what the client says, whatever it is
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["client_version"] = kafka.__version__
    print(json.dumps(result))


if __name__ == "__main__":
    main()
