"""Records on a Kafka-format topic for the mirror tests: tagged records produced with confluent-kafka and
a partition's end read with the product's Kafka client."""
from __future__ import annotations

from typing import Iterable


def produce_tagged(bootstrap: str, topic: str, partitions: Iterable[int], tag: str, per_partition: int = 5) -> None:
    """``per_partition`` records ``{tag}-{partition}-{i}`` (keys ``k{i}``) to each partition, all acknowledged."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list = []
    for part in partitions:
        for i in range(per_partition):
            p.produce(topic, value=f"{tag}-{part}-{i}".encode(), key=f"k{i}".encode(), partition=part,
                      on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(60) == 0 and not errors, errors[:3]


def end_or_none(bootstrap: str, topic: str, partition: int) -> int | None:
    """The partition's log end offset, or None while it cannot be read (the target partition may not exist yet)."""
    from ingest.client.kafka.fetcher import KafkaFetcher

    try:
        with KafkaFetcher(bootstrap_servers=bootstrap, request_timeout_ms=3000) as f:
            return f.latest(topic, partition)
    except Exception:  # noqa: BLE001 - not there yet
        return None
