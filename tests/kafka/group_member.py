"""One member of a consumer group, as its own process: subscribe, process, commit after processing.

Run by tests/kafka/test_consumer_groups.py::

    python -m tests.kafka.group_member CLIENT BOOTSTRAP GROUP TOPIC OUT [assignor]

``CLIENT`` is ``confluent`` (confluent-kafka), ``kafka-python`` or ``aiokafka``. Every event is one JSON
line written to ``OUT`` with ``os.write`` (in the kernel as soon as written, so a SIGKILL loses nothing
logged):

- ``{"e": "assign", "p": [...]}`` / ``{"e": "revoke", "p": [...]}``: the client's rebalance callback ran;
- ``{"e": "processed", "p": P, "o": OFFSET, "v": VALUE}``: a record was processed;
- ``{"e": "committed", "p": P, "from": A, "to": B}``: a commit of offset ``B`` for partition ``P``
  succeeded, covering the records of offsets ``A`` .. ``B - 1`` this member processed since it got ``P``
  (or since its previous commit of ``P``).

Commit after process: records are processed first, then their offsets committed synchronously; a commit
that fails (the member was fenced by a rebalance, the coordinator moved) is not logged, and the records
are processed again by whoever owns the partition next. SIGTERM closes the consumer (leaving the group).
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

SESSION_MS = 6000
HEARTBEAT_MS = 1000


class Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def __call__(self, **event) -> None:
        os.write(self.fd, (json.dumps(event) + "\n").encode())


class Positions:
    """Per partition, the first offset processed and not yet committed (None: nothing pending)."""

    def __init__(self, out: Log) -> None:
        self.out = out
        self.pending: dict[int, tuple[int, int]] = {}   # partition -> (first, last processed)

    def processed(self, p: int, offset: int, value: bytes) -> None:
        self.out(e="processed", p=p, o=offset, v=value.decode())
        first = self.pending.get(p, (offset, offset))[0]
        self.pending[p] = (first, offset)

    def to_commit(self) -> dict[int, tuple[int, int]]:
        return dict(self.pending)

    def committed(self, done: dict[int, tuple[int, int]]) -> None:
        for p, (first, last) in done.items():
            self.out(e="committed", p=p, **{"from": first, "to": last + 1})
            if self.pending.get(p) == (first, last):
                del self.pending[p]
            elif p in self.pending:
                self.pending[p] = (last + 1, self.pending[p][1])

    def forget(self, partitions) -> None:
        for p in partitions:
            self.pending.pop(p, None)


def run_confluent(bootstrap: str, group: str, topic: str, out: Log, assignor: str, stop) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    pos = Positions(out)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS,
                  "heartbeat.interval.ms": HEARTBEAT_MS, "partition.assignment.strategy": assignor})

    def on_assign(_c, parts):
        out(e="assign", p=sorted(x.partition for x in parts))

    def on_revoke(_c, parts):
        out(e="revoke", p=sorted(x.partition for x in parts))
        pos.forget(x.partition for x in parts)

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stop():
            msgs = c.consume(200, timeout=0.5)
            for m in msgs:
                if m.error() is None:
                    pos.processed(m.partition(), m.offset(), m.value())
            todo = pos.to_commit()
            if todo:
                try:
                    res = c.commit(offsets=[TopicPartition(topic, p, last + 1) for p, (_f, last) in todo.items()],
                                   asynchronous=False)
                except KafkaException:
                    continue
                ok = {x.partition for x in res if x.error is None}
                pos.committed({p: v for p, v in todo.items() if p in ok})
    finally:
        c.close()


def run_kafka_python(bootstrap: str, group: str, topic: str, out: Log, assignor: str, stop) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    pos = Positions(out)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            out(e="revoke", p=sorted(x.partition for x in revoked))
            pos.forget(x.partition for x in revoked)

        def on_partitions_assigned(self, assigned):
            out(e="assign", p=sorted(x.partition for x in assigned))

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                      heartbeat_interval_ms=HEARTBEAT_MS)
    c.subscribe([topic], listener=Listener())
    try:
        while not stop():
            for tp, records in c.poll(timeout_ms=500, max_records=200).items():
                for m in records:
                    pos.processed(tp.partition, m.offset, m.value)
            todo = pos.to_commit()
            if todo:
                try:
                    c.commit({TopicPartition(topic, p): OffsetAndMetadata(last + 1, None, -1)
                              for p, (_f, last) in todo.items()})
                except KafkaError:
                    continue
                pos.committed(todo)
    finally:
        c.close()


def run_aiokafka(bootstrap: str, group: str, topic: str, out: Log, assignor: str, stop) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.errors import KafkaError

    pos = Positions(out)

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            out(e="revoke", p=sorted(x.partition for x in revoked))
            pos.forget(x.partition for x in revoked)

        async def on_partitions_assigned(self, assigned):
            out(e="assign", p=sorted(x.partition for x in assigned))

    async def main():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=SESSION_MS,
                             heartbeat_interval_ms=HEARTBEAT_MS)
        c.subscribe([topic], listener=Listener())
        await c.start()
        try:
            while not stop():
                got = await c.getmany(timeout_ms=500, max_records=200)
                for tp, records in got.items():
                    for m in records:
                        pos.processed(tp.partition, m.offset, m.value)
                todo = pos.to_commit()
                if todo:
                    try:
                        await c.commit({TopicPartition(topic, p): last + 1 for p, (_f, last) in todo.items()})
                    except KafkaError:
                        continue
                    pos.committed(todo)
        finally:
            await c.stop()

    asyncio.run(main())


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


def main(argv: list[str]) -> None:
    client, bootstrap, group, topic, path = argv[:5]
    assignor = argv[5] if len(argv) > 5 else "range"
    halt = []
    signal.signal(signal.SIGTERM, lambda *_: halt.append(1))
    out = Log(path)
    out(e="start", client=client, pid=os.getpid())
    RUNNERS[client](bootstrap, group, topic, out, assignor, lambda: bool(halt))
    out(e="closed")


if __name__ == "__main__":
    main(sys.argv[1:])
