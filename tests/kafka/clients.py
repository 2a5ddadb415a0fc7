"""Three real Kafka clients driven the same way: produce messages (key, headers, timestamp, partition) with a
given acks and codec, and read partitions back by ``assign`` from an offset or from a timestamp.

Each function takes the bootstrap address; a message is ``Msg(partition, key, value, headers, timestamp)``.
Consumers return, per partition, ``(offset, key, value, headers, timestamp)`` in the order received.
"""
from __future__ import annotations

import asyncio
import os
from typing import NamedTuple

CODECS = (None, "gzip", "snappy", "lz4", "zstd")
ACKS = (0, 1, "all")


class Msg(NamedTuple):
    partition: int
    key: bytes
    value: bytes
    headers: tuple
    timestamp: int


def messages(tag: str, n: int, partitions: int, t0: int) -> list[Msg]:
    """``n`` distinct messages: partition i % partitions, timestamp t0 + i, random-length random bytes."""
    out = []
    for i in range(n):
        value = f"{tag}-{i}-".encode() + os.urandom(i % 197)
        out.append(Msg(i % partitions, f"k{i}".encode(), value, (("i", str(i).encode()), ("tag", tag.encode())),
                       t0 + i))
    return out


# --- kafka-python -----------------------------------------------------------------------------------

def kafka_python_produce(bootstrap: str, topic: str, msgs: list[Msg], acks, codec) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, compression_type=codec, linger_ms=5)
    try:
        futures = [p.send(topic, value=m.value, key=m.key, headers=list(m.headers), partition=m.partition,
                          timestamp_ms=m.timestamp) for m in msgs]
        p.flush(30)
        for f in futures:
            f.get(30)
    finally:
        p.close(10)


def kafka_python_consume(bootstrap: str, topic: str, partitions: int, n: int, from_ts: int | None = None) -> dict:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=20_000)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        if from_ts is None:
            c.seek_to_beginning(*tps)
        else:
            for tp, found in c.offsets_for_times({tp: from_ts for tp in tps}).items():
                c.seek(tp, found.offset) if found is not None else c.seek_to_end(tp)
        out: dict = {p: [] for p in range(partitions)}
        got = 0
        for r in c:
            out[r.partition].append((r.offset, r.key, r.value, tuple(r.headers), r.timestamp))
            got += 1
            if got >= n:
                break
        return out
    finally:
        c.close()


# --- confluent-kafka (librdkafka), default settings ----------------------------------------------------

def confluent_produce(bootstrap: str, topic: str, msgs: list[Msg], acks, codec) -> None:
    from confluent_kafka import Producer

    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": str(acks), "compression.type": codec or "none"})
    for m in msgs:
        while True:
            try:
                p.produce(topic, value=m.value, key=m.key, headers=list(m.headers), partition=m.partition,
                          timestamp=m.timestamp, on_delivery=lambda err, _msg: err and errors.append(err))
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0
    assert not errors, errors[:3]


def confluent_consume(bootstrap: str, topic: str, partitions: int, n: int, from_ts: int | None = None) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    # group.id is required by the client; enable.auto.commit=false: the broker has no group coordinator
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "proof", "enable.auto.commit": False})
    try:
        if from_ts is None:
            tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        else:
            tps = c.offsets_for_times([TopicPartition(topic, p, from_ts) for p in range(partitions)], timeout=30)
        c.assign(tps)
        out: dict = {p: [] for p in range(partitions)}
        got = idle = 0
        while got < n and idle < 20:
            batch = c.consume(1000, timeout=1.0)
            idle = 0 if batch else idle + 1
            for r in batch:
                assert r.error() is None, r.error()
                out[r.partition()].append((r.offset(), r.key(), r.value(), tuple(r.headers() or ()),
                                           r.timestamp()[1]))
                got += 1
        return out
    finally:
        c.close()


# --- aiokafka --------------------------------------------------------------------------------------

def aiokafka_produce(bootstrap: str, topic: str, msgs: list[Msg], acks, codec) -> None:
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks, compression_type=codec, linger_ms=5)
        await p.start()
        try:
            futures = [await p.send(topic, value=m.value, key=m.key, headers=list(m.headers),
                                    partition=m.partition, timestamp_ms=m.timestamp) for m in msgs]
            await p.flush()
            for f in futures:
                await f
        finally:
            await p.stop()

    asyncio.run(run())


def aiokafka_consume(bootstrap: str, topic: str, partitions: int, n: int, from_ts: int | None = None) -> dict:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            c.assign(tps)
            if from_ts is None:
                await c.seek_to_beginning(*tps)
            else:
                for tp, found in (await c.offsets_for_times({tp: from_ts for tp in tps})).items():
                    if found is None:
                        await c.seek_to_end(tp)
                    else:
                        c.seek(tp, found.offset)
            out: dict = {p: [] for p in range(partitions)}
            got = idle = 0
            while got < n and idle < 20:
                batch = await c.getmany(timeout_ms=1000, max_records=1000)
                idle = 0 if batch else idle + 1
                for tp, records in batch.items():
                    for r in records:
                        out[tp.partition].append((r.offset, r.key, r.value, tuple(r.headers), r.timestamp))
                        got += 1
            return out
        finally:
            await c.stop()

    return asyncio.run(run())


CLIENTS = {
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "confluent-kafka": (confluent_produce, confluent_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
}
