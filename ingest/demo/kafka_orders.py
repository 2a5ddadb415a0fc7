"""The demo's foreign service: orders published with confluent-kafka's AvroSerializer, no monitoring events.

Run by the demo as a child process::

    python -m ingest.demo.kafka_orders --bootstrap 127.0.0.1:29092 --registry http://127.0.0.1:8081 \\
        --topic orders --count 300 --rate 5

It stands for a service written by others: Confluent's client and serializer (the schema has no product
header), acks=all with idempotence on (each message stored once, also when a send is retried); the audit judges
its topic from the brokers' own counts (docs/audit.md,
"Broker-tier counts"). Prints one JSON line like ``ingest produce --json``: ``acknowledged``, ``failed``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from ingest.cli_numbers import float_flag, int_flag

ORDER_SCHEMA = {"type": "record", "name": "Order", "namespace": "demo.orders",
                "fields": [{"name": "order_id", "type": "string"}, {"name": "amount_cents", "type": "long"},
                           {"name": "currency", "type": "string"}]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True, help="host:port of Kafka listeners")
    p.add_argument("--registry", required=True, help="schema registry URL")
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int_flag("an integer >= 0"), required=True)
    p.add_argument("--rate", type=float_flag("a number > 0"), required=True, help="orders per second")
    args = p.parse_args(argv)

    # deferred: confluent-kafka is needed only by this demo child process
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": args.registry}), json.dumps(ORDER_SCHEMA))
    ctx = SerializationContext(args.topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 20})
    outcome = {"acknowledged": 0, "failed": 0}

    def done(err, _msg) -> None:
        outcome["failed" if err else "acknowledged"] += 1

    started = time.monotonic()
    for i in range(args.count):
        order = {"order_id": f"order-{i}", "amount_cents": 100 + i % 997, "currency": "EUR"}
        producer.produce(args.topic, value=serializer(order, ctx), key=order["order_id"].encode(), on_delivery=done)
        producer.poll(0)
        delay = started + (i + 1) / args.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    left = producer.flush(60)
    outcome["failed"] += left
    print(json.dumps({"topic": args.topic, **outcome}))
    return 0 if outcome["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
