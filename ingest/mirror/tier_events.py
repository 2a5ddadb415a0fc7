"""Publishing the mirror tier's audit records: monitoring events and lost ranges, to the target cluster.

:class:`TierEventPublisher` registers the producers' monitoring schema
(``conf/schemas/monitoring_event.avsc``, subject ``<monitoring topic>-value``) and the
``MirrorLostRange`` schema (``conf/schemas/mirror_lost_range.avsc``, subject
``<lost topic>-value``), serializes records with
:class:`ingest.events.serde.EventSerializer` and publishes them with a **sync** Producer
that waits for the broker's acknowledgement (``request.required.acks`` 1 or -1; 0 is
raised to 1). A publish that fails raises, so the caller keeps the records pending and
publishes them again later: they carry deterministic ``event_id`` s, and the audit drops
the copies.

:func:`lost_range_record` writes a source range the mirror lost (an
:class:`~ingest.lost_ranges.LostRange` of tier source) as a MirrorLostRange record; its
``event_id`` is a function of the unit and the range's offsets, so a gap re-detected or
re-published after a crash is the same record for the audit.

Concurrency contract: thread-safe; one publisher may serve every copier thread of a mirror
process (a lock serializes the sync requests).
"""
from __future__ import annotations

import logging
import threading
import uuid
from typing import Any, Iterable, Mapping, Sequence

from ingest.client.producer import Producer
from ingest.client.producer_config import PRODUCER_CONFIG
from ingest.config import Config
from ingest.events.envelope import HEADER_FIELD
from ingest.events.registry_client import RegistryClient
from ingest.events.schemas import MONITORING_EVENT, load_schema
from ingest.events.serde import EventSerializer, subject_for_topic
from ingest.lost_ranges import LostRange
from ingest.mirror.tier_counts import EVENT_ID_NAMESPACE, mirror_service, unit_session

log = logging.getLogger(__name__)

MIRROR_LOST_RANGE = "mirror_lost_range"
"""Name of the lost-range schema in conf/schemas."""
DEFAULT_MONITORING_TOPIC = "audit-mirror"
DEFAULT_LOST_TOPIC = "audit-mirror-lost"


def lost_range_record(lost: LostRange, *, group: str, mirror_server: str, target_partition: int | None = None,
                      target_offset: int | None = None) -> dict:
    """The MirrorLostRange record of a source range the mirror lost (field meanings in
    ``conf/schemas/mirror_lost_range.avsc``): ``lost`` of tier source, its ``source_cluster``
    the source, its ``estimated_messages`` the record's ``messages``.

    ``event_id`` = uuid5 over the unit and ``[start_offset, end_offset)``; ``header``:
    time = ``detected_at_ms``, server = the mirror host, service = ``mirror:<source>``,
    session = the unit's monitoring session, seq = ``start_offset`` (one gap per start
    offset in a unit). Session bounds are sorted by session.
    """
    source = lost.source_cluster
    session = unit_session(group, source, lost.topic, lost.broker_id, lost.partition)
    bounds = [{"session": str(s), "after_seq": None if after is None else int(after),
               "before_seq": None if before is None else int(before)} for s, after, before in lost.session_bounds]
    bounds.sort(key=lambda b: b["session"])
    start, end = int(lost.start_offset), int(lost.end_offset)
    return {
        HEADER_FIELD: {"time": int(lost.detected_at_ms), "server": mirror_server, "service": mirror_service(source),
                       "session": session, "seq": start},
        "event_id": str(uuid.uuid5(EVENT_ID_NAMESPACE, f"lost/{session}/{start}/{end}")),
        "mirror_group": group, "source_cluster": source, "topic": lost.topic, "broker_id": int(lost.broker_id),
        "partition": int(lost.partition), "start_offset": start, "end_offset": end,
        "bytes": int(lost.bytes), "messages": int(lost.estimated_messages), "messages_exact": bool(lost.messages_exact),
        "cause": lost.cause, "after_time_ms": lost.after_time_ms, "before_time_ms": lost.before_time_ms,
        "session_bounds": bounds, "target_partition": target_partition, "target_offset": target_offset,
        "detected_at_ms": int(lost.detected_at_ms),
    }


class TierEventPublisher:
    """Publishes the mirror's monitoring events and lost ranges (module docstring).

    Args:
        producer_config: the target cluster's producer keys (Config or mapping: ``zk.connect``
            or ``broker.list``, ``request.required.acks``, timeouts); sync is forced.
        registry: schema registry client.

    Raises (construction):
        RegistryUnavailableError / IncompatibleSchemaError: the schemas cannot be registered.
    """

    def __init__(self, producer_config: Config | Mapping[str, Any], registry: RegistryClient, *,
                 monitoring_topic: str = DEFAULT_MONITORING_TOPIC, lost_topic: str = DEFAULT_LOST_TOPIC) -> None:
        if not isinstance(producer_config, Config):
            # the tier events are new 0.7 topics on the target, whatever kind the copied topics are: where
            # earlier mirrors made them, and what the audit of a mirrored cluster has always read
            producer_config = PRODUCER_CONFIG.parse({"topic.format.default": "0.7", **producer_config})
        config = producer_config
        acks = config["request.required.acks"] or 1  # an unacknowledged publish could not keep events pending
        self.config = config.with_overrides({"producer.type": "sync", "request.required.acks": acks})
        self.monitoring_topic = monitoring_topic
        self.lost_topic = lost_topic
        self._monitoring = EventSerializer(registry, subject_for_topic(monitoring_topic), load_schema(MONITORING_EVENT))
        self._lost = EventSerializer(registry, subject_for_topic(lost_topic), load_schema(MIRROR_LOST_RANGE))
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        self.published = {"counts": 0, "lost_ranges": 0}

    def _send(self, topic: str, payloads: list[bytes], key: str, stat: str) -> None:
        with self._lock:
            if self._producer is None:
                self._producer = Producer(self.config)
            self._producer.send(topic, payloads, key=key)
            self.published[stat] += len(payloads)

    def publish_counts(self, events: Sequence[dict]) -> None:
        """Publish monitoring events (each with its ``header``, as :meth:`PartitionCounter.due_events` gives them).

        One request per unit session (key = the session, so a unit's events stay in order in one
        partition). Returns once the target acknowledged all of them.

        Raises:
            SchemaError: an event does not match the monitoring schema (nothing of it was sent).
            IngestError: the target did not acknowledge (some may have been written: publish again).
        """
        by_session: dict[str, list[bytes]] = {}
        for e in events:
            by_session.setdefault(e["producer_session_id"], []).append(self._monitoring.serialize(e))
        for session, payloads in by_session.items():
            self._send(self.monitoring_topic, payloads, session, "counts")
            log.debug("published %d monitoring events of %s to %s", len(payloads), session, self.monitoring_topic)

    def publish_lost_range(self, record: dict) -> None:
        """Publish one MirrorLostRange record (see :func:`lost_range_record`).

        Raises:
            SchemaError / IngestError: as :meth:`publish_counts`.
        """
        payload = self._lost.serialize(record)
        self._send(self.lost_topic, [payload], record[HEADER_FIELD]["session"], "lost_ranges")
        log.info("published lost range %s %s [%d, %d) (%d messages%s) to %s", record["source_cluster"],
                 record["topic"], record["start_offset"], record["end_offset"], record["messages"],
                 "" if record["messages_exact"] else ", estimated", self.lost_topic)

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.close()
                self._producer = None

    def __enter__(self) -> "TierEventPublisher":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
