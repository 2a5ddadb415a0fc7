"""One member of a consumer group, as its own process: subscribe, process, commit after processing.

Run by tests/kafka/test_consumer_groups.py::

    python -m tests.kafka.group_member CLIENT BOOTSTRAP GROUP TOPIC OUT [ASSIGNOR [INSTANCE_ID [SESSION_MS [POLL_MS]]]]

``CLIENT`` is ``confluent`` (confluent-kafka), ``kafka-python`` or ``aiokafka``; ``ASSIGNOR`` is ``range``
(the default), ``roundrobin`` or ``cooperative-sticky``; ``INSTANCE_ID`` (``-`` for none) makes the member
static (``group.instance.id``); ``SESSION_MS`` is its ``session.timeout.ms``, ``POLL_MS`` its
``max.poll.interval.ms`` (the rebalance timeout it asks for; kafka-python only). Every event is one JSON line
written to ``OUT`` with ``os.write`` (in the kernel as soon as written, so a SIGKILL loses nothing logged):

- ``{"e": "assign", "p": [...], "inc": B}`` / ``{"e": "revoke", "p": [...], "inc": B}``: the client's
  rebalance callback ran; ``inc`` is true under an incremental (cooperative) assignor, whose callbacks name
  only the partitions added or taken away, false under an eager one, whose assign names the whole
  assignment (and whose revoke takes everything);
- ``{"e": "error", "code": NAME, "fatal": B, "text": TEXT}``: the client reported an error (each code
  once); a fatal one (librdkafka's ``_FATAL``, e.g. FENCED_INSTANCE_ID: another process joined with this
  member's instance id) ends the member;
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
INCREMENTAL = {"cooperative-sticky"}


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


class Errors:
    """Each distinct client error logged once (a fenced member would repeat its error every poll)."""

    def __init__(self, out: Log) -> None:
        self.out, self.seen = out, set()

    def __call__(self, code: str, fatal: bool, text: str = "") -> None:
        if code not in self.seen:
            self.seen.add(code)
            self.out(e="error", code=code, fatal=fatal, text=text)


def run_confluent(bootstrap: str, group: str, topic: str, out: Log, assignor: str, stop, instance_id, session_ms):
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    pos = Positions(out)
    errors = Errors(out)
    inc = assignor in INCREMENTAL
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": HEARTBEAT_MS, "partition.assignment.strategy": assignor,
            "error_cb": lambda err: errors(err.name(), err.fatal(), err.str())}
    if instance_id:
        conf["group.instance.id"] = instance_id
    c = Consumer(conf)

    def on_assign(_c, parts):
        out(e="assign", p=sorted(x.partition for x in parts), inc=inc)

    def on_revoke(_c, parts):
        out(e="revoke", p=sorted(x.partition for x in parts), inc=inc)
        pos.forget(x.partition for x in parts)

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stop():
            msgs = c.consume(200, timeout=0.5)
            for m in msgs:
                if m.error() is None:
                    pos.processed(m.partition(), m.offset(), m.value())
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    errors(m.error().name(), m.error().fatal(), m.error().str())
            if "_FATAL" in errors.seen:
                return                     # fenced (FENCED_INSTANCE_ID): another process is this member now
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


def run_kafka_python(bootstrap: str, group: str, topic: str, out: Log, assignor: str, stop, instance_id,
                     session_ms, poll_ms=None) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    pos = Positions(out)
    errors = Errors(out)
    inc = assignor in INCREMENTAL
    # "range" is kafka-python's default list (range, then roundrobin: what aiokafka's default matches)
    assignors = {"range": (RangePartitionAssignor, RoundRobinPartitionAssignor),
                 "roundrobin": (RoundRobinPartitionAssignor,), "cooperative-sticky": (CooperativeStickyAssignor,)}

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            out(e="revoke", p=sorted(x.partition for x in revoked), inc=inc)
            pos.forget(x.partition for x in revoked)

        def on_partitions_assigned(self, assigned):
            out(e="assign", p=sorted(x.partition for x in assigned), inc=inc)

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=session_ms,
                      heartbeat_interval_ms=HEARTBEAT_MS, group_instance_id=instance_id,
                      partition_assignment_strategy=assignors[assignor],
                      **({"max_poll_interval_ms": poll_ms} if poll_ms else {}))
    c.subscribe([topic], listener=Listener())
    try:
        while not stop():
            try:
                got = c.poll(timeout_ms=500, max_records=200)
            except KafkaError as exc:
                # a broker that was just killed (connection refused): retriable, polled again, as an
                # application does; anything else ends the member
                if not exc.retriable:
                    raise
                errors(type(exc).__name__, False, str(exc))
                continue
            for tp, records in got.items():
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


def run_aiokafka(bootstrap: str, group: str, topic: str, out: Log, assignor: str, stop, instance_id,
                 session_ms) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.errors import KafkaError

    pos = Positions(out)

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            out(e="revoke", p=sorted(x.partition for x in revoked), inc=False)
            pos.forget(x.partition for x in revoked)

        async def on_partitions_assigned(self, assigned):
            out(e="assign", p=sorted(x.partition for x in assigned), inc=False)

    async def main():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=session_ms,
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
    instance_id = argv[6] if len(argv) > 6 and argv[6] != "-" else None
    session_ms = int(argv[7]) if len(argv) > 7 else SESSION_MS
    extra = {"poll_ms": int(argv[8])} if len(argv) > 8 else {}
    halt = []
    signal.signal(signal.SIGTERM, lambda *_: halt.append(1))
    out = Log(path)
    out(e="start", client=client, pid=os.getpid())
    RUNNERS[client](bootstrap, group, topic, out, assignor, lambda: bool(halt), instance_id, session_ms, **extra)
    out(e="closed")


if __name__ == "__main__":
    main(sys.argv[1:])
