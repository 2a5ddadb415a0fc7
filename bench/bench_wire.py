"""The codec calls of the hot paths, timed: produce, fetch and a follower's fetch, both sides.

One call of each (encode on the side that sends, decode on the side that receives, the headers the
broker writes before a ``sendfile`` region), best of ``--repeat`` timings of ``--number`` calls, on
a 10 KB message set. Runs against the wire layer of the tree first on ``PYTHONPATH`` (it also
reads a tree from before the wire layer, whose codecs were ``ingest.broker.protocol``), so that
``bench/ab_trees.py --same-script --column calls/s`` compares two trees in one run::

    .venv/bin/python bench/bench_wire.py [--number 20000] [--repeat 5]
    .venv/bin/python bench/ab_trees.py --old /tmp/old-tree --same-script --column calls/s -- bench/bench_wire.py
"""
from __future__ import annotations

import argparse
import timeit

try:
    from ingest.wire import protocol as p
except ImportError:                      # a tree from before the wire layer
    from ingest.broker import protocol as p  # type: ignore[no-redef]

SET = b"x" * 10_000
TOPIC = "page-views"


def _body(request) -> memoryview:
    return memoryview(request.encode())[6:]      # what the broker's handler gets: the bytes after type


def cases() -> dict:
    produce = p.ProduceRequest(TOPIC, 3, SET)
    acks = p.ProduceAcksRequest(-1, 1000, produce)
    fetch = p.FetchRequest(TOPIC, 3, 1 << 40, 300_000)
    replica = p.ReplicaFetchRequest(2, 7, 500, p.FetchRequest(TOPIC, 3, 1 << 40, 1 << 20))
    ack = p.ProduceAckResponse(0, 123456).encode()[4:]
    replica_answer = p.ReplicaFetchResponse(0, 100, 0, 200, SET).encode()[4:]
    return {
        "PRODUCE encode (client)": lambda: produce.encode(),
        "PRODUCE decode (broker)": lambda b=_body(produce): p.ProduceRequest.decode(b),
        "PRODUCE_ACKS decode (broker)": lambda b=_body(acks): p.ProduceAcksRequest.decode(b),
        "PRODUCE_ACK answer encode (broker)": lambda: p.ProduceAckResponse(0, 123456).encode(),
        "PRODUCE_ACK answer decode (client)": lambda: p.ProduceAckResponse.decode(ack),
        "FETCH encode (client)": lambda: fetch.encode(),
        "FETCH decode (broker)": lambda b=_body(fetch): p.FetchRequest.decode(b),
        "FETCH answer header (broker, before sendfile)": lambda: p.FetchResponse.header(0, 300_000),
        "REPLICA_FETCH encode (follower)": lambda: replica.encode(),
        "REPLICA_FETCH decode (leader)": lambda b=_body(replica): p.ReplicaFetchRequest.decode(b),
        "REPLICA_FETCH answer header (leader)": lambda: p.ReplicaFetchResponse.header(0, 100, 0, 200, 300_000),
        "REPLICA_FETCH answer decode (follower)": lambda: p.ReplicaFetchResponse.decode(replica_answer),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--number", type=int, default=20_000, help="calls per timing")
    ap.add_argument("--repeat", type=int, default=5, help="timings; the best is kept")
    args = ap.parse_args(argv)
    print(f"codecs of {p.__name__}; best of {args.repeat} x {args.number:,} calls; message sets of {len(SET):,} bytes")
    print()
    print("| codec call | ns per call | calls/s |")
    print("| --- | ---: | ---: |")
    for name, fn in cases().items():
        seconds = min(timeit.repeat(fn, number=args.number, repeat=args.repeat)) / args.number
        print(f"| {name} | {seconds * 1e9:,.0f} | {1 / seconds:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
