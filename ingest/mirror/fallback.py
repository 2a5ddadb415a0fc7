"""Fallback copy: repartition by ``header.session`` with the ordinary producer, at least once.

Used for a unit that cannot be copied one to one (``MirrorUnit.target_partition``
is None: the source partition is not in the recorded mapping, or the target topic
has too few partitions or is unreplicated). Each source message set is opened
(compressed wrappers too), its messages are grouped by producer session (the
event header's ``session``; no readable header: no key, any partition) in their
order, and each group is sent as one acknowledged, synchronous ``send`` to the
target topic. The copier advances its source position only after every group of
the set was acknowledged; a restart resumes from the checkpointed source position,
so what was sent after the last checkpoint is sent again (at least once).
Within a partition a session's messages stay in order.
"""
from __future__ import annotations

import logging

from ingest.client.discovery import Discovery
from ingest.client.producer import Producer
from ingest.records.message_batch import iter_messages

log = logging.getLogger(__name__)


def make_fallback_producer(target: Discovery, *, acks: int = -1, timeout_ms: int = 10_000,
                           delivery_timeout_ms: int = 60_000) -> Producer:
    """A synchronous producer to the target cluster (acknowledged with ``acks``)."""
    return Producer({"producer.type": "sync", "request.required.acks": acks,
                     "request.timeout.ms": timeout_ms, "delivery.timeout.ms": delivery_timeout_ms,
                     "message.send.max.retries": 10}, discovery=target)


def group_by_session(message_set: bytes, header_reader) -> dict[str | None, list[bytes]]:
    """The payloads of a set (inner messages too) grouped by ``header.session`` in order (None: no header)."""
    groups: dict[str | None, list[bytes]] = {}
    for m in iter_messages(message_set):
        h = header_reader.read(m.payload) if header_reader is not None else None
        groups.setdefault(h.session if h is not None else None, []).append(m.payload)
    return groups


class FallbackSender:
    """Sends source message sets to ``topic`` on the target, repartitioned by session."""

    def __init__(self, producer: Producer, topic: str, header_reader) -> None:
        self.producer = producer
        self.topic = topic
        self.header_reader = header_reader

    def send_set(self, message_set: bytes) -> int:
        """Send every message of the set, acknowledged; returns how many. Raises what ``Producer.send`` raises."""
        n = 0
        for key, payloads in group_by_session(message_set, self.header_reader).items():
            self.producer.send(self.topic, payloads, key=key)
            n += len(payloads)
        return n
