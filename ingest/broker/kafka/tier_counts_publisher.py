"""Broker-tier counts published as monitoring events (replicated, acks=-1), with a checkpoint for recovery.

Every ``audit.counts.interval.ms`` the publisher takes what :class:`~.tier_counts.TierCounter` counted
(per partition, the contiguous offsets ``[first, next)`` after the last published offset) and appends,
per partition, one record batch of monitoring events to ``audit.counts.topic`` (a Kafka-format topic
of this cluster, created on first use) as an acks=-1 write to a partition of it this broker leads. The
events are the producers' monitoring events (``conf/schemas/monitoring_event.avsc``, Confluent framing
with the id ``schema.registry.url`` gives the subject ``<audit.counts.topic>-value``), so the loader
loads them and the audit reads them like the mirror's tier counts:

- ``producer_session_id`` = ``broker:<broker id>:<topic>:<partition>:<first>``: one session per
  published offset range, so the sessions of a window add up to what the leaders appended;
- one event per window of the range, ``report_seq`` 1, 2, ... in window order, ``revision`` = the
  range's size in offsets (a republished range is the same session and only ever grows, so the
  audit's latest revision is the widest count), ``event_id`` = uuid5(session, window, next);
- ``count_attempted`` = ``count_acked`` = records appended; ``count_failed``, ``bytes_acked`` 0;
  ``seq_min``/``seq_max`` null; ``producer_server`` = ``broker-<id>``, ``service`` = ``broker``.

**Durability.** The checkpoint ``<log.dir>/audit-counts-checkpoint`` (JSON, written by temporary
file, fsync, rename and directory fsync) holds per partition the next unpublished offset and the
leader epochs in which this broker counted appends, each written *before* the first count of that
epoch is kept. After a SIGKILL, :func:`recover` recounts from each partition's log the batches of
those epochs from the unpublished offset on (a SIGKILL keeps what was written: the page cache
survives), so nothing counted is lost; a range whose events were replicated but whose checkpoint
update was lost is republished as the same session, whose newer revision covers it. Exact under
SIGKILL; a machine crash that loses an unflushed tail of a log loses its counts with it.

Concurrency contract: one thread publishes; :meth:`TierCountsPublisher.publish_now` may be called by
another (broker stop) and is serialised with it.
"""
from __future__ import annotations

import io
import json
import logging
import os
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from ingest.broker.kafka.tier_counts import Taken, TierCounter, recount
from ingest.errors import ConfigError, IngestError, LeaderNotAvailableError, NeedsZooKeeperError
from ingest.ratelimited_log import RateLimitedLog
from ingest.records.builder import SimpleRecord, build_batch
from ingest.registry_client_config import RegistryAuth

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "audit-counts-checkpoint"
SCHEMA_FILE = Path(__file__).resolve().parents[3] / "conf" / "schemas" / "monitoring_event.avsc"
EVENT_ID_NAMESPACE = uuid.UUID("3c0f7a52-91d4-5e0b-8a6e-4d2b7f1e9c05")
MAX_REVISION = 2**31 - 1
POLL_S = 0.02


def session_of(broker_id: int, taken: Taken) -> str:
    return f"broker:{broker_id}:{taken.topic}:{taken.partition}:{taken.first}"


