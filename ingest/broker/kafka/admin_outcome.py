"""What the admin API's handlers share: one part's outcome as Kafka's (error code, message), and the answer
of a broker without ZooKeeper.

A part of an admin request (a topic of CreateTopics, a resource of AlterConfigs) fails alone: its error
is answered with its Kafka code and the error's message, the other parts go on. A request that needs
ZooKeeper and reaches a network thread raises :class:`~ingest.errors.NeedsZooKeeperError` before any
part is done (the dispatcher serves it again on the coordination thread).
"""
from __future__ import annotations

from typing import Callable

from ingest.errors import IngestError, NeedsZooKeeperError
from ingest.wire.errors import KafkaErrorCode, kafka_code

NO_ZOOKEEPER = ("this broker runs without ZooKeeper (zk.connect is not set): its topics are its own logs, "
                "created on first use, with the settings of server.properties; creating, deleting and "
                "reconfiguring topics through the admin API needs a cluster with ZooKeeper")


def outcome(fn: Callable[[], object]) -> tuple[int, str | None, object]:
    """``(error code, message, result)`` of ``fn()``: (0, None, result), or the Kafka code of the
    :class:`~ingest.errors.IngestError` it raised and that error's message."""
    try:
        return KafkaErrorCode.NONE, None, fn()
    except NeedsZooKeeperError:
        raise
    except IngestError as exc:
        return int(kafka_code(exc)), str(exc), None


def duplicates(names) -> set:
    """The names that occur more than once (Kafka answers each of them INVALID_REQUEST)."""
    seen: set = set()
    twice: set = set()
    for n in names:
        (twice if n in seen else seen).add(n)
    return twice


def duplicate_message(name: str) -> str:
    return f"the request names {name!r} more than once; name each at most once"
