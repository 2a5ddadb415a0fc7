"""One log per topic-partition, of either kind: recovery at start, flusher, retention and verifier tasks.

Directory layout: ``<log.dir>/<topic>-<partition>/``, holding a 0.7 log's ``<20-digit base>.kafka``
segments or a Kafka-format log's ``<20-digit base>.log`` segments with their indexes
(:mod:`ingest.broker.topic_kind`): a log's kind is its files, every partition of a topic has the same
kind, and a caller that asks for a log of the other kind than its topic's gets
:class:`~ingest.errors.WrongTopicKindError`. The settings of both kinds come from the same keys
(:mod:`ingest.broker.log_settings`). The
one broker process using ``log.dir`` holds an exclusive ``flock`` on the directory.
Topic names are validated (:func:`ingest.broker.topics.validate_topic`)
before they reach a path; directories under ``log.dir`` that do not parse as
``<valid topic>-<partition>`` are reported and left alone.

Concurrency contract: every public method is thread-safe. The map of logs is
guarded by the manager's lock (held only to look up or insert); each
:class:`~ingest.broker.log.Log` guards itself. Three tasks run after :meth:`startup` on the
broker's :class:`~ingest.broker.scheduler.KafkaScheduler` (or one of the manager's own, of one
thread): the flusher (every :meth:`flush_check_interval_ms` it flushes logs whose flush interval
elapsed), retention (every ``log.cleanup.interval.mins``, or ``log.retention.check.interval.ms``
when set) and, once, the verifier of old segments (one segment a run). Decisions use the injected
clock; the tasks only wait on real time, and tests call :meth:`flush_due` / :meth:`cleanup`
directly with a fake clock. A log that an I/O error took
offline (see :mod:`ingest.broker.log`) stays in the map: the flusher and
retention skip it, requests to it fail with ``LOG_OFFLINE``, the others serve.

Bounds, so that a flood of new topic names cannot exhaust the broker: a topic is created on its first produce only while
``auto.create.topics.enable`` is true (otherwise only topics on disk or in
``topic.partition.count.map``), and never beyond ``max.topics`` topics or
``max.broker.partitions`` partition logs (:class:`TopicCreationRefusedError`).
Logs found on disk are always loaded and served, even above the limits.
Segment descriptors are shared by every log through one
:class:`~ingest.broker.open_files.OpenFiles` of ``log.max.open.files``, so
descriptors do not grow with partitions, and start-up recovers any number of
logs under a small descriptor limit.
"""
from __future__ import annotations

import fcntl
import logging
import os
import resource
import shutil
import threading
import uuid
from pathlib import Path

from ingest.broker import log_settings, topic_config
from ingest.broker.kafka_log import KafkaLog
from ingest.broker.kafka_log_settings import KafkaLogSettings
from ingest.broker.log import Log, LogSettings
from ingest.broker.log_config import check_topic_maps
from ingest.broker.open_files import OpenFiles
from ingest.broker.scheduler import KafkaScheduler, ScheduledTask
from ingest.broker.topic_kind import TopicKind, kind_of_dir, wrong_kind
from ingest.broker.topics import parse_partition_dir, partition_dir_name, validate_partition, validate_topic
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.config import Config
from ingest.errors import LogOfflineError, StorageError, TopicCreationRefusedError

log = logging.getLogger(__name__)

_MIN_FLUSH_CHECK_MS = 10   # a flush interval below this still wakes the flusher only this often
_AUTO_OPEN_FILES = (16, 10_000)