class TierCheckpoint:
    """``<log.dir>/audit-counts-checkpoint``: per partition, the next unpublished offset and the leader epochs
    in which this broker counted (see the module docstring). Thread-safe (one lock; the file is written under it).
    """

    def __init__(self, log_dir: str | Path) -> None:
        self.path = Path(log_dir) / CHECKPOINT_FILE
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, int], dict] = {}
        if self.path.exists():
            try:
                doc = json.loads(self.path.read_text())
                for e in doc["partitions"]:
                    self._parts[(e["topic"], int(e["partition"]))] = {
                        "published": int(e["published"]), "epochs": sorted({int(x) for x in e["epochs"]})}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise IngestError(f"broker-tier counts checkpoint {self.path} is unreadable ({exc}): move it away to "
                                  "start counting afresh (counts not yet published are then lost)") from exc

    def entries(self) -> dict[tuple[str, int], dict]:
        with self._lock:
            return {k: dict(v) for k, v in self._parts.items()}

    def note_epoch(self, topic: str, partition: int, epoch: int, first_offset: int) -> int:
        """Record that this broker counts ``topic``-``partition`` in ``epoch``; returns its next unpublished offset."""
        with self._lock:
            e = self._parts.get((topic, partition))
            if e is None:
                e = self._parts[(topic, partition)] = {"published": first_offset, "epochs": []}
            if epoch not in e["epochs"]:
                e["epochs"] = sorted(set(e["epochs"]) | {epoch})
                self._write()
            return e["published"]

    def published(self, topic: str, partition: int, nxt: int) -> None:
        with self._lock:
            e = self._parts.get((topic, partition))
            if e is not None and nxt > e["published"]:
                e["published"] = nxt
                self._write()

    def _write(self) -> None:
        doc = {"version": 1, "partitions": [{"topic": t, "partition": p, **v} for (t, p), v in sorted(self._parts.items())]}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def recover(checkpoint: TierCheckpoint, counter: TierCounter, log_manager) -> int:
    """Recount every checkpointed partition's own appends after its last published offset (see the module
    docstring); returns the records recounted."""
    total = 0
    for (topic, partition), e in sorted(checkpoint.entries().items()):
        lg = log_manager.get_log(topic, partition)
        if lg is None or getattr(lg, "offline", False):
            continue
        epochs = set(e["epochs"])
        for first, nxt, per in recount(lg, e["published"], epochs, counter.window_ms):
            counter.add(topic, partition, first, nxt, per, published=e["published"])
            total += sum(per.values())
    if total:
        log.info("broker-tier counts: %d records appended before the restart and not yet published were recounted "
                 "from the logs", total)
    return total


