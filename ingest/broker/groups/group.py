"""One consumer group's membership as its coordinator keeps it: state, generation, members, chosen protocol.

The classic protocol (Kafka's ``GroupMetadata``): the coordinator never assigns; it collects every
member's JoinGroup, picks a protocol (assignor) every member supports, names one member the leader,
and hands the leader every member's metadata; the leader's SyncGroup carries the assignment, which the
coordinator hands to each member. States::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable --join, leave, session expiry--> PreparingRebalance

A member's ``join_answer`` / ``sync_answer`` is the callable that answers its waiting request. Plain
data: the coordinator's lock guards every group (not thread-safe on its own).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


@dataclass(eq=False)
class Member:
    """One member of a group."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_answer: Callable | None = None
    join_version: int = 0
    sync_answer: Callable | None = None
    last_heartbeat: float = 0.0
    heartbeat_timer: object = None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols


@dataclass(eq=False)
class Group:
    """One group (see the module docstring)."""

    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)          # ids handed out with MEMBER_ID_REQUIRED
    instances: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    join_timer: object = None
    join_not_before: float = 0.0                             # the initial rebalance delay of an empty group

    def is_empty(self) -> bool:
        return not self.members

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Whether a member with ``protocols`` may join: same type, and a protocol every member has."""
        if not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {n for n, _m in protocols}
        return bool(names & self.common_protocols())

    def common_protocols(self) -> set[str]:
        sets = [{n for n, _m in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its first protocol that every member supports; most votes win
        (ties: the first of those, in the first member's order)."""
        common = self.common_protocols()
        votes: Counter[str] = Counter()
        for m in self.members.values():
            votes[next(n for n, _ in m.protocols if n in common)] += 1
        best = max(votes.values())
        first = next(iter(self.members.values()))
        return next(n for n, _ in first.protocols if votes.get(n) == best)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.instances[member.instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        m = self.members.pop(member_id, None)
        if m is None:
            return None
        if m.instance_id is not None and self.instances.get(m.instance_id) == member_id:
            del self.instances[m.instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        if not self.members:
            self.protocol_type = None
        return m

    def rename(self, old_id: str, new_id: str) -> Member:
        """The member ``old_id`` is ``new_id`` from now on, in the same place (a static member's new id)."""
        m = self.members[old_id]
        m.member_id = new_id
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}
        if m.instance_id is not None:
            self.instances[m.instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        return m

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_answer is not None for m in self.members.values())
