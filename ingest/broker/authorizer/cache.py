"""Every broker's copy of the ACLs in ZooKeeper, reloaded when a change notification appears.

The cache reads the whole ACL tree at start, then watches both change-notification directories
(:mod:`ingest.broker.authorizer.zk_store`) with kazoo ``ChildrenWatch``es (re-armed by kazoo after a
reconnection, which also reads the children again): a new notification wakes the cache's own thread
(never kazoo's event thread, which must not block), which reloads the tree, so an ACL
added with ``ingest acls add`` takes effect on every broker without a restart, typically within a
ZooKeeper round trip. A reload that fails (ZooKeeper away, a damaged znode) keeps the previous ACLs
and is logged rate-limited; the next notification or reconnection tries again.

Thread-safety: lookups read an immutable snapshot (one attribute read); reloads run on the cache's
thread (and once in ``start``), serialized by a lock.
"""
from __future__ import annotations

import logging
import threading

from kazoo.exceptions import KazooException

from ingest.broker.authorizer import zk_store
from ingest.broker.authorizer.acl import AclEntry, PatternType, ResourcePattern, ResourceType
from ingest.ratelimited_log import RateLimitedLog

log = logging.getLogger(__name__)

RETRY_S = 1.0


class _Snapshot:
    __slots__ = ("literal", "prefixed")

    def __init__(self, stored: dict[ResourcePattern, frozenset[AclEntry]]) -> None:
        self.literal: dict[tuple[ResourceType, str], frozenset[AclEntry]] = {}
        self.prefixed: dict[ResourceType, list[tuple[str, frozenset[AclEntry]]]] = {}
        for p, entries in stored.items():
            if p.pattern is PatternType.LITERAL:
                self.literal[(p.type, p.name)] = entries
            else:
                self.prefixed.setdefault(p.type, []).append((p.name, entries))


class AclCache:
    """The ACLs of the cluster behind the kazoo ``client`` (a started client; not closed here)."""

    def __init__(self, client) -> None:
        self.client = client
        self._snap = _Snapshot({})
        self._lock = threading.Lock()
        self._failures = RateLimitedLog(log, interval_s=60.0)
        self.reloads = 0
        self._seen: dict[str, int] = {}
        self._dirty = threading.Event()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="acl-cache", daemon=True)

    def start(self) -> "AclCache":
        """Read the ACLs and watch for changes.

        Raises:
            ValueError: an ACL znode is not readable (named in the message).
        """
        for root in (zk_store.LITERAL_CHANGES, zk_store.EXTENDED_CHANGES):
            self.client.retry(self.client.ensure_path, root)
        self.reload()
        for root in (zk_store.LITERAL_CHANGES, zk_store.EXTENDED_CHANGES):
            self.client.ChildrenWatch(root, lambda children, r=root: self._changed(r, children))
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the reload thread (the watches end with the client's session)."""
        self._halt.set()
        self._dirty.set()

    def _changed(self, root: str, children) -> bool | None:
        if self._halt.is_set():
            return False   # kazoo: stop watching
        newest = max((int(c[len(zk_store.CHANGE_PREFIX):]) for c in children
                      if c.startswith(zk_store.CHANGE_PREFIX) and c[len(zk_store.CHANGE_PREFIX):].isdigit()),
                     default=-1)
        if self._seen.get(root) != newest:
            self._seen[root] = newest
            self._dirty.set()
        return None

    def _run(self) -> None:
        while True:
            self._dirty.wait()
            if self._halt.is_set():
                return
            self._dirty.clear()
            try:
                self.reload()
            except (KazooException, ValueError) as exc:
                self._failures.warning("zookeeper", "reload", "reloading the ACLs from ZooKeeper failed (the "
                                       "previous ones stay in force until the next change): %s", exc)
                self._halt.wait(RETRY_S)
                self._dirty.set()   # try again: no change may come to retry it

    def reload(self) -> None:
        with self._lock:
            self._snap = _Snapshot(zk_store.read_all(self.client))
            self.reloads += 1
        log.info("ACLs loaded from ZooKeeper: %d literal and %d prefixed patterns", len(self._snap.literal),
                 sum(len(v) for v in self._snap.prefixed.values()))

    def entries(self, rtype: ResourceType, name: str) -> list[AclEntry]:
        """The entries of every pattern matching the resource: its literal name, the literal "*", every
        prefix of the name."""
        snap = self._snap
        out: list[AclEntry] = []
        out.extend(snap.literal.get((rtype, name), ()))
        if name != "*":
            out.extend(snap.literal.get((rtype, "*"), ()))
        for prefix, entries in snap.prefixed.get(rtype, ()):
            if name.startswith(prefix):
                out.extend(entries)
        return out

    def all_entries(self, rtype: ResourceType) -> list[AclEntry]:
        """Every entry of every pattern of ``rtype`` (for decisions by resource type)."""
        snap = self._snap
        out = [e for (t, _), entries in snap.literal.items() if t is rtype for e in entries]
        for _, entries in snap.prefixed.get(rtype, ()):
            out.extend(entries)
        return out

    def wildcard_entries(self, rtype: ResourceType) -> frozenset[AclEntry]:
        return self._snap.literal.get((rtype, "*"), frozenset())
