"""Followers that cannot copy past a range of their leader's log: their state, and its ZooKeeper nodes.

A follower's fetcher whose leader answers CORRUPT_RANGE (the leader's bytes there
are damaged and it has not repaired them yet), or serves bytes that are not valid
messages, cannot go on: it must hold the leader's bytes at the leader's offsets.
It backs off, and reports a :class:`Stall` here (:meth:`StallBoard.report`, no
I/O: the fetcher never waits for ZooKeeper). The broker's metrics read the board
at scrape time (``ingest_broker_replica_fetch_stalled``), and the replica manager's
in-sync-set thread publishes it (:meth:`StallBoard.publish`): one ephemeral node
per stalled partition, ``znodes.replica_stall_path``, which ``ingest topics
describe`` shows. A node is this broker's own (its session's), so an existing one
is overwritten and a missing one on delete is fine; after a session expiry the
nodes are gone with it and are written again.

Concurrency: :meth:`report` and :meth:`stalls` from any thread (one lock);
:meth:`publish` from one thread at a time.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import asdict, dataclass
from typing import Callable

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ingest import znodes

log = logging.getLogger(__name__)

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Stall:
    """Why a follower does not copy past ``offset``: the leader's range ``[damaged_start,
    damaged_end)`` is damaged (-1 when the leader did not name it), in ``leader``'s epoch
    ``leader_epoch``, since ``since_ms`` (epoch ms)."""

    offset: int
    leader: int
    leader_epoch: int
    reason: str
    damaged_start: int = -1
    damaged_end: int = -1
    since_ms: int = 0

    def same_state(self, other: "Stall | None") -> bool:
        """The same stall, whenever it was seen (what the once-per-state log line keys on)."""
        return other is not None and (self.offset, self.leader, self.leader_epoch, self.damaged_start,
                                      self.damaged_end) == (other.offset, other.leader, other.leader_epoch,
                                                            other.damaged_start, other.damaged_end)

    def to_json(self) -> dict:
        return asdict(self)


class StallBoard:
    """The stalls of one broker's fetchers; ``on_change`` is called (no arguments, any thread)
    when one is reported or cleared, so that the publisher runs soon."""

    def __init__(self, broker_id: int, on_change: Callable[[], None] = lambda: None) -> None:
        self.broker_id = broker_id
        self._on_change = on_change
        self._lock = threading.Lock()
        self._stalls: dict[Key, Stall] = {}
        self._published: dict[Key, Stall] = {}
        self._session: object = None
        self._failing = False   # the last publish failed: its WARNING is written, repeats go to DEBUG

    def report(self, key: Key, stall: Stall | None) -> None:
        """Set (or, with None, clear) partition ``key``'s stall."""
        with self._lock:
            if stall is None:
                changed = self._stalls.pop(key, None) is not None
            else:
                changed = self._stalls.get(key) != stall
                self._stalls[key] = stall
        if changed:
            self._on_change()

    def stalls(self) -> dict[Key, Stall]:
        """A copy of the current stalls."""
        with self._lock:
            return dict(self._stalls)

    def publish(self, client) -> None:
        """Make this broker's stall nodes match the board (the replica manager's thread)."""
        session = getattr(client, "client_id", None)
        if session != self._session:      # a new session: the old one's ephemeral nodes are gone
            self._published = {}
            self._session = session
        wanted = self.stalls()
        for key in sorted(set(self._published) | set(wanted)):
            stall = wanted.get(key)
            if self._published.get(key) == stall:
                continue
            try:
                self._write(client, key, stall)
            except (KazooException, KazooTimeoutError) as exc:
                log.log(logging.DEBUG if self._failing else logging.WARNING, "cannot publish the replica state "
                        "of %s-%d in ZooKeeper (%s); tried again on each pass", *key, exc)
                self._failing = True
                return
            self._failing = False
            if stall is None:
                self._published.pop(key, None)
            else:
                self._published[key] = stall

    def _write(self, client, key: Key, stall: Stall | None) -> None:
        path = znodes.replica_stall_path(key[0], key[1], self.broker_id)
        if stall is None:
            try:
                client.retry(client.delete, path)
            except NoNodeError:   # our own node, gone with a session or never written
                pass
            return
        data = znodes.replica_stall_value(stall.to_json())
        try:
            client.retry(client.create, path, data, ephemeral=True, makepath=True)
        except NodeExistsError:   # our own node (this session's): overwrite it
            client.retry(client.set, path, data)
