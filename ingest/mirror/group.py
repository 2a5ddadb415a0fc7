"""The mirror group: processes with the same ``mirror.group`` share the units (source partitions).

Layout (in the target cluster's ZooKeeper; paths from :mod:`ingest.znodes`)::

    /mirrors/[group]/ids/[mirror_id]  -> {"host", "pid", "started_at_ms", "units": [...],
                                          "progress": {unit: {...}}, "updated_at_ms"}   (ephemeral, JSON)

Assignment is the consumer group's rule (:func:`ingest.client.rebalance.assign`) over the sorted
unit list and the sorted member ids: every member computes the same answer from the same
snapshot, each unit has one owner. A member that dies (SIGKILL) keeps its node until its
ZooKeeper session expires (``zk.sessiontimeout.ms``); then the watch on ``ids`` fires in the
others, they recompute and the survivor starts the dead member's units. The short overlap of
two owners while members disagree (one has not seen the change yet) is harmless: every copy is a
conditional append at the expected target offset and every checkpoint write is conditional on its
znode version, so a second owner's copy fails instead of duplicating (docs/mirroring.md).

A member restarted with the same ``mirror.id`` before its old session expired finds its old
node: it deletes it (it is its own, from the dead process) and registers anew. After a session
loss the node is registered again once connected.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
from typing import Callable, Iterable, Sequence

from kazoo.exceptions import NoNodeError, NodeExistsError
from kazoo.protocol.states import KazooState

from ingest import znodes
from ingest.client.rebalance import assign
from ingest.clock import SYSTEM_CLOCK, Clock
from ingest.mirror.discovery import UnitKey

log = logging.getLogger(__name__)


def assignment(units: Iterable[UnitKey], members: Iterable[str], member_id: str) -> list[UnitKey]:
    """The units ``member_id`` owns when ``members`` share ``units`` (empty if it is not a member)."""
    unit_list = sorted(set(units))
    by_member = assign(unit_list, sorted(set(members)))  # type: ignore[arg-type]
    return [UnitKey(*u) for u in by_member.get(member_id, [])]


def read_members(zk, group: str) -> dict[str, dict]:
    """``{mirror_id: member data}`` of the registered members (a vanishing node is skipped)."""
    try:
        children = zk.retry(zk.get_children, znodes.mirror_ids_dir(group))
    except NoNodeError:
        return {}
    out = {}
    for child in sorted(children):
        try:
            data, _ = zk.retry(zk.get, znodes.mirror_member_path(group, child))
            out[child] = json.loads(data.decode() or "{}")
        except (NoNodeError, ValueError):
            continue
    return out


class MirrorGroup:
    """This process's membership: register, watch the others, compute its units.

    Args:
        zk: a started kazoo client on the target cluster's ZooKeeper (owned by the caller).
        on_change: called (no arguments, must not block) when the members change or the session
            was re-established; the mirror's control loop then rebalances.
    """

    def __init__(self, zk, group: str, member_id: str, *, on_change: Callable[[], None],
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.zk = zk
        self.group = group
        self.member_id = member_id
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._session_lost = False
        self._duplicate_logged = False
        self._data = {"host": socket.gethostname(), "pid": os.getpid(),
                      "started_at_ms": clock.time_ms(), "units": [], "progress": {}}

    @property
    def path(self) -> str:
        return znodes.mirror_member_path(self.group, self.member_id)

    def join(self) -> None:
        self.zk.retry(self.zk.ensure_path, znodes.mirror_ids_dir(self.group))
        self._register()
        self.zk.add_listener(self._on_state)
        # kazoo's ChildrenWatch recipe retries its own get_children and calls once right away
        self.zk.ChildrenWatch(znodes.mirror_ids_dir(self.group), self._on_members)

    def members(self) -> list[str]:
        try:
            return sorted(self.zk.retry(self.zk.get_children, znodes.mirror_ids_dir(self.group)))
        except NoNodeError:
            return []

    def assignment(self, units: Sequence[UnitKey]) -> list[UnitKey]:
        """This member's units among ``units`` now (none while its own node is missing)."""
        return assignment(units, self.members(), self.member_id)

    def report(self, units: Sequence[UnitKey], progress: dict[str, dict]) -> None:
        """Publish the owned units and their progress in the member node (read by ``ingest mirror status``)."""
        with self._lock:
            self._data = {**self._data, "units": [str(u) for u in units], "progress": progress,
                          "updated_at_ms": self._clock.time_ms()}
            data = json.dumps(self._data, sort_keys=True).encode()
        try:
            stat = self.zk.retry(self.zk.set, self.path, data)
        except NoNodeError:
            log.warning("mirror %s: member node gone (session lost?); registering again", self.member_id)
            self._register()
            return
        if stat.ephemeralOwner != self.zk.client_id[0] and not self._duplicate_logged:
            self._duplicate_logged = True
            log.error("mirror %s: another process registered the same mirror.id (session 0x%x): give every "
                      "process its own mirror.id; until then both copy the same partitions (fenced: no duplicate "
                      "is written, but the work is wasted)", self.member_id, stat.ephemeralOwner)

    def leave(self) -> None:
        self._closed = True
        try:
            self.zk.remove_listener(self._on_state)
        except Exception:  # not added (join failed): nothing to remove
            pass
        try:
            self.zk.retry(self.zk.delete, self.path)
        except NoNodeError:
            pass
        log.info("mirror %s left group %s", self.member_id, self.group)

    def _register(self) -> None:
        with self._lock:
            data = json.dumps(self._data, sort_keys=True).encode()
        while True:
            try:
                self.zk.retry(self.zk.create, self.path, data, ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                try:
                    _, stat = self.zk.retry(self.zk.get, self.path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    self.zk.retry(self.zk.set, self.path, data)  # ours (a replayed create)
                    break
                # a previous process with this id, killed before its session expired
                log.warning("mirror %s: removing the member node of a previous session (0x%x)",
                            self.member_id, stat.ephemeralOwner)
                try:
                    self.zk.retry(self.zk.delete, self.path)
                except NoNodeError:
                    pass
        log.info("mirror %s joined group %s", self.member_id, self.group)

    def _on_members(self, children: list[str]) -> bool:
        if self._closed:
            return False
        log.info("mirror group %s members: %s", self.group, ", ".join(sorted(children)) or "none")
        self._on_change()
        return True

    def _on_state(self, state) -> None:
        # runs on kazoo's connection thread: no ZooKeeper calls here, a worker re-registers
        if self._closed:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("mirror %s: ZooKeeper session lost", self.member_id)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            threading.Thread(target=self._reregister, name="mirror-reregister", daemon=True).start()

    def _reregister(self) -> None:
        try:
            self._register()
        except Exception:
            log.exception("mirror %s: registering again failed", self.member_id)
        self._on_change()
