"""One step of aiokafka for the frame capture: run by capture_clients.py as
``python aiokafka_driver.py SPEC_JSON``; prints one JSON result line.

Settings a new user would use: everything default except what the step names.
"""
from __future__ import annotations

import asyncio
import json
import sys

import aiokafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition


def _common(spec: dict) -> dict:
    conf = {"bootstrap_servers": spec["bootstrap"], "client_id": spec["client_id"]}
    if spec.get("api_version"):
        conf["api_version"] = ".".join(map(str, spec["api_version"]))
    return conf


async def metadata(spec: dict) -> dict:
    consumer = AIOKafkaConsumer(**_common(spec))
    await consumer.start()
    try:
        topics = sorted(await consumer.topics())
        return {"topics": topics, "partitions": sorted(consumer.partitions_for_topic(spec["topic"]) or [])}
    finally:
        await consumer.stop()


async def produce(spec: dict) -> dict:
    conf = _common(spec)
    if spec.get("acks") is not None:
        conf["acks"] = spec["acks"]
    if spec.get("codec"):
        conf["compression_type"] = spec["codec"]
    producer = AIOKafkaProducer(**conf)
    await producer.start()
    try:
        futures = [await producer.send(spec["topic"], partition=0, key=r["key"].encode() if r["key"] else None,
                                       value=r["value"].encode(), timestamp_ms=r["timestamp"],
                                       headers=[(k, v.encode()) for k, v in r["headers"]] or None)
                   for r in spec["records"]]
        done = [await asyncio.wait_for(f, 20) for f in futures]
        offsets = [d.offset if d is not None else -1 for d in done]  # acks=0: no metadata
        return {"offsets": offsets}
    finally:
        await producer.stop()


async def consume(spec: dict) -> dict:
    consumer = AIOKafkaConsumer(**_common(spec))
    await consumer.start()
    try:
        tp = TopicPartition(spec["topic"], 0)
        consumer.assign([tp])
        if spec.get("timestamp") is None:
            await consumer.seek_to_beginning(tp)
        else:
            found = (await consumer.offsets_for_times({tp: spec["timestamp"]}))[tp]
            if found is None:
                return {"records": [], "offsets_for_times": None}
            consumer.seek(tp, found.offset)
        got = []
        for _ in range(40):
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                got += [{"offset": r.offset, "timestamp": r.timestamp,
                         "key": r.key.decode() if r.key is not None else None, "value": r.value.decode(),
                         "headers": [[k, v.decode()] for k, v in (r.headers or [])]} for r in batch]
            if len(got) >= spec["expect"]:
                break
        return {"records": got}
    finally:
        await consumer.stop()


def main() -> None:
    spec = json.loads(sys.argv[1])
    step = {"metadata": metadata, "produce": produce, "consume": consume}[spec["kind"]]
    try:
        result = {"ok": True, **asyncio.run(asyncio.wait_for(step(spec), 60))}
    except Exception as exc:  # the capture records what the client says, whatever it is
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["client_version"] = aiokafka.__version__
    print(json.dumps(result))


if __name__ == "__main__":
    main()