class TierCountsPublisher:
    """The publishing thread (see the module docstring).

    Args:
        config: the broker's config (the ``audit.counts.*`` keys and ``schema.registry.url``).
        counter: what is counted.
        checkpoint: where published offsets go.
        apis: the Kafka listener's :class:`~ingest.broker.kafka.apis.KafkaApis` (its ``cluster`` is read at
            every publication: it changes when ZooKeeper parts start).
        host: this broker's host name (the events' ``header.server``).
    """

    def __init__(self, config, counter: TierCounter, checkpoint: TierCheckpoint, apis, broker_id: int,
                 host: str, clock) -> None:
        self.config = config
        self.counter = counter
        self.checkpoint = checkpoint
        self.apis = apis
        self.broker_id = broker_id
        self.host = host
        self.clock = clock
        self.topic = config["audit.counts.topic"]
        self.window_ms = config["audit.counts.window.ms"]
        self._registry_url = config["schema.registry.url"].rstrip("/")
        if not self._registry_url:
            raise ConfigError("audit.counts.enable=true needs schema.registry.url: the broker-tier counts are "
                              "monitoring events framed with the registry's schema id")
        self._registry_auth = RegistryAuth.from_config(config)
        self._schema_text = SCHEMA_FILE.read_text()
        self._schema = None
        self._schema_id: int | None = None
        self._publish_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors = RateLimitedLog(log, interval_s=60.0)
        self.events_published = 0
        self._timeout_s = config["audit.counts.publish.timeout.ms"] / 1000.0

    def start(self) -> "TierCountsPublisher":
        self._thread = threading.Thread(target=self._run, name=f"audit-counts-{self.broker_id}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread after one last publication (bounded by ``audit.counts.publish.timeout.ms``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._timeout_s = min(self._timeout_s, timeout_s)
        self.publish_now()

    def _run(self) -> None:
        interval = self.config["audit.counts.interval.ms"] / 1000.0
        while not self._stop.wait(interval):
            self.publish_now()

    def publish_now(self) -> int:
        """Publish what is counted; returns the events published (failures are logged, rate-limited, and retried
        at the next publication: nothing is forgotten until it is replicated)."""
        with self._publish_lock:
            n = 0
            for taken in self.counter.take():
                try:
                    n += self._publish(taken)
                except IngestError as exc:
                    self._errors.warning("", "publish", "broker-tier counts of %s-%d (offsets %d-%d) not published "
                                         "yet, retried in %d ms: %s", taken.topic, taken.partition, taken.first,
                                         taken.next - 1, self.config["audit.counts.interval.ms"], exc)
                    break
            self.events_published += n
            return n

    def _publish(self, taken: Taken) -> int:
        payloads = self._events(taken)
        now = self.clock.time_ms()
        key = session_of(self.broker_id, taken).encode()
        batch = build_batch([SimpleRecord(p, key, (), now) for p in payloads])
        sp = self._leader_partition()
        appended = sp.append(sp.log.validate(batch), -1)
        self.apis.wake_fetches(self.topic, sp.partition)
        if appended.outcome is not None:
            deadline = time.monotonic() + self._timeout_s
            while True:
                o = appended.outcome()
                if o is True:
                    break
                if o is not None:
                    raise o if isinstance(o, IngestError) else IngestError(str(o))
                if time.monotonic() > deadline:
                    raise IngestError(f"{self.topic}-{sp.partition}: the in-sync replicas did not acknowledge the "
                                      "counts in time")
                time.sleep(POLL_S)
        self.counter.published(taken)
        self.checkpoint.published(taken.topic, taken.partition, taken.next)
        log.debug("broker-tier counts of %s-%d offsets %d-%d published (%d events)", taken.topic, taken.partition,
                  taken.first, taken.next - 1, len(payloads))
        return len(payloads)

    def _leader_partition(self):
        """A partition of the counts topic this broker leads (created on first use).

        Raises:
            IngestError: the topic's leaders are being elected, or this broker leads none of its partitions.
        """
        cluster = self.apis.cluster
        parts = cluster.describe(self.topic)
        if parts is None:
            try:
                created = cluster.create_topic(self.topic)
            except NeedsZooKeeperError:
                # the assignment is written on the broker's coordination thread, as for a producer's request
                cluster.coordinated.submit(lambda: self._create_on_coordination_thread(cluster),
                                           lambda _exc: None, 0)
                created = False
            if not created:
                raise LeaderNotAvailableError(f"topic {self.topic!r} is being created; its leaders are being elected")
            parts = cluster.describe(self.topic) or ()
        n = len(parts)
        for i in range(n):
            p = (self.broker_id + i) % n
            try:
                return cluster.leader(self.topic, p)
            except IngestError:
                continue
        raise LeaderNotAvailableError(f"this broker leads no partition of {self.topic!r} now")

    def _create_on_coordination_thread(self, cluster) -> None:
        try:
            cluster.create_topic(self.topic)
        except IngestError as exc:
            self._errors.warning("", "create", "cannot create the broker-tier counts topic %r yet: %s", self.topic, exc)

    def _events(self, taken: Taken) -> list[bytes]:
        import fastavro  # deferred: the heavy Avro library is needed only where counts are published

        if self._schema is None:
            self._schema = fastavro.parse_schema(json.loads(self._schema_text))
        if self._schema_id is None:
            self._schema_id = self._register()
        session = session_of(self.broker_id, taken)
        now = self.clock.time_ms()
        out = []
        for i, ws in enumerate(sorted(taken.counts), start=1):
            n = taken.counts[ws]
            record = {
                "header": {"time": now, "server": self.host, "service": "broker", "session": session, "seq": i - 1},
                "event_id": str(uuid.uuid5(EVENT_ID_NAMESPACE, f"{session}/{ws}/{taken.next}")),
                "producer_session_id": session, "producer_server": f"broker-{self.broker_id}", "service": "broker",
                "report_seq": i, "topic": taken.topic, "window_start_ms": ws, "window_end_ms": ws + self.window_ms,
                "window_size_ms": self.window_ms, "revision": min(MAX_REVISION, taken.next - taken.first),
                "count_attempted": n, "count_acked": n, "count_failed": 0, "bytes_acked": 0,
                "seq_min": None, "seq_max": None, "is_final": False, "heartbeat": False, "emitted_at_ms": now,
            }
            buf = io.BytesIO()
            buf.write(b"\x00" + self._schema_id.to_bytes(4, "big"))
            fastavro.schemaless_writer(buf, self._schema, record)
            out.append(buf.getvalue())
        return out

    def _register(self) -> int:
        """The schema id of the monitoring event schema under ``<audit.counts.topic>-value`` (registered if new)."""
        url = f"{self._registry_url}/subjects/{self.topic}-value/versions"
        body = json.dumps({"schema": self._schema_text}).encode()
        req = urllib.request.Request(url, data=body, method="POST", headers={
            "Content-Type": "application/vnd.schemaregistry.v1+json", **self._registry_auth.headers()})
        tls = self._registry_auth.ssl_context() if url.startswith("https://") else None
        try:
            with urllib.request.urlopen(req, timeout=10, context=tls) as resp:
                return int(json.loads(resp.read())["id"])
        except (OSError, ValueError, KeyError) as exc:
            raise IngestError(f"schema registry {self._registry_url} did not register the monitoring event schema "
                              f"under {self.topic}-value: {exc}") from exc