def open_file_limit(configured: int) -> int:
    """``log.max.open.files``, with -1 resolved to a quarter of the soft ``RLIMIT_NOFILE``.

    A quarter leaves the rest to client sockets, index files and the
    interpreter; it is read once, at start-up, so a broker started under a
    lower limit (``prlimit``, ``ulimit -n``) adapts to it.
    """
    if configured > 0:
        return configured
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return _AUTO_OPEN_FILES[1]
    return max(_AUTO_OPEN_FILES[0], min(soft // 4, _AUTO_OPEN_FILES[1]))


class LogManager:
    """All partition logs of one broker; see the module docstring for the contract."""

    def __init__(self, config: Config, clock: Clock = SYSTEM_CLOCK, scheduler: KafkaScheduler | None = None) -> None:
        check_topic_maps(config)
        self.config = config
        self.log_dir = Path(config["log.dir"])
        self._clock = clock
        self._logs: dict[tuple[str, int], Log | KafkaLog] = {}
        # topic -> 1 + its highest partition with a log (the topics of self._logs); guarded by _lock
        self._topics: dict[str, int] = {}
        self._kinds: dict[str, TopicKind] = {}   # topic -> the kind of its logs; guarded by _lock
        self._overrides: dict[str, dict[str, str]] = {}   # Kafka topic -> its configs from ZooKeeper; replaced whole
        self.files = OpenFiles(open_file_limit(config.get("log.max.open.files", -1)))
        """The segment descriptors of every log (``log.max.open.files``)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._own_scheduler = scheduler is None
        self._scheduler = scheduler   # the broker's (started by it), else made and started at startup
        self._tasks: list[ScheduledTask] = []
        self.verified = threading.Event()
        """Set once the background verifier of old segments went through them all."""
        self._shut = False
        self._lock_fd: int | None = None
        self.on_flush = None
        """Given to every log as :attr:`Log.on_flush <ingest.broker.log.Log.on_flush>` (fsync seconds; metrics)."""

    # --- configuration per topic --------------------------------------------------

    def configured_partition_count(self, topic: str) -> int:
        """Partitions the configuration gives ``topic`` (``topic.partition.count.map`` or ``num.partitions``)."""
        return self.config["topic.partition.count.map"].get(topic, self.config["num.partitions"])

    def partition_count(self, topic: str) -> int:
        """THE rule for a topic's partition count on this broker: the configured count, raised by logs
        already on disk (a topic created with more partitions keeps them). The handlers, METADATA, the
        ZooKeeper registration and partition validation all ask this; O(1)."""
        return max(self.configured_partition_count(topic), self._topics.get(topic, 0))

    def _add_log_locked(self, topic: str, partition: int, lg: Log | KafkaLog, kind: TopicKind) -> None:
        lg.on_flush = self.on_flush
        self._logs[(topic, partition)] = lg
        self._topics[topic] = max(self._topics.get(topic, 0), partition + 1)
        self._kinds[topic] = kind

    def settings_for(self, topic: str) -> LogSettings:
        """A 0.7 log's settings for ``topic``."""
        return log_settings.settings_07(self.config, topic)

    def kafka_settings_for(self, topic: str) -> KafkaLogSettings:
        """A Kafka-format log's settings for ``topic``: the broker's keys, then the topic's configs
        (:meth:`set_topic_config`)."""
        return topic_config.apply(log_settings.settings_kafka(self.config, topic), self._overrides.get(topic, {}))

    def set_topic_config(self, topic: str, overrides: dict[str, str]) -> int:
        """A Kafka topic's configs (``/config/topics/[topic]``) changed: every log of the topic takes the new
        settings at once (a log reads its settings object once per operation); returns how many logs."""
        with self._lock:
            self._overrides = {**{t: o for t, o in self._overrides.items() if t != topic},
                               **({topic: dict(overrides)} if overrides else {})}
            logs = [lg for (t, _p), lg in self._logs.items() if t == topic and isinstance(lg, KafkaLog)]
        settings = self.kafka_settings_for(topic)
        for lg in logs:
            lg.settings = settings
        return len(logs)

    def delete_topic(self, topic: str) -> list[str]:
        """Close and delete every log of ``topic`` on this broker (a topic deleted in the cluster); returns the
        directories deleted. Each directory is first renamed ``<topic>-<p>.<id>-delete`` (one atomic step:
        no reader or restart sees a half-deleted log; Kafka's name), then removed; a start-up removes any
        such directory a crash left behind.

        Raises:
            StorageError: a directory could not be renamed or removed (the others are still deleted).
        """
        with self._lock:
            doomed = [(key, lg) for key, lg in self._logs.items() if key[0] == topic]
            for key, _lg in doomed:
                del self._logs[key]
            self._topics.pop(topic, None)
            self._kinds.pop(topic, None)
            self._overrides = {t: o for t, o in self._overrides.items() if t != topic}
        deleted = self._remove_logs(topic, doomed)
        if deleted:
            log.info("deleted topic %s: removed %s", topic, ", ".join(deleted))
        return deleted

    def delete_partition(self, topic: str, partition: int) -> list[str]:
        """Close and delete this broker's log of ``topic``-``partition`` (its replica moved to other brokers), as
        :meth:`delete_topic` deletes a topic's; returns the directory deleted (none when there was no log).

        Raises:
            StorageError: the directory could not be renamed or removed.
        """
        with self._lock:
            lg = self._logs.pop((topic, partition), None)
            if lg is not None and not any(t == topic for t, _p in self._logs):
                self._topics.pop(topic, None)
                self._kinds.pop(topic, None)
        deleted = self._remove_logs(topic, [] if lg is None else [((topic, partition), lg)])
        if deleted:
            log.info("deleted the replica of %s-%d: removed %s", topic, partition, ", ".join(deleted))
        return deleted

    def _remove_logs(self, topic: str, doomed: list) -> list[str]:
        """Close each ``((topic, partition), log)`` and delete its directory (renamed ``...-delete`` first)."""
        deleted, failed = [], []
        for (_t, partition), lg in sorted(doomed, key=lambda d: d[0]):
            try:
                lg.close()
            except LogOfflineError:
                pass   # the log said why as it went offline; its files go all the same
            path = self.log_dir / partition_dir_name(topic, partition)
            try:
                if path.exists():
                    gone = path.with_name(f"{path.name}.{uuid.uuid4().hex}-delete")
                    os.rename(path, gone)
                    shutil.rmtree(gone)
                deleted.append(path.name)
            except OSError as exc:
                failed.append(f"{path.name}: {exc.strerror or exc}")
        if failed:
            raise StorageError(f"cannot delete the logs of topic {topic!r}: {'; '.join(failed)}")
        return deleted

    def _open_log(self, topic: str, partition: int, kind: TopicKind) -> Log | KafkaLog:
        path = self.log_dir / partition_dir_name(topic, partition)
        if kind is TopicKind.KAFKA:
            return KafkaLog(path, self.kafka_settings_for(topic), self._clock, files=self.files)
        return Log(path, self.settings_for(topic), self._clock, files=self.files)

    def topic_kind(self, topic: str) -> TopicKind | None:
        """The kind of ``topic``'s logs on this broker, None when it has none."""
        return self._kinds.get(topic)

    def check_kind(self, topic: str, kind: TopicKind) -> None:
        """Raise :class:`~ingest.errors.WrongTopicKindError` when ``topic`` has logs of the other kind."""
        found = self._kinds.get(topic)
        if found is not None and found is not kind:
            raise wrong_kind(topic, found)

    # --- life cycle -----------------------------------------------------------------

    def startup(self) -> None:
        """Recover every log under ``log.dir``, then schedule the flusher, retention and the verifier."""
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create log.dir {self.log_dir}: {exc.strerror}") from exc
        self._take_dir_lock()
        try:
            self._load_logs()
        except BaseException:
            self.shutdown()  # closes what was loaded and releases the directory lock
            raise
        check_ms = self.flush_check_interval_ms()
        log.info("the flusher checks the flush intervals every %d ms", check_ms)
        if self._scheduler is None:
            self._scheduler = KafkaScheduler(1, name="log-scheduler").start()
        sched = self._scheduler
        self._tasks.append(sched.schedule("log-flusher", self.flush_due, period_s=check_ms / 1000.0))
        self._tasks.append(sched.schedule("log-retention", self.cleanup, period_s=self.retention_period_s()))
        steps = self._verify_steps()

        def verify_one() -> None:
            if self._stop.is_set():
                return
            if next(steps, None) is None:
                self.verified.set()
            else:
                verifier.wake()   # the next segment after the tasks due meanwhile
        verifier = sched.schedule("log-verifier", verify_one, delay_s=0.0)
        self._tasks.append(verifier)

    def _load_logs(self) -> None:
        names = sorted(e.name for e in os.scandir(self.log_dir) if e.is_dir())
        for name in [n for n in names if n.endswith("-delete")]:
            log.info("log.dir %s: removing %s, a deleted topic's log left by a crash", self.log_dir, name)
            shutil.rmtree(self.log_dir / name, ignore_errors=True)
        names = [n for n in names if not n.endswith("-delete")]
        for i, name in enumerate(names, 1):
            parsed = parse_partition_dir(name)
            if parsed is None:
                log.warning("log.dir %s: ignoring directory %r (not <topic>-<partition>)", self.log_dir, name)
                continue
            topic, partition = parsed
            if partition >= self.configured_partition_count(topic):
                log.warning("log.dir %s: %s has partition %d beyond the configured count %d; serving it anyway",
                            self.log_dir, topic, partition, self.configured_partition_count(topic))
            kind = kind_of_dir(self.log_dir / name)
            known = self._kinds.get(topic)
            if known is not None and known is not kind:
                log.error("log.dir %s: %s is a %s log but the other partitions of topic %s are %s logs; not "
                          "serving it (a topic is one kind or the other: move it away)", self.log_dir, name,
                          kind.value, topic, known.value)
                continue
            with self._lock:
                if (topic, partition) not in self._logs:
                    self._add_log_locked(topic, partition, self._open_log(topic, partition, kind), kind)
            log.info("loaded %s log %s (%d of %d)", kind.value, name, i, len(names))
        c = self.config
        if len(self._topics) > c.get("max.topics", len(self._topics)) \
                or len(self._logs) > c.get("max.broker.partitions", len(self._logs)):
            log.warning("log.dir %s holds %d topics and %d partition logs, above max.topics=%s or "
                        "max.broker.partitions=%s: all are served, none more will be created",
                        self.log_dir, len(self._topics), len(self._logs), c.get("max.topics"),
                        c.get("max.broker.partitions"))
        log.info("loaded %d logs; at most %d segment files open at once (log.max.open.files)",
                 len(self._logs), self.files.limit)

    def verify_old_segments(self) -> int:
        """Validate (and index) every segment not yet validated; returns how many were corrupt.

        Runs once in the background after start-up (one segment per run of its task) so that
        corruption in older segments is reported early (it is also caught on first read) and the
        first fetch from an old segment does not pay for the scan.
        """
        return sum(self._verify_steps())

    def _verify_steps(self):
        """Verifies one segment per step; yields 1 for a corrupt one, else 0."""
        # Newest first: those are the segments consumers are most likely to read soon.
        pending = [(lg, seg) for lg in self.logs().values() for seg in reversed(lg.segments()) if not seg.verified]
        total = sum(seg.size for _, seg in pending)
        done = corrupt = 0
        for i, (lg, seg) in enumerate(pending, 1):
            if self._stop.is_set():
                break
            try:
                acquired = seg.acquire()  # False: retention deleted it meanwhile
            except StorageError as exc:  # no descriptor free now: a first read checks it instead
                log.warning("not verifying %s/%s now: %s", lg.name, seg.path.name, exc)
                continue
            if acquired:
                try:
                    bad = not (seg.verify() if isinstance(lg, KafkaLog) else seg.verify(save=True))
                finally:
                    seg.release()
                corrupt += bad
            done += seg.size
            log.info("verified %s/%s (%d of %d segments, %d of %d MB)", lg.name, seg.path.name, i, len(pending),
                     done >> 20, total >> 20)
            yield int(acquired and bad)
        if corrupt:
            log.error("%d older segment(s) contain corrupt messages; see the errors above", corrupt)

    def _take_dir_lock(self) -> None:
        # Two brokers appending to the same files would interleave garbage. Like Kafka's
        # .lock file, but on the directory itself, so log.dir holds nothing but partitions;
        # the kernel releases it if the process dies.
        fd = os.open(self.log_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StorageError(
                f"log.dir {self.log_dir} is in use by another broker (its flock is held); "
                "give each broker its own log.dir"
            ) from None
        self._lock_fd = fd

    def flush_check_interval_ms(self) -> int:
        """How often the flusher wakes: ``log.default.flush.scheduler.interval.ms``, or the smallest flush
        interval (``log.default.flush.interval.ms``, ``topic.flush.intervals.ms``) when that is smaller,
        but not below 10 ms. A message is visible once flushed, so a topic's interval must not wait for
        a longer scheduler tick."""
        c = self.config
        smallest = min([log_settings.default_flush_ms(c), *c["topic.flush.intervals.ms"].values()])
        return min(log_settings.flush_scheduler_ms(c), max(_MIN_FLUSH_CHECK_MS, smallest))

    def retention_period_s(self) -> float:
        """Seconds between retention passes: ``log.retention.check.interval.ms`` when set, else
        ``log.cleanup.interval.mins``."""
        c = self.config
        if c.is_set("log.retention.check.interval.ms"):
            return c["log.retention.check.interval.ms"] / 1000.0
        return c["log.cleanup.interval.mins"] * 60.0

    def shutdown(self) -> None:
        """Stop the tasks (a run in progress ends first, up to 30 s), flush and close every log. Idempotent."""
        self._stop.set()
        for task in self._tasks:
            task.cancel(wait_s=30)
        self._tasks.clear()
        if self._own_scheduler and self._scheduler is not None:
            self._scheduler.shutdown()
        with self._lock:
            logs = list(self._logs.values())
            self._shut = True
        for lg in logs:
            try:
                lg.close()
            except LogOfflineError:
                pass  # the log said why, in one ERROR line, as it went offline
            except Exception:
                log.exception("closing log %s failed", lg.name)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- logs -----------------------------------------------------------------------

    def get_or_create_log(self, topic: str, partition: int, kind: TopicKind = TopicKind.V07) -> Log | KafkaLog:
        """The log of ``topic``/``partition``, created on first use as a log of ``kind``.

        Raises:
            WrongTopicKindError: the topic's logs are of the other kind.
            InvalidTopicError: the topic name is not allowed.
            WrongPartitionError: the partition is outside ``[0, partition count)``.
            TopicCreationRefusedError: creating it would pass ``max.topics`` or
                ``max.broker.partitions``, or auto-creation is off and the topic
                is not configured.
            StorageError: the log's directory or first segment cannot be created.
        """
        key = (topic, partition)
        lg = self._logs.get(key) if type(topic) is str else None
        if lg is not None:   # its name was validated when it was created (every produce asks: no regex)
            if self._kinds[topic] is not kind:
                raise wrong_kind(topic, self._kinds[topic])
            return lg
        validate_topic(topic)
        validate_partition(topic, partition, self.partition_count(topic))
        with self._lock:
            if self._shut:
                raise StorageError("the log manager is shut down")
            self.check_kind(topic, kind)
            lg = self._logs.get(key)
            if lg is None:
                self._check_can_create(topic, partition)
                lg = self._open_log(topic, partition, kind)
                self._add_log_locked(topic, partition, lg, kind)
                log.info("created %s log %s-%d", kind.value, topic, partition)
            return lg

    def get_or_create_replica_log(self, topic: str, partition: int,
                                  kind: TopicKind = TopicKind.V07) -> Log | KafkaLog:
        """The log of a replicated partition this broker holds a replica of, created on first use as a log
        of ``kind`` (the cluster topic's, from its assignment).

        The topic was created in ZooKeeper (``ingest topics create`` or a broker's auto-creation),
        so neither ``num.partitions`` nor the auto-creation limits apply; ``max.broker.partitions``
        still does.

        Raises:
            InvalidTopicError, TopicCreationRefusedError, StorageError, WrongTopicKindError: as
                :meth:`get_or_create_log`.
        """
        validate_topic(topic)
        key = (topic, partition)
        lg = self._logs.get(key)
        if lg is not None:
            self.check_kind(topic, kind)
            return lg
        with self._lock:
            if self._shut:
                raise StorageError("the log manager is shut down")
            self.check_kind(topic, kind)
            lg = self._logs.get(key)
            if lg is None:
                max_partitions = self.config.get("max.broker.partitions")
                if max_partitions is not None and len(self._logs) >= max_partitions:
                    raise TopicCreationRefusedError(
                        f"cannot create replica {topic}-{partition}: this broker already holds {len(self._logs)} "
                        f"partition logs, max.broker.partitions={max_partitions}")
                lg = self._open_log(topic, partition, kind)
                self._add_log_locked(topic, partition, lg, kind)
                log.info("created %s replica log %s-%d", kind.value, topic, partition)
            return lg

    def _check_can_create(self, topic: str, partition: int) -> None:
        """Refuse a new log beyond the limits (caller holds the lock)."""
        c = self.config
        new_topic = topic not in self._topics
        if new_topic and not c.get("auto.create.topics.enable", True) and topic not in c["topic.partition.count.map"]:
            raise TopicCreationRefusedError(
                f"topic {topic!r} does not exist on this broker and auto.create.topics.enable is false; "
                "add it to topic.partition.count.map (and restart) to create it")
        max_topics = c.get("max.topics")
        if new_topic and max_topics is not None and len(self._topics) >= max_topics:
            raise TopicCreationRefusedError(
                f"cannot create topic {topic!r}: this broker already holds {len(self._topics)} topics, "
                f"max.topics={max_topics}; raise it or delete unused topics")
        max_partitions = c.get("max.broker.partitions")
        if max_partitions is not None and len(self._logs) >= max_partitions:
            raise TopicCreationRefusedError(
                f"cannot create partition {topic}-{partition}: this broker already holds {len(self._logs)} "
                f"partition logs, max.broker.partitions={max_partitions}; raise it or delete unused topics")

    def has_topic(self, topic: str) -> bool:
        """True when this broker holds at least one log of ``topic``."""
        return topic in self._topics

    def get_log(self, topic: str, partition: int) -> Log | KafkaLog | None:
        """The log if it exists, else None (never creates one); of either kind (see :meth:`topic_kind`)."""
        return self._logs.get((topic, partition))

    def logs(self) -> dict[tuple[str, int], Log | KafkaLog]:
        with self._lock:
            return dict(self._logs)

    def topics(self, kind: TopicKind | None = None) -> dict[str, int]:
        """Topics with at least one log (of ``kind``, or of either) -> partition count (:meth:`partition_count`)."""
        with self._lock:
            names = [t for t in self._topics if kind is None or self._kinds[t] is kind]
        return {topic: self.partition_count(topic) for topic in names}

    # --- periodic work ----------------------------------------------------------------

    def flush_due(self, now_ms: int | None = None) -> int:
        """Flush every log whose flush interval elapsed; returns how many were flushed.

        A log whose fsync fails goes offline (it logs why, once) and is never
        flushed again; the other logs are flushed in the same pass.
        """
        now = self._clock.time_ms() if now_ms is None else now_ms
        flushed = 0
        for lg in self.logs().values():
            try:
                flushed += lg.maybe_flush(now)
            except LogOfflineError:
                pass  # logged by the log as it went offline; retrying the fsync would prove nothing
        return flushed

    def cleanup(self, now_ms: int | None = None) -> tuple[int, int]:
        """Apply retention to every log; returns (segments, bytes) deleted."""
        now = self._clock.time_ms() if now_ms is None else now_ms
        total_n = total_b = 0
        for lg in self.logs().values():
            try:
                n, b = lg.cleanup(now)
            except LogOfflineError:  # the roll before deleting every segment failed its flush; logged once
                continue
            total_n += n
            total_b += b
        if total_n:
            log.info("retention pass deleted %d segment(s), %d bytes", total_n, total_b)
        return total_n, total_b
