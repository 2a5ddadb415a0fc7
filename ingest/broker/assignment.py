"""Replica assignment of a new replicated topic (Kafka 0.8's rule), as a pure function.

Sort the ``n`` brokers; partition ``i``'s first replica (its *preferred* replica,
the leader whenever it is in sync) goes to broker ``i mod n`` and its ``j``-th
replica to broker ``(i + j) mod n``. A manual assignment is checked instead:
every partition lists distinct, known brokers, all with the same count.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ingest.config import parse_int
from ingest.errors import ReplicationConfigError

MAX_PARTITIONS = 10_000


def assign(brokers: Iterable[int], partitions: int, replication_factor: int) -> dict[int, list[int]]:
    """``{partition: [broker ids]}`` for a new topic over ``brokers`` (the live ones).

    Raises:
        ReplicationConfigError: ``partitions`` outside [1, 10000], ``replication_factor``
            below 1, or above the number of brokers.
    """
    ids = sorted(set(brokers))
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ReplicationConfigError(f"partitions {partitions} is not allowed: it must be 1..{MAX_PARTITIONS}")
    if replication_factor < 1:
        raise ReplicationConfigError(
            f"replication factor {replication_factor} is not allowed: it must be at least 1 "
            f"and at most the {len(ids)} live broker(s)")
    if replication_factor > len(ids):
        raise ReplicationConfigError(
            f"replication factor {replication_factor} is larger than the {len(ids)} live broker(s) "
            f"{ids}: it must be 1..{len(ids)}")
    n = len(ids)
    return {i: [ids[(i + j) % n] for j in range(replication_factor)] for i in range(partitions)}


def check_manual(assignment: Mapping[int, Sequence[int]], known_brokers: Iterable[int]) -> dict[int, list[int]]:
    """Validate an operator's assignment (``{partition: [broker ids]}``); returns it as lists.

    Raises:
        ReplicationConfigError: partitions not 0..n-1, an empty or repeating replica list,
            replica lists of different lengths, or a broker id that is not registered.
    """
    known = set(known_brokers)
    out = {int(p): [int(b) for b in r] for p, r in assignment.items()}
    if not out or sorted(out) != list(range(len(out))):
        raise ReplicationConfigError(
            f"a manual assignment must list partitions 0..n-1 without gaps; got {sorted(out)}")
    sizes = {len(r) for r in out.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise ReplicationConfigError(
            f"every partition of a manual assignment needs the same number (>= 1) of replicas; got {out}")
    for p, replicas in out.items():
        if len(set(replicas)) != len(replicas):
            raise ReplicationConfigError(f"partition {p} lists a broker twice: {replicas}")
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise ReplicationConfigError(
                f"partition {p} names unknown broker id(s) {unknown}; registered brokers are {sorted(known)}")
    return out


def parse_manual(text: str) -> dict[int, list[int]]:
    """``"1:2:3,2:3:1"`` (partition i = i-th comma group, replicas by ':') -> assignment (Kafka's
    ``--replica-assignment`` syntax).

    Raises:
        ReplicationConfigError: not comma-separated groups of ':'-separated integers.
    """
    out: dict[int, list[int]] = {}
    for i, group in enumerate(text.split(",")):
        try:
            out[i] = [parse_int(x) for x in group.strip().split(":")]   # ASCII digits only
        except ValueError:
            raise ReplicationConfigError(
                f"replica assignment {text!r}: group {group!r} is not broker ids joined by ':' "
                "(e.g. '1:2:3,2:3:1')") from None
    return out
