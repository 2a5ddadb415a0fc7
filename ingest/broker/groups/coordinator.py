"""The group coordinator: the classic group protocol for the groups of the offsets partitions this broker leads.

Kafka's ``GroupCoordinator`` (classic protocol), in the same order of checks, with the same error codes:

- **JoinGroup**: a member without id gets one (``client_id-uuid``); from v4 it is answered
  MEMBER_ID_REQUIRED with it first and joins with it (KIP-394). A join starts a rebalance (state
  PreparingRebalance) unless the member is known and its protocols are unchanged and it is not the
  leader (then it gets the current generation back). The join phase ends when every known member has
  rejoined, or after the largest rebalance timeout of the members, when the dynamic members that did not
  rejoin are removed (static ones stay until their session expires); an empty group's first rebalance
  waits ``group.initial.rebalance.delay.ms`` for more members (extended by each new one, up to the
  rebalance timeout). Then the generation goes up, the protocol
  every member supports with the most first-choice votes is chosen, and every waiting member is
  answered; the leader (the first member, kept while it stays) gets every member's metadata.
- **SyncGroup**: the leader's carries the assignment (members it leaves out get an empty one); every
  member waiting in SyncGroup gets its own, and the group is Stable. A follower that syncs first waits.
- **Heartbeat**: keeps a member's session; answered REBALANCE_IN_PROGRESS while the group prepares a
  rebalance (the member rejoins). A member that sends nothing for its ``session.timeout.ms`` (and is not
  waiting in JoinGroup) is removed and the group rebalances.
- **LeaveGroup**: the members leave at once and the group rebalances without waiting for their sessions.
- **Fencing**: a request naming an unknown member is UNKNOWN_MEMBER_ID, another generation
  ILLEGAL_GENERATION; a commit during CompletingRebalance REBALANCE_IN_PROGRESS.
- **Static members** (``group.instance.id``, KIP-345): one that joins without a member id while its instance
  id is in the group takes the old id's place and assignment (without a rebalance while the group is
  Stable); the old id's later requests are FENCED_INSTANCE_ID.
- **Offsets** (:class:`~ingest.broker.groups.offset_store.OffsetStore`): a commit with generation -1 from
  no member is accepted while the group has no members (``assign`` consumers); otherwise the member and
  generation must be current (commits are allowed while a rebalance is being prepared, as Kafka allows).

Group membership is kept in memory only: after the coordinator moves (its broker failed, the partition
got a new leader), members are told NOT_COORDINATOR, find the new coordinator and join again (their old
member ids are unknown there: UNKNOWN_MEMBER_ID, they rejoin); committed offsets are in the log and are
loaded by the new coordinator.

Timers (the join phase, the initial delay, each member's session) are delayed operations in the Kafka
listener's purgatory, used as timers only: their expiry takes the coordinator's lock; nothing waits on
the purgatory while holding it.

Thread-safety: one lock over every group; answers (completing deferred replies) are called under it
and never block.
"""
from __future__ import annotations

import logging
import threading
import uuid
from typing import Callable

from ingest.broker.delayed import DelayedOp
from ingest.broker.groups.group import COMPLETING, DEAD, EMPTY, PREPARING, STABLE, Group, Member
from ingest.broker.groups.offset_store import OffsetStore
from ingest.errors import GroupRequestError
from ingest.broker.groups.offsets_topic import Committed
from ingest.wire.errors import KafkaErrorCode as E

log = logging.getLogger(__name__)

TIMER_KEY = ("group-timers",)


class JoinResult:
    """What a JoinGroup is answered with (the handler builds the version's response)."""

    __slots__ = ("error", "generation", "protocol_type", "protocol_name", "leader", "member_id", "members")

    def __init__(self, error: int, member_id: str = "", generation: int = -1, protocol_type: str | None = None,
                 protocol_name: str | None = None, leader: str = "", members=()) -> None:
        self.error, self.member_id, self.generation = error, member_id, generation
        self.protocol_type, self.protocol_name, self.leader, self.members = protocol_type, protocol_name, leader, members


class _Timer:
    """A purgatory op used as a cancellable timer."""

    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False


