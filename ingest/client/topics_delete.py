"""``ingest topics delete``: mark a topic with an assignment for deletion, and wait until the cluster removed it.

Kafka's ``kafka-topics --delete`` in ZooKeeper mode: the command writes ``/admin/delete_topics/[topic]`` and
nothing else; every replica's broker then stops its replica, deletes its directories and acknowledges
(``/admin/delete_topics/[topic]/[broker_id]``), and the controller removes the topic's nodes once all have
(:mod:`ingest.broker.controller`). Which topics may be marked, and the mark itself, are
:mod:`ingest.broker.topic_deletion`'s, shared with DeleteTopics; this command deletes both kinds of
replicated topic (Kafka-format and replicated 0.7), DeleteTopics only Kafka-format ones.

``--wait`` polls ZooKeeper until the topic's nodes are gone; if they are not by then, the brokers that have
not acknowledged are named (and which of them are not registered: a broker that is down holds the
deletion up until it returns and deletes its copy).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from ingest import znodes
from ingest.broker import topic_deletion
from ingest.client.discovery import read_brokers, read_topic_partition_counts
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.errors import UnreplicatedTopicError

log = logging.getLogger(__name__)


def _read(client, path: str) -> bytes | None:
    try:
        return client.retry(client.get, path)[0]
    except NoNodeError:
        return None


def delete_topic(client, topic: str) -> str:
    """Mark ``topic`` for deletion; the line to print: Kafka's "Topic T is marked for deletion.", or
    "... already marked ...". An unreplicated 0.7 topic that no broker registers any more (every broker
    that held it had its logs removed) is only an empty ``/brokers/topics/[topic]``: that node is removed.

    Raises:
        InvalidTopicError, UnknownTopicError, UnreplicatedTopicError, ReassignmentInProgressError: see
        :func:`ingest.broker.topic_deletion.check`; ZooKeeper is unchanged then.
    """
    try:
        kind = topic_deletion.check(topic, lambda path: _read(client, path),
                                    unreplicated_brokers=lambda: read_topic_partition_counts(client, topic))
    except UnreplicatedTopicError:
        if not _remove_empty_registration(client, topic):
            raise
        return (f"Topic {topic} is an unreplicated 0.7 topic that no broker holds any more: its empty "
                f"registration {znodes.topic_dir(topic)} was removed.")
    if kind is not None and topic_deletion.mark(topic, lambda path: client.retry(client.create, path, b"",
                                                                                   makepath=True)):
        return f"Topic {topic} is marked for deletion."
    return f"Topic {topic} is already marked for deletion."


def _remove_empty_registration(client, topic: str) -> bool:
    """Delete ``/brokers/topics/[topic]`` if it has neither data nor children (conditionally on the version
    read: a broker registering meanwhile keeps it); True if it is gone."""
    path = znodes.topic_dir(topic)
    try:
        data, stat = client.retry(client.get, path)
        if data or client.retry(client.get_children, path):
            return False
        client.retry(client.delete, path, version=stat.version)
    except NoNodeError:
        return True
    except (NotEmptyError, BadVersionError):
        return False
    log.info("removed the empty registration %s of the unreplicated topic %s", path, topic)
    return True


@dataclass(frozen=True)
class Pending:
    """Where a deletion stands: ``done`` once the topic's nodes are gone; else the brokers that have not
    deleted their replicas yet (``waiting``) and which of those are not registered (``down``)."""

    done: bool
    waiting: tuple[int, ...] = ()
    down: tuple[int, ...] = ()
    controller: int | None = None

    def message(self, topic: str, waited_s: float) -> str:
        if self.done:
            return f"Topic {topic} is deleted."
        why = (f"broker(s) {list(self.waiting)} have not deleted their replicas yet"
               if self.waiting else "every replica's broker deleted its copy; the controller has not removed its "
                                    "nodes yet")
        if self.down:
            why += (f"; broker(s) {list(self.down)} are not registered (down): each deletes its copy when it "
                    "returns")
        if self.controller is None:
            why += "; no controller is running: the topic's nodes are removed when a broker becomes controller"
        return f"topic {topic!r} is not deleted after {waited_s:g} s: {why}"


def pending(client, topic: str) -> Pending:
    """Where the deletion of ``topic`` stands now (read from ZooKeeper)."""
    marker, node = _read(client, znodes.delete_topic_path(topic)), _read(client, znodes.topic_dir(topic))
    if marker is None and node is None:
        return Pending(True)
    try:
        acked = {int(b) for b in client.retry(client.get_children, znodes.delete_topic_path(topic)) if b.isdigit()}
    except NoNodeError:
        acked = set()
    try:
        assignment = znodes.parse_assignment(node) or {}
    except ValueError:
        assignment = {}
    holders = {b for replicas in assignment.values() for b in replicas}
    waiting = tuple(sorted(holders - acked))
    live = set(read_brokers(client))
    controller_data = _read(client, znodes.CONTROLLER)
    try:
        controller = znodes.parse_controller(controller_data) if controller_data else None
    except ValueError:
        controller = None
    return Pending(False, waiting, tuple(b for b in waiting if b not in live), controller)


def wait_deleted(client, topic: str, timeout_s: float, clock: Clock = SYSTEM_CLOCK, poll_s: float = 0.2) -> Pending:
    """Poll until ``topic`` is gone from ZooKeeper or ``timeout_s`` passed; where it stands then."""
    deadline = clock.monotonic() + timeout_s
    while True:
        now = pending(client, topic)
        if now.done or clock.monotonic() >= deadline:
            return now
        clock.sleep(poll_s)
