"""One confluent-kafka member of bench/bench_rebalance.py's group, its own process: when it rebalanced and resumed.

    python bench/rebalance_member.py BOOTSTRAP GROUP TOPIC SESSION_MS HEARTBEAT_MS OUT

Subscribes to ``TOPIC`` in ``GROUP`` with librdkafka's default assignors (``range,roundrobin``: eager
rebalancing, every partition revoked and assigned again), ``session.timeout.ms`` and
``heartbeat.interval.ms`` as given, auto-commit on (librdkafka's default, every 5 s), and consumes.
Every event is one JSON line written to ``OUT`` with ``os.write`` (in the kernel at once: a SIGKILL loses
nothing written), its time ``t`` from ``time.monotonic()`` (CLOCK_MONOTONIC, one clock for every process
of the machine, so the benchmark compares it with its own):

- ``{"e": "start", "pid": PID, "t": T}``;
- ``{"e": "revoke", "p": [...], "t": T}`` / ``{"e": "assign", "p": [...], "t": T}``: the rebalance callbacks;
- ``{"e": "first", "p": P, "o": OFFSET, "t": T}``: the first record of partition ``P`` consumed since the
  latest assignment (consumption resumed there);
- ``{"e": "closed", "t": T}``: ``close()`` returned.

SIGTERM leaves cleanly: the loop ends and ``close()`` commits and sends LeaveGroup.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time


def main(argv: list[str]) -> None:
    from confluent_kafka import Consumer

    bootstrap, group, topic, session_ms, heartbeat_ms, path = argv
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(**event) -> None:
        os.write(fd, (json.dumps({**event, "t": time.monotonic()}) + "\n").encode())

    halt: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: halt.append(1))
    log(e="start", pid=os.getpid())
    waiting: set[int] = set()  # partitions of the latest assignment with no record consumed since

    def on_assign(_c, parts) -> None:
        got = sorted(x.partition for x in parts)
        log(e="assign", p=got)
        waiting.clear()
        waiting.update(got)

    def on_revoke(_c, parts) -> None:
        log(e="revoke", p=sorted(x.partition for x in parts))
        waiting.difference_update(x.partition for x in parts)

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "session.timeout.ms": int(session_ms), "heartbeat.interval.ms": int(heartbeat_ms),
                  "fetch.queue.backoff.ms": 10})
    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not halt:
            for m in c.consume(1000, timeout=0.1):
                if m.error() is None and m.partition() in waiting:
                    waiting.discard(m.partition())
                    log(e="first", p=m.partition(), o=m.offset())
    finally:
        c.close()
        log(e="closed")


if __name__ == "__main__":
    main(sys.argv[1:])
