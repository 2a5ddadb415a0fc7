"""Small I/O helpers of the copier: which errors are waited out, reading the target back, safe publishing."""
from __future__ import annotations

import logging
from typing import Callable

from kazoo.exceptions import KazooException  # the copier's ZooKeeper errors are waited out like broker ones

from ingest.errors import (
    BrokerUnavailableError,
    CoordinationError,
    IngestError,
    LeaderNotAvailableError,
    MalformedResponseError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderForPartitionError,
    RegistryUnavailableError,
    RequestTimedOutError,
    StorageError,
)
from ingest.ratelimited_log import RateLimitedLog
from ingest.records.message_set import valid_prefix

log = logging.getLogger(__name__)

_publish_failures = RateLimitedLog(log, interval_s=60.0)

TRANSIENT = (
    BrokerUnavailableError, NotLeaderForPartitionError, LeaderNotAvailableError, NotEnoughReplicasError,
    NotEnoughReplicasAfterAppendError, RequestTimedOutError, MalformedResponseError, CoordinationError,
    StorageError, RegistryUnavailableError, KazooException, OSError,
)
"""Errors after which the copier backs off (doubling, up to ``max_backoff_s``) and tries the same step again:
a broker or leader away, an election, a full or offline log, ZooKeeper or the schema registry away. The step's state is unchanged,
and a set that was appended although its answer was an error comes back as OFFSET_MISMATCH."""


def read_target(target, start: int, end: int, limit: int = 64 << 20) -> bytes | None:
    """The target partition's bytes ``[start, end)`` (None when they cannot be read: deleted, too many)."""
    if start < 0 or end - start > limit:
        return None
    out = bytearray()
    pos = start
    try:
        while pos < end:
            chunk = target.fetch_raw(pos, min(end - pos, 1 << 20))
            if not chunk:
                return None
            n = valid_prefix(chunk)
            if n == 0:
                return None
            out += chunk[:n]
            pos += n
    except IngestError as exc:
        log.info("reading the target back at %d..%d failed: %s", start, end, exc)
        return None
    return bytes(out)


def publish_safely(copier, what: str, fn: Callable[[], object]) -> bool:
    """Run a publish; True when it was acknowledged or there is no publisher, False (logged) when it failed."""
    if copier.publisher is None:
        return True
    try:
        fn()
        return True
    except (IngestError, OSError) as exc:
        _publish_failures.warning(str(copier.unit), f"publishing {what}",
                                  "%s: publishing %s failed (%s); kept pending, published again later",
                                  copier.unit, what, exc)
        return False
