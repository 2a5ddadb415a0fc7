"""The consumer-group rebalance assignment (Kafka 0.7 design), as a pure function.

For one topic T of group G: P_T = all partitions of T on the live brokers,
sorted by ``(broker_id, partition)``; C_T = the consumer *threads* (streams)
of G subscribed to T, named ``<consumer_id>-<n>`` and sorted as strings.
With N = |P_T| // |C_T| and R = |P_T| % |C_T|, the thread at sorted index j
takes the contiguous run of N partitions starting at ``j*N + min(j, R)``, plus
one more when ``j < R``: the remainder goes to the first R threads, so every
consumer computes the same answer from the same registry snapshot, each
partition has exactly one owner, and threads beyond |P_T| get nothing.
"""
from __future__ import annotations

from typing import Mapping, Sequence

BrokerPartition = tuple[int, int]


def thread_ids(consumer_id: str, count: int) -> list[str]:
    """The stream (thread) ids one consumer registers for a topic."""
    return [f"{consumer_id}-{i}" for i in range(count)]


def subscribed_threads(subscriptions: Mapping[str, Mapping[str, int]], topic: str) -> list[str]:
    """Sorted thread ids of every consumer subscribed to ``topic``.

    Args:
        subscriptions: ``{consumer_id: {topic: #streams}}`` as read from ``/consumers/[group]/ids``.
    """
    out: list[str] = []
    for cid, topics in subscriptions.items():
        out.extend(thread_ids(cid, int(topics.get(topic, 0))))
    return sorted(out)


def assign(partitions: Sequence[BrokerPartition], threads: Sequence[str]) -> dict[str, list[BrokerPartition]]:
    """Map each thread to its partitions; every thread appears (possibly with ``[]``).

    Deterministic: the result depends only on the *sets* given (both are sorted here).
    """
    parts = sorted(set(partitions))
    consumers = sorted(set(threads))
    out: dict[str, list[BrokerPartition]] = {c: [] for c in consumers}
    if not consumers:
        return out
    n, r = divmod(len(parts), len(consumers))
    for j, c in enumerate(consumers):
        start = j * n + min(j, r)
        out[c] = parts[start:start + n + (1 if j < r else 0)]
    return out