class GroupCoordinator:
    """The groups this broker coordinates (see the module docstring).

    Args:
        apis: the Kafka handlers' shared state (config, cluster, purgatory).
        clock: ``monotonic`` for sessions and timers, ``time_ms`` for commit timestamps.
    """

    def __init__(self, apis, clock) -> None:
        self.apis = apis
        self.config = apis.config
        self.clock = clock
        self.offsets = OffsetStore(apis, clock)
        self._lock = threading.RLock()
        self._groups: dict[str, tuple[int, Group]] = {}   # group id -> (leader epoch of its partition, group)

    # --- where a group is served ---------------------------------------------------------------

    def _group(self, group_id: str, create: bool) -> Group | None:
        """The group if this broker coordinates it (created when ``create``); caller holds the lock.

        Raises:
            GroupRequestError: INVALID_GROUP_ID, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE.
        """
        if not group_id:
            raise GroupRequestError(E.INVALID_GROUP_ID, "the group id is empty")
        _p, epoch = self.offsets.served(group_id)
        found = self._groups.get(group_id)
        if found is not None and found[0] != epoch:      # the partition moved away and back: start over
            self._drop(found[1], E.NOT_COORDINATOR)
            found = None
        if found is None:
            if not create:
                return None
            found = self._groups[group_id] = (epoch, Group(group_id))
        return found[1]

    def _drop(self, group: Group, code: int) -> None:
        for m in list(group.members.values()):
            self._answer_join(m, JoinResult(code, m.member_id))
            self._answer_sync(m, code, b"")
            self._cancel(m.heartbeat_timer)
        self._cancel(group.join_timer)
        group.state = DEAD
        self._groups.pop(group.group_id, None)

    def coordinated(self) -> list[Group]:
        """The groups with members or committed offsets that this broker coordinates now (for ListGroups)."""
        with self._lock:
            out = {g.group_id: g for _e, g in self._groups.values() if g.state != DEAD}
        for gid in self.offsets.groups():
            out.setdefault(gid, Group(gid))
        return sorted(out.values(), key=lambda g: g.group_id)

    def describe(self, group_id: str) -> tuple | None:
        """``(state, protocol type, protocol name, members)`` of the group, None when this broker knows nothing
        of it; a member is ``(member id, instance id, client id, client host, metadata, assignment)``.

        Raises:
            GroupRequestError: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, INVALID_GROUP_ID.
        """
        with self._lock:
            g = self._group(group_id, create=False)
            if g is None or g.state == DEAD:
                p = self.offsets.partition_of(group_id)
                return (EMPTY, "", "", ()) if self.offsets.fetch(group_id, p, None) else None
            members = tuple((m.member_id, m.instance_id, m.client_id, m.client_host,
                             m.metadata(g.protocol_name) if g.protocol_name else b"",
                             m.assignment if g.state == STABLE else b"") for m in g.members.values())
            return g.state, g.protocol_type or "", g.protocol_name or "", members

    # --- timers --------------------------------------------------------------------------------

    def _timer(self, delay_s: float, fire: Callable[[], None]) -> _Timer:
        t = _Timer()

        def expire() -> None:
            if not t.cancelled:
                with self._lock:
                    if not t.cancelled:
                        fire()

        self.apis.purgatory.add(TIMER_KEY, DelayedOp(self.clock.monotonic() + delay_s, lambda: t.cancelled, expire))
        return t

    @staticmethod
    def _cancel(t: _Timer | None) -> None:
        if t is not None:
            t.cancelled = True

    def _arm_session(self, group: Group, m: Member) -> None:
        self._cancel(m.heartbeat_timer)
        m.last_heartbeat = self.clock.monotonic()
        m.heartbeat_timer = self._session_timer(group, m, m.session_timeout_ms / 1000.0)

    def _session_timer(self, group: Group, m: Member, delay_s: float) -> _Timer:
        def fire() -> None:
            if group.members.get(m.member_id) is not m or group.state == DEAD:
                return
            left = m.last_heartbeat + m.session_timeout_ms / 1000.0 - self.clock.monotonic()
            if left > 0 or m.join_answer is not None:      # heard from since, or waiting in JoinGroup
                m.heartbeat_timer = self._session_timer(group, m, max(left, 0.05) if left > 0
                                                        else m.session_timeout_ms / 1000.0)
                return
            log.info("group %s: member %s sent nothing for its session timeout (%d ms): removed", group.group_id,
                     m.member_id, m.session_timeout_ms)
            self._remove_member(group, m)

        return self._timer(delay_s, fire)

    def _heard_from(self, m: Member) -> None:
        m.last_heartbeat = self.clock.monotonic()

    # --- answers -------------------------------------------------------------------------------

    @staticmethod
    def _answer_join(m: Member, result: JoinResult) -> None:
        answer, m.join_answer = m.join_answer, None
        if answer is not None:
            answer(result)

    @staticmethod
    def _answer_sync(m: Member, code: int, assignment: bytes) -> None:
        answer, m.sync_answer = m.sync_answer, None
        if answer is not None:
            answer(code, assignment)

    # --- JoinGroup -----------------------------------------------------------------------------

    def join(self, group_id: str, member_id: str, instance_id: str | None, session_timeout_ms: int,
             rebalance_timeout_ms: int, protocol_type: str, protocols: tuple[tuple[str, bytes], ...],
             client_id: str, client_host: str, version: int, answer: Callable[[JoinResult], None]) -> None:
        """Serve a JoinGroup; ``answer`` is called once, now or when the join phase ends."""
        cfg = self.config
        if not cfg["group.min.session.timeout.ms"] <= session_timeout_ms <= cfg["group.max.session.timeout.ms"]:
            answer(JoinResult(E.INVALID_SESSION_TIMEOUT, member_id))
            return
        if rebalance_timeout_ms < 0:      # v0 has no rebalance timeout: the session timeout is used
            rebalance_timeout_ms = session_timeout_ms
        with self._lock:
            try:
                group = self._group(group_id, create=not member_id)
            except GroupRequestError as exc:
                answer(JoinResult(exc.code, member_id))
                return
            if group is None:
                answer(JoinResult(E.UNKNOWN_MEMBER_ID, member_id))
                return
            if group.state == DEAD:
                answer(JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id))
                return
            if not group.supports(protocol_type, protocols):
                answer(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id))
                return
            new = Member(member_id, instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                         protocol_type, protocols, join_version=version)
            if not member_id:
                self._join_unknown(group, new, version, answer)
            else:
                self._join_known(group, new, answer)

    def _join_unknown(self, group: Group, new: Member, version: int, answer) -> None:
        if len(group.members) + len(group.pending) >= self.config["group.max.size"]:
            answer(JoinResult(E.GROUP_MAX_SIZE_REACHED, ""))
            return
        new.member_id = f"{new.client_id}-{uuid.uuid4()}"
        if new.instance_id is not None:
            if group.instances.get(new.instance_id) in group.members:
                self._replace_static(group, new, answer)
                return
        elif version >= 4:                 # KIP-394: the member comes back with its id
            group.pending.add(new.member_id)
            answer(JoinResult(E.MEMBER_ID_REQUIRED, new.member_id))
            return
        self._add_and_rebalance(group, new, answer)

    def _replace_static(self, group: Group, new: Member, answer) -> None:
        """A static member joined without a member id while its instance id is in the group (it restarted, or a
        second process uses the same instance id): the new id takes the old one's place, assignment and
        leadership; requests with the old id are FENCED_INSTANCE_ID from now on (Kafka's
        ``updateStaticMemberAndRebalance``).

        Stable: no rebalance unless the group's protocol would change; the member is answered the current
        generation with the leader as it was (so a restarted leader does not compute an assignment the stable
        group would not hand out) and gets its assignment in SyncGroup. CompletingRebalance: the leader may be
        assigning to the old id, so the group rebalances. PreparingRebalance: the member joins the rebalance.
        """
        old_id = group.instances[new.instance_id]
        m = group.members[old_id]
        leader = group.leader_id
        log.info("group %s: static member %s joined again as %s; %s is fenced", group.group_id, new.instance_id,
                 new.member_id, old_id)
        self._answer_join(m, JoinResult(E.FENCED_INSTANCE_ID, old_id))
        self._answer_sync(m, E.FENCED_INSTANCE_ID, b"")
        group.rename(old_id, new.member_id)
        m.client_id, m.client_host, m.join_version = new.client_id, new.client_host, new.join_version
        m.protocols = new.protocols
        m.session_timeout_ms, m.rebalance_timeout_ms = new.session_timeout_ms, new.rebalance_timeout_ms
        self._arm_session(group, m)
        m.join_answer = answer
        if group.state == STABLE:
            if group.select_protocol() == group.protocol_name:
                self._answer_join(m, JoinResult(0, m.member_id, group.generation, group.protocol_type,
                                                group.protocol_name, leader or ""))
            else:
                self._prepare_rebalance(group, f"static member {new.instance_id} joined with other protocols")
        elif group.state == COMPLETING:
            self._prepare_rebalance(group, f"static member {new.instance_id} joined while the group was syncing")
        else:
            self._try_complete_join(group)

    def _join_known(self, group: Group, new: Member, answer) -> None:
        mid = new.member_id
        if mid in group.pending:
            group.pending.discard(mid)
            self._add_and_rebalance(group, new, answer)
            return
        code = self._current_member(group, mid, new.instance_id)
        if code:
            answer(JoinResult(code, mid))
            return
        m = group.members[mid]
        self._heard_from(m)
        if group.state == PREPARING:
            m.protocols, m.join_version = new.protocols, new.join_version
            m.session_timeout_ms, m.rebalance_timeout_ms = new.session_timeout_ms, new.rebalance_timeout_ms
            self._answer_join(m, JoinResult(E.REBALANCE_IN_PROGRESS, mid))   # a second join replaces the first
            m.join_answer = answer
            self._try_complete_join(group)
        elif group.state == COMPLETING and m.matches(new.protocols):
            answer(self._join_result(group, m))     # the join response was lost: the same answer again
        elif group.state == STABLE and mid != group.leader_id and m.matches(new.protocols):
            answer(self._join_result(group, m))
        elif group.state in (COMPLETING, STABLE):
            m.protocols, m.join_version = new.protocols, new.join_version
            m.join_answer = answer
            self._prepare_rebalance(group, f"member {mid} rejoined")
        else:
            answer(JoinResult(E.UNKNOWN_MEMBER_ID, mid))

    def _add_and_rebalance(self, group: Group, m: Member, answer) -> None:
        m.join_answer = answer
        m.last_heartbeat = self.clock.monotonic()
        group.add(m)
        if group.state == PREPARING:
            if group.join_not_before:      # the initial delay is extended by each new member
                self._extend_initial_delay(group)
            self._try_complete_join(group)
        else:
            self._prepare_rebalance(group, f"member {m.member_id} joined")

    def _prepare_rebalance(self, group: Group, why: str) -> None:
        if group.state == COMPLETING:      # members waiting in SyncGroup must rejoin
            for m in group.members.values():
                self._answer_sync(m, E.REBALANCE_IN_PROGRESS, b"")
        was_empty = group.state == EMPTY
        group.state = PREPARING
        log.info("group %s: preparing a rebalance (generation %d): %s", group.group_id, group.generation, why)
        self._cancel(group.join_timer)
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000.0
        group.join_timer = self._timer(timeout, lambda: self._join_expired(group))
        group.join_not_before = 0.0
        delay = self.config["group.initial.rebalance.delay.ms"] / 1000.0
        if was_empty and delay > 0:
            group.join_not_before = self.clock.monotonic() + min(delay, timeout)
            self._delay_timer(group)
        self._try_complete_join(group)

    def _extend_initial_delay(self, group: Group) -> None:
        delay = self.config["group.initial.rebalance.delay.ms"] / 1000.0
        group.join_not_before = self.clock.monotonic() + delay
        self._delay_timer(group)

    def _delay_timer(self, group: Group) -> None:
        wait = max(0.0, group.join_not_before - self.clock.monotonic())
        self._timer(wait, lambda: self._initial_delay_over(group))

    def _initial_delay_over(self, group: Group) -> None:
        if group.state != PREPARING or not group.join_not_before:
            return
        if self.clock.monotonic() + 0.001 < group.join_not_before:
            return                        # extended since: a later timer decides
        group.join_not_before = 0.0
        self._try_complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.state == PREPARING and not group.join_not_before and group.all_joined():
            self._complete_join(group)

    def _join_expired(self, group: Group) -> None:
        """The rebalance timeout passed: dynamic members that did not rejoin are removed, the join phase ends.

        Static members that did not rejoin stay (KIP-345: only their session timeout removes them): the new
        generation includes them with their last metadata, and one that comes back within its session takes
        its place without another rebalance. If no member rejoined, the join phase waits another rebalance
        timeout (the sessions of the absent static members end it), as Kafka's ``onCompleteJoin``."""
        if group.state != PREPARING or self._groups.get(group.group_id, (0, None))[1] is not group:
            return
        group.join_not_before = 0.0
        group.pending.clear()
        for m in [m for m in group.members.values() if m.join_answer is None and m.instance_id is None]:
            log.info("group %s: member %s did not rejoin within the rebalance timeout: removed", group.group_id,
                     m.member_id)
            self._cancel(m.heartbeat_timer)
            group.remove(m.member_id)
        if group.members and not any(m.join_answer is not None for m in group.members.values()):
            log.warning("group %s: no member rejoined within the rebalance timeout; waiting for them or for their"
                        " sessions to expire", group.group_id)
            timeout = max(m.rebalance_timeout_ms for m in group.members.values()) / 1000.0
            group.join_timer = self._timer(timeout, lambda: self._join_expired(group))
            return
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        self._cancel(group.join_timer)
        group.join_timer = None
        group.generation += 1
        if group.is_empty():
            group.state, group.protocol_name = EMPTY, None
            log.info("group %s: generation %d is empty", group.group_id, group.generation)
            return
        group.protocol_name = group.select_protocol()
        leader = group.members.get(group.leader_id)
        if leader is None or leader.join_answer is None:    # the leader must be one that rejoined
            group.leader_id = next(mid for mid, m in group.members.items() if m.join_answer is not None)
        group.state = COMPLETING
        log.info("group %s: generation %d with %d members, protocol %s, leader %s", group.group_id, group.generation,
                 len(group.members), group.protocol_name, group.leader_id)
        for m in group.members.values():
            m.assignment = b""
            self._answer_join(m, self._join_result(group, m))
            self._arm_session(group, m)

    def _join_result(self, group: Group, m: Member) -> JoinResult:
        members = ()
        if m.member_id == group.leader_id:
            members = tuple((x.member_id, x.instance_id, x.metadata(group.protocol_name))
                            for x in group.members.values())
        return JoinResult(0, m.member_id, group.generation, group.protocol_type, group.protocol_name,
                          group.leader_id or "", members)

    # --- SyncGroup -----------------------------------------------------------------------------

    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes],
             answer: Callable[[int, bytes], None]) -> None:
        """Serve a SyncGroup; ``answer(code, assignment)`` is called once, now or when the leader syncs."""
        with self._lock:
            try:
                group = self._group(group_id, create=False)
            except GroupRequestError as exc:
                answer(exc.code, b"")
                return
            code = self._check_member(group, member_id, instance_id, generation)
            if code:
                answer(code, b"")
                return
            if (protocol_type is not None and protocol_type != group.protocol_type) or \
                    (protocol_name is not None and protocol_name != group.protocol_name):
                answer(E.INCONSISTENT_GROUP_PROTOCOL, b"")
                return
            m = group.members[member_id]
            self._heard_from(m)
            if group.state == PREPARING:
                answer(E.REBALANCE_IN_PROGRESS, b"")
            elif group.state == STABLE:
                answer(0, m.assignment)
            elif group.state == COMPLETING:
                self._answer_sync(m, E.REBALANCE_IN_PROGRESS, b"")   # a second sync replaces the first
                m.sync_answer = answer
                if member_id == group.leader_id:
                    for mid, x in group.members.items():
                        x.assignment = assignments.get(mid, b"")
                    group.state = STABLE
                    log.info("group %s: generation %d is stable", group.group_id, group.generation)
                    for x in group.members.values():
                        self._answer_sync(x, 0, x.assignment)
            else:
                answer(E.UNKNOWN_MEMBER_ID, b"")

    def _check_member(self, group: Group | None, member_id: str, instance_id: str | None, generation: int) -> int:
        if group is None or group.state == DEAD:
            return E.UNKNOWN_MEMBER_ID
        return self._current_member(group, member_id, instance_id) or \
            (E.ILLEGAL_GENERATION if generation != group.generation else 0)

    @staticmethod
    def _current_member(group: Group, member_id: str, instance_id: str | None) -> int:
        """Kafka's ``validateCurrentMember``: a static member's instance id must map to ``member_id``
        (FENCED_INSTANCE_ID when it maps to another, UNKNOWN_MEMBER_ID when to none); a dynamic member must
        be in the group."""
        if instance_id is not None:
            current = group.instances.get(instance_id)
            if current != member_id:
                return E.FENCED_INSTANCE_ID if current is not None else E.UNKNOWN_MEMBER_ID
            return 0
        return 0 if member_id in group.members else E.UNKNOWN_MEMBER_ID

    # --- Heartbeat, LeaveGroup ----------------------------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> int:
        with self._lock:
            try:
                group = self._group(group_id, create=False)
            except GroupRequestError as exc:
                return exc.code
            code = self._check_member(group, member_id, instance_id, generation)
            if code:
                return code
            if group.state == EMPTY:
                return E.UNKNOWN_MEMBER_ID
            self._heard_from(group.members[member_id])
            return E.REBALANCE_IN_PROGRESS if group.state == PREPARING else 0

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """``(group error, one error per member)``: each named member leaves now."""
        with self._lock:
            try:
                group = self._group(group_id, create=False)
            except GroupRequestError as exc:
                return exc.code, [exc.code] * len(members)
            if group is None:
                return 0, [E.UNKNOWN_MEMBER_ID] * len(members)
            codes = []
            for member_id, instance_id in members:
                if not member_id and instance_id is not None:   # an operator removing a static member by name
                    member_id = group.instances.get(instance_id, "")
                code = self._current_member(group, member_id, instance_id) if member_id else E.UNKNOWN_MEMBER_ID
                if not code:
                    log.info("group %s: member %s left", group_id, member_id)
                    self._remove_member(group, group.members[member_id])
                codes.append(code)
            return 0, codes

    def _remove_member(self, group: Group, m: Member) -> None:
        self._answer_join(m, JoinResult(E.UNKNOWN_MEMBER_ID, m.member_id))
        self._answer_sync(m, E.UNKNOWN_MEMBER_ID, b"")
        self._cancel(m.heartbeat_timer)
        group.remove(m.member_id)
        if group.state in (STABLE, COMPLETING):
            self._prepare_rebalance(group, f"member {m.member_id} left")
        elif group.state == PREPARING:
            self._try_complete_join(group)

    # --- offsets -------------------------------------------------------------------------------

    def commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
               items: list[tuple[str, int, int, int, str | None]], answer: Callable[[dict, int], None]) -> None:
        """Serve an OffsetCommit of ``(topic, partition, offset, leader epoch, metadata)`` items;
        ``answer(per-partition codes, code for all)`` is called once, after the in-sync replicas have them."""
        limit = self.config["offset.metadata.max.bytes"]
        with self._lock:
            try:
                group = self._group(group_id, create=generation < 0 and not member_id)
            except GroupRequestError as exc:
                answer({}, exc.code)
                return
            if group is None:
                answer({}, E.ILLEGAL_GENERATION if generation >= 0 else E.UNKNOWN_MEMBER_ID)
                return
            if generation < 0 and group.is_empty():
                pass                       # the group only stores offsets (assign consumers)
            else:
                code = self._check_member(group, member_id, instance_id, generation)
                if not code and group.state == COMPLETING:
                    code = E.REBALANCE_IN_PROGRESS
                if code:
                    answer({}, code)
                    return
                self._heard_from(group.members[member_id])
            p, epoch = self.offsets.served(group_id)
        now = self.clock.time_ms()
        codes: dict[tuple[str, int], int] = {}
        keep = []
        for topic, partition, offset, leader_epoch, metadata in items:
            if metadata is not None and len(metadata.encode()) > limit:
                codes[(topic, partition)] = E.OFFSET_METADATA_TOO_LARGE
            else:
                keep.append((topic, partition, Committed(offset, leader_epoch, metadata or "", now)))

        def done(code: int) -> None:
            for t, part, _c in keep:
                codes[(t, part)] = code
            answer(codes, 0)

        self.offsets.commit(group_id, p, epoch, keep, done)   # outside the lock: it may wait in the purgatory

    def fetch_offsets(self, group_id: str, wanted: list[tuple[str, int]] | None) -> dict[tuple[str, int], Committed]:
        """The group's committed offsets (every one when ``wanted`` is None).

        Raises:
            GroupRequestError: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, INVALID_GROUP_ID.
        """
        if not group_id:
            raise GroupRequestError(E.INVALID_GROUP_ID, "the group id is empty")
        p, _epoch = self.offsets.served(group_id)
        return self.offsets.fetch(group_id, p, wanted)

    def lags(self, log_end: Callable[[str, int], int | None]) -> list[tuple[str, str, int, int]]:
        """``(group, topic, partition, lag)`` of every committed offset of the groups coordinated here, where
        ``log_end(topic, partition)`` knows the partition's end (None: no replica here, left out)."""
        out = []
        for group, p in sorted(self.offsets.groups().items()):
            for (topic, partition), c in sorted(self.offsets.fetch(group, p, None).items()):
                end = log_end(topic, partition)
                if end is not None:
                    out.append((group, topic, partition, max(0, end - c.offset)))
        return out
