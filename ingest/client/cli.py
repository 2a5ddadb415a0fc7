"""``ingest console-producer``, ``ingest console-consumer``, ``ingest topics``."""
from __future__ import annotations

import argparse
import sys

from ingest.config import parse_overrides

PRODUCER_EXAMPLES = """examples:
  echo hello | ingest console-producer --brokers 0:127.0.0.1:9092 --topic test
  ingest console-producer --zk 127.0.0.1:2181 --topic clicks --set compression.codec=gzip < events.txt
"""
CONSUMER_EXAMPLES = """examples:
  ingest console-consumer --brokers 0:127.0.0.1:9092 --topic test --from-beginning --timeout-ms 2000
  ingest console-consumer --zk 127.0.0.1:2181 --topic clicks --group ops --max-messages 10
"""
TOPICS_EXAMPLES = """examples:
  ingest topics --brokers 0:127.0.0.1:9092,1:127.0.0.1:9093
  ingest topics --zk 127.0.0.1:2181 --topic clicks --json
"""


def _add_cluster_args(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--brokers", metavar="ID:HOST:PORT,...", help="static broker list")
    g.add_argument("--zk", metavar="HOST:PORT[/CHROOT]", help="find brokers in ZooKeeper")


def register(subparsers) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser("console-producer", help="send stdin lines as messages",
                              description="Send each stdin line (without its newline) as one message.",
                              epilog=PRODUCER_EXAMPLES, formatter_class=fmt)
    _add_cluster_args(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--key", help="partition key for every line (default: random partition per batch)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="producer config override, e.g. compression.codec=gzip (repeatable)")
    p.set_defaults(func=_producer)

    c = subparsers.add_parser("console-consumer", help="print messages of a topic",
                              description="Print messages of a topic, one per line. With --zk it joins a "
                                          "consumer group (offsets in ZooKeeper).",
                              epilog=CONSUMER_EXAMPLES, formatter_class=fmt)
    _add_cluster_args(c)
    c.add_argument("--topic", required=True)
    c.add_argument("--group", help="consumer group (--zk only; default: a new random group)")
    c.add_argument("--from-beginning", action="store_true",
                   help="start at the earliest offset when the group has no committed offset")
    c.add_argument("--max-messages", type=int, help="exit after this many messages")
    c.add_argument("--timeout-ms", type=int, default=-1, help="exit after this long without a message")
    c.add_argument("--print-offsets", action="store_true", help="prefix lines with topic, broker-partition, offset")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="consumer config override")
    c.set_defaults(func=_consumer)

    t = subparsers.add_parser("topics", help="list topics, partitions and offsets",
                              description="List every topic's partitions per broker with earliest and "
                                          "latest offsets (METADATA request; no ZooKeeper needed).",
                              epilog=TOPICS_EXAMPLES, formatter_class=fmt)
    _add_cluster_args(t)
    t.add_argument("--topic", action="append", default=[], help="only these topics (repeatable)")
    t.add_argument("--json", action="store_true", help="one JSON object per partition")
    t.set_defaults(func=_topics)


def _producer(args) -> int:
    from ingest.client.console import console_producer

    return console_producer(brokers=args.brokers, zk=args.zk, topic=args.topic, lines=sys.stdin.buffer,
                            key=args.key, overrides=parse_overrides(args.set))


def _consumer(args) -> int:
    from ingest.client.console import console_consumer

    return console_consumer(brokers=args.brokers, zk=args.zk, topic=args.topic, group=args.group,
                            from_beginning=args.from_beginning, max_messages=args.max_messages,
                            timeout_ms=args.timeout_ms, print_offsets=args.print_offsets,
                            overrides=parse_overrides(args.set))


def _topics(args) -> int:
    from ingest.client.console import list_topics

    return list_topics(brokers=args.brokers, zk=args.zk, topics=args.topic, as_json=args.json)
