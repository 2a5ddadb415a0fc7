"""What the consumer-group tests share: member processes, a producer of distinct values, and the checks.

A :class:`Member` runs tests/kafka/group_member.py as its own process and reads back the events it logged;
the checks read those events: every acknowledged value processed, no record covered by two successful
commits, every partition assigned to exactly one live member.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from tests.harness import reaper
from tests.harness.brokers import REPO_ROOT
from tests.harness.wait import wait_until
from tests.kafka.group_member import SESSION_MS
from tests.kafka.other_clients import high_watermarks


def bootstrap_of(brokers) -> str:
    return ",".join(f"127.0.0.1:{b.kafka_port}" for b in brokers)


class Member:
    """One member process of ``group`` reading ``topic``; each start writes a new events file.

    ``instance_id`` makes it a static member (``group.instance.id``); ``session_ms`` is its
    ``session.timeout.ms`` (group_member.py's default when None); ``poll_ms`` its ``max.poll.interval.ms``
    (kafka-python members only)."""

    def __init__(self, client: str, name: str, bootstrap: str, workdir: Path, group: str, topic: str,
                 assignor: str = "range", instance_id: str | None = None, session_ms: int | None = None,
                 poll_ms: int | None = None) -> None:
        self.client, self.name, self.bootstrap, self.workdir, self.assignor = client, name, bootstrap, workdir, assignor
        self.group, self.topic, self.instance_id, self.session_ms = group, topic, instance_id, session_ms
        self.poll_ms = poll_ms
        self.files: list[Path] = []
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Member":
        path = self.workdir / f"{self.name}-{len(self.files)}.jsonl"
        self.files.append(path)
        args = [self.client, self.bootstrap, self.group, self.topic, str(path), self.assignor]
        if self.instance_id is not None or self.session_ms is not None or self.poll_ms is not None:
            args += [self.instance_id or "-", str(self.session_ms or SESSION_MS)]
            args += [str(self.poll_ms)] if self.poll_ms is not None else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.kafka.group_member", *args], cwd=str(REPO_ROOT),
            stdout=open(self.workdir / f"{self.name}.out", "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        reaper.watch(self.proc)
        return self

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def events(self, incarnation: int | None = None) -> list[dict]:
        """The events of every start (or of start number ``incarnation`` only)."""
        files = self.files if incarnation is None else [self.files[incarnation]]
        out = []
        for f in files:
            if f.exists():
                out.extend(json.loads(line) for line in f.read_text().splitlines() if line.strip())
        return out

    def callbacks(self, incarnation: int = -1) -> list[dict]:
        """The assign and revoke events of one start (the latest by default)."""
        return [ev for ev in self.events(incarnation % len(self.files)) if ev["e"] in ("assign", "revoke")]

    def current_assignment(self) -> list[int] | None:
        """The partitions the running incarnation owns after its latest callback (None before its first).

        An eager assign names the whole assignment; an incremental (``"inc": true``) one names the partitions
        added; a revoke names the partitions taken away (all of them, under an eager assignor)."""
        got = None
        for ev in self.callbacks():
            if ev["e"] == "assign":
                got = sorted(set(got or []) | set(ev["p"])) if ev.get("inc") else ev["p"]
            else:
                got = [p for p in (got or []) if p not in ev["p"]]
        return got


class Producer(threading.Thread):
    """confluent-kafka, acks=all: distinct values ``id-N`` to partition N % partitions, about 200 a second."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name="group-test-producer", daemon=True)
        from confluent_kafka import Producer as CProducer

        self.topic, self.partitions = topic, partitions
        self.p = CProducer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                            "retries": 1_000_000, "retry.backoff.ms": 100, "message.timeout.ms": 120_000,
                            "linger.ms": 5})
        self.acked: set[str] = set()
        self.failed: list[str] = []
        self.sent = 0
        self.halt = threading.Event()

    def _done(self, err, msg) -> None:
        (self.failed.append if err is not None else self.acked.add)(msg.value().decode())

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.p.produce(self.topic, f"id-{self.sent}".encode(), partition=self.sent % self.partitions,
                               on_delivery=self._done)
                self.sent += 1
            except BufferError:
                pass
            self.p.poll(0.005)

    def stop(self) -> None:
        self.halt.set()
        self.join(30)
        assert self.p.flush(180) == 0, "records still unanswered after 180 s"


def assigned(members) -> dict[str, list[int] | None]:
    return {m.name: m.current_assignment() for m in members}


def wait_all_assigned(members, partitions: int, what: str, timeout: float = 180.0) -> None:
    """Wait until every partition is assigned to exactly one of ``members`` and each has some."""
    def ok():
        for m in members:
            if m.proc.poll() is not None:
                out = (m.workdir / f"{m.name}.out").read_text(errors="replace")[-2000:]
                raise AssertionError(f"{what}: member {m.name} ended (exit {m.proc.returncode}): {out}")
        got = assigned(members)
        parts = [p for ps in got.values() if ps for p in ps]
        return all(ps for ps in got.values()) and sorted(parts) == list(range(partitions))
    wait_until(ok, timeout=timeout, interval=1.0,
               what=f"{what}: every partition assigned to exactly one of the live members (now {assigned(members)})")


def processed_everything(members, acked: set[str]) -> bool:
    seen = {ev["v"] for m in members for ev in m.events() if ev["e"] == "processed"}
    return acked <= seen


def no_record_committed_twice(members, topic: str) -> dict[int, int]:
    """Per partition, the successful commits' ranges are disjoint; returns the highest committed offset."""
    ranges: dict[int, list[tuple[int, int, str]]] = {}
    for m in members:
        for ev in m.events():
            if ev["e"] == "committed":
                ranges.setdefault(ev["p"], []).append((ev["from"], ev["to"], m.name))
    top = {}
    for p, rs in ranges.items():
        rs.sort()
        for (a0, a1, an), (b0, b1, bn) in zip(rs, rs[1:]):
            assert a1 <= b0, f"{topic}-{p}: records {b0}..{min(a1, b1) - 1} committed twice ({an}: {a0}..{a1 - 1}, " \
                             f"{bn}: {b0}..{b1 - 1})"
        top[p] = rs[-1][1]
    return top


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    return high_watermarks(bootstrap, topic, range(partitions))


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                             timeout=30)}
    finally:
        c.close()
